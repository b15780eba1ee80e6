#include "trainer/hf_model.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/group.h"
#include "checkpoint/manifest.h"
#include "checkpoint/options.h"
#include "checkpoint/posix_io.h"
#include "checkpoint/restorer.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "ops/model/llama_params.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using checkpoint::TensorDtype;

constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kLmHead = "lm_head.weight";

[[noreturn]] void refuse(const fs::path& file, const std::string& why) {
  throw InvalidArgument("'" + file.string() + "': " + why);
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("'" + path.string() + "' cannot be opened");
  json value = json::parse(in, nullptr, false);
  if (value.is_discarded() || !value.is_object()) refuse(path, "is not a JSON object");
  return value;
}

// An integer field in [low, high]; `fallback` when absent (or null) and one is given. `parent`
// names the object holding it ("rope_scaling.") in what is refused.
int int_field(const json& c, const fs::path& file, const char* name, int low, int high, std::optional<int> fallback = {},
              const std::string& parent = "") {
  const auto it = c.find(name);
  if (it == c.end() || it->is_null()) {
    if (fallback) return *fallback;
    refuse(file, "field '" + parent + name + "' is missing");
  }
  if (!it->is_number_integer() || it->get<std::int64_t>() < low || it->get<std::int64_t>() > high) {
    refuse(file, "field '" + parent + name + "' must be an integer in [" + std::to_string(low) + ", " +
                     std::to_string(high) + "], got " + it->dump());
  }
  return it->get<int>();
}

double real_field(const json& c, const fs::path& file, const char* name, double low, double high,
                  std::optional<double> fallback, const std::string& parent = "") {
  const auto it = c.find(name);
  if (it == c.end() || it->is_null()) {
    if (fallback) return *fallback;
    refuse(file, "field '" + parent + name + "' is missing");
  }
  if (!it->is_number() || !(it->get<double>() > low && it->get<double>() <= high)) {
    refuse(file, "field '" + parent + name + "' must be a number in (" + std::to_string(low) + ", " +
                     std::to_string(high) + "], got " + it->dump());
  }
  return it->get<double>();
}

// A field hdp cannot train with any value but `allowed` (absent or null counts as allowed).
void must_be(const json& c, const fs::path& file, const char* name, const json& allowed, const std::string& why) {
  const auto it = c.find(name);
  if (it == c.end() || it->is_null() || *it == allowed) return;
  refuse(file, std::string("field '") + name + "' is " + it->dump() + ": " + why);
}

}  // namespace

namespace {

using ops::model::Family;
using ops::model::RopeType;

// rope_scaling, or transformers' newer rope_parameters (`field`): its rope_type ("type" in older
// configs) and that type's fields; another rope_type is refused by name.
ops::model::RopeScaling read_rope_scaling(const json& r, const fs::path& path, const std::string& field) {
  ops::model::RopeScaling s;
  const auto type = r.contains("rope_type") ? r.find("rope_type") : r.find("type");
  if (type == r.end() || type->is_null()) return s;
  if (!type->is_string() || (*type != "default" && *type != "linear" && *type != "llama3")) {
    refuse(path, "field '" + field + ".rope_type' is " + type->dump() +
                     ": hdp implements RoPE scaling 'default', 'linear' and 'llama3'");
  }
  s.type = ops::model::parse_rope_type(type->get<std::string>());
  if (s.type == RopeType::kDefault) return s;
  const std::string parent = field + ".";
  s.factor = real_field(r, path, "factor", 0, 1e6, std::nullopt, parent);
  if (s.type == RopeType::kLinear) return s;
  s.low_freq_factor = real_field(r, path, "low_freq_factor", 0, 1e6, std::nullopt, parent);
  s.high_freq_factor = real_field(r, path, "high_freq_factor", 0, 1e6, std::nullopt, parent);
  if (s.high_freq_factor <= s.low_freq_factor) {
    refuse(path, "field '" + parent + "high_freq_factor' must exceed low_freq_factor, got " + r["high_freq_factor"].dump());
  }
  s.original_max_positions = int_field(r, path, "original_max_position_embeddings", 1, 1 << 30, std::nullopt, parent);
  return s;
}

// The family's fields: Qwen2's biases and its sliding window switch, Mistral's window.
void read_family_fields(const json& c, const fs::path& path, ops::model::LlamaConfig& m) {
  if (m.family == Family::kQwen2) {
    m.qkv_bias = true;  // Qwen2Attention: q, k and v always carry biases, o none
    must_be(c, path, "use_sliding_window", false, "hdp's attention has no sliding window");
    return;
  }
  must_be(c, path, "attention_bias", false, "hdp's attention has no biases in a llama or mistral model");
  if (m.family == Family::kMistral) m.sliding_window = int_field(c, path, "sliding_window", 1, 1 << 30, 0);
}

}  // namespace

ops::model::LlamaConfig read_hf_config(const fs::path& path) {
  const json c = read_json_file(path);
  const auto type = c.find("model_type");
  if (type == c.end() || !type->is_string()) refuse(path, "field 'model_type' is missing (hdp reads LLaMA configs)");
  if (*type != "llama" && *type != "mistral" && *type != "qwen2") {
    refuse(path, "field 'model_type' is " + type->dump() + ": hdp trains llama, mistral and qwen2 models");
  }
  ops::model::LlamaConfig m;
  m.family = ops::model::parse_family(type->get<std::string>());
  if (const auto r = c.find("rope_scaling"); r != c.end() && !r->is_null()) {
    if (!r->is_object()) refuse(path, "field 'rope_scaling' is " + r->dump() + ": expected an object or null");
    m.rope_scaling = read_rope_scaling(*r, path, "rope_scaling");
  }
  const auto params = c.find("rope_parameters");
  if (params != c.end() && params->is_object()) m.rope_scaling = read_rope_scaling(*params, path, "rope_parameters");
  read_family_fields(c, path, m);
  must_be(c, path, "mlp_bias", false, "hdp's MLP has no biases");
  must_be(c, path, "hidden_act", "silu", "hdp's MLP is SwiGLU (silu)");
  if (const auto tie = c.find("tie_word_embeddings"); tie != c.end() && !tie->is_null()) {
    if (!tie->is_boolean()) refuse(path, "field 'tie_word_embeddings' is " + tie->dump() + ": expected true or false");
    m.tie_embeddings = tie->get<bool>();
  }
  m.vocab_size = int_field(c, path, "vocab_size", 1, 1 << 24);
  m.d_model = int_field(c, path, "hidden_size", 1, 1 << 20);
  m.n_layers = int_field(c, path, "num_hidden_layers", 1, 1 << 12);
  m.n_heads = int_field(c, path, "num_attention_heads", 1, 1 << 12);
  m.n_kv_heads = int_field(c, path, "num_key_value_heads", 1, 1 << 12, m.n_heads);
  m.ffn_dim = int_field(c, path, "intermediate_size", 1, 1 << 22);
  double theta = real_field(c, path, "rope_theta", 0, 1e12, 10000.0);
  if (params != c.end() && params->is_object()) theta = real_field(*params, path, "rope_theta", 0, 1e12, theta, "rope_parameters.");
  m.rope_theta = theta;
  m.norm_eps = real_field(c, path, "rms_norm_eps", 0, 1, 1e-6);
  // Carried to the export (the larger of it and the trained context), never a limit on --context.
  m.max_positions = int_field(c, path, "max_position_embeddings", 1, 1 << 30, 0);
  // HF: head_dim when given, else hidden_size / num_attention_heads (which must divide then). One
  // equal to that quotient is no explicit head_dim: the config, and the manifest that records it,
  // are the same as without the field (as hdp's own export writes it).
  m.explicit_head_dim = int_field(c, path, "head_dim", 1, 1 << 16, 0);
  if (m.d_model % m.n_heads == 0 && m.explicit_head_dim == m.d_model / m.n_heads) m.explicit_head_dim = 0;
  if (m.explicit_head_dim == 0 && m.d_model % m.n_heads != 0) {
    refuse(path, "field 'hidden_size' must be a multiple of num_attention_heads when there is no head_dim");
  }
  try {
    m.validate();
  } catch (const InvalidArgument& e) {
    refuse(path, e.what());
  }
  return m;
}

namespace {

// rope_scaling as Hugging Face writes it: null for plain RoPE.
json rope_scaling_json(const ops::model::RopeScaling& r) {
  if (r.type == RopeType::kDefault) return nullptr;
  json j = {{"rope_type", ops::model::rope_type_name(r.type)}, {"factor", r.factor}};
  if (r.type == RopeType::kLlama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_positions;
  }
  return j;
}

}  // namespace

json hf_config(const ops::model::LlamaConfig& m, TensorDtype dtype) {
  const char* architecture = m.family == Family::kQwen2     ? "Qwen2ForCausalLM"
                             : m.family == Family::kMistral ? "MistralForCausalLM"
                                                            : "LlamaForCausalLM";
  json config = {{"architectures", {architecture}},
          {"model_type", ops::model::family_name(m.family)},
          {"vocab_size", m.vocab_size},
          {"hidden_size", m.d_model},
          {"intermediate_size", m.ffn_dim},
          {"num_hidden_layers", m.n_layers},
          {"num_attention_heads", m.n_heads},
          {"num_key_value_heads", m.n_kv_heads},
          {"head_dim", m.head_dim()},
          {"hidden_act", "silu"},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", rope_scaling_json(m.rope_scaling)},
          {"tie_word_embeddings", m.tie_embeddings},
          {"torch_dtype", dtype == TensorDtype::kBF16 ? "bfloat16" : "float32"}};
  if (m.family == Family::kQwen2) {
    config["use_sliding_window"] = false;
  } else {
    config["attention_bias"] = false;
    config["mlp_bias"] = false;
  }
  if (m.family == Family::kMistral) config["sliding_window"] = m.sliding_window > 0 ? json(m.sliding_window) : json(nullptr);
  if (m.max_positions > 0) config["max_position_embeddings"] = m.max_positions;
  return config;
}

json model_manifest_json(const ops::model::LlamaConfig& m) {
  json j = {{"architecture", "llama"},   {"vocab_size", m.vocab_size}, {"d_model", m.d_model},
            {"n_layers", m.n_layers},     {"n_heads", m.n_heads},       {"n_kv_heads", m.n_kv_heads},
            {"ffn_dim", m.ffn_dim},       {"rope_theta", m.rope_theta}, {"norm_eps", m.norm_eps},
            {"max_position_embeddings", m.max_positions}};
  // The families' fields only where they differ from a plain untied llama: a plain model's record
  // stays what builds before them wrote, so their checkpoints restore into a job (manifest.h
  // compares the records).
  if (m.family != Family::kLlama) j["family"] = ops::model::family_name(m.family);
  if (m.explicit_head_dim > 0) j["head_dim"] = m.explicit_head_dim;
  if (m.rope_scaling.type != RopeType::kDefault) j["rope_scaling"] = rope_scaling_json(m.rope_scaling);
  if (m.tie_embeddings) j["tie_word_embeddings"] = true;
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  return j;
}

ops::model::LlamaConfig model_from_manifest(const json& j) {
  try {
    ops::model::LlamaConfig m;
    m.vocab_size = j.at("vocab_size").get<int>();
    m.d_model = j.at("d_model").get<int>();
    m.n_layers = j.at("n_layers").get<int>();
    m.n_heads = j.at("n_heads").get<int>();
    m.n_kv_heads = j.at("n_kv_heads").get<int>();
    m.ffn_dim = j.at("ffn_dim").get<int>();
    m.rope_theta = j.at("rope_theta").get<double>();
    m.norm_eps = j.at("norm_eps").get<double>();
    m.max_positions = j.value("max_position_embeddings", 0);  // absent in checkpoints of older builds
    // Absent in checkpoints of builds before the model families: a plain, untied llama.
    m.family = ops::model::parse_family(j.value("family", std::string("llama")));
    m.explicit_head_dim = j.value("head_dim", 0);
    if (const auto r = j.find("rope_scaling"); r != j.end() && !r->is_null()) {
      m.rope_scaling = read_rope_scaling(*r, "the checkpoint's manifest", "rope_scaling");
    }
    m.tie_embeddings = j.value("tie_word_embeddings", false);
    m.qkv_bias = j.value("qkv_bias", false);
    m.sliding_window = j.value("sliding_window", 0);
    m.validate();
    return m;
  } catch (const json::exception& e) {
    throw InvalidArgument(std::string("the checkpoint's model config is not one hdp wrote: ") + e.what());
  }
}

namespace {

// A tied model's file that holds lm_head.weight (in `file`, at `path`): refused unless it equals
// the embedding already read into `params`.
void check_tied_head(const checkpoint::SafetensorsFile& file, const fs::path& path, const ops::model::LlamaConfig& config,
                     std::span<const float> params) {
  const auto embed = ops::model::param_layout(config).front();
  std::vector<float> head(static_cast<std::size_t>(embed.shape[0] * embed.shape[1]));
  if (file.tensors().at(kLmHead).elements() != static_cast<std::int64_t>(head.size())) {
    refuse(path, "tensor 'lm_head.weight' is not the shape of the tied embedding");
  }
  file.read(kLmHead, head);
  if (!std::equal(head.begin(), head.end(), params.begin())) {
    refuse(path, "tensor 'lm_head.weight' differs from model.embed_tokens.weight, but the config ties them "
                 "(field 'tie_word_embeddings' is true)");
  }
}

}  // namespace

void load_hf_weights(const fs::path& dir, const ops::model::LlamaConfig& config, std::span<float> params) {
  const auto layout = ops::model::param_layout(config);
  if (static_cast<std::int64_t>(params.size()) != ops::model::param_count(config)) {
    throw InvalidArgument("load_hf_weights: the buffer does not fit the model");
  }
  // Which file holds each tensor.
  std::map<std::string, fs::path> where;
  std::map<fs::path, std::unique_ptr<checkpoint::SafetensorsFile>> files;
  const bool sharded = fs::exists(dir / kIndexFile);
  if (sharded) {
    const json index = read_json_file(dir / kIndexFile);
    const auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object()) refuse(dir / kIndexFile, "field 'weight_map' is not an object");
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        refuse(dir / kIndexFile, "weight_map entry " + quote_value(name) + " is not a file name in the directory");
      }
      where[name] = dir / file.get<std::string>();
    }
  } else if (fs::exists(dir / kWeightsFile)) {
    auto file = std::make_unique<checkpoint::SafetensorsFile>(dir / kWeightsFile);
    for (const auto& [name, info] : file->tensors()) where[name] = dir / kWeightsFile;
    files.emplace(dir / kWeightsFile, std::move(file));
  } else {
    throw InvalidArgument("'" + dir.string() + "' holds neither " + kWeightsFile + " nor " + kIndexFile);
  }
  auto file_of = [&](const fs::path& path) -> const checkpoint::SafetensorsFile& {
    auto& slot = files[path];
    if (!slot) slot = std::make_unique<checkpoint::SafetensorsFile>(path);
    return *slot;
  };
  // Sharded: every shard holds only what the index places in it (a tensor it does not list, or
  // lists in another shard, is refused naming the shard).
  std::set<fs::path> shards;
  if (sharded) {
    for (const auto& [name, path] : where) shards.insert(path);
  }
  for (const fs::path& path : shards) {
    for (const auto& [held, info] : file_of(path).tensors()) {
      if (held.ends_with("rotary_emb.inv_freq")) continue;
      const auto listed = where.find(held);
      if (listed == where.end()) {
        refuse(path, "holds tensor " + quote_value(held) + ", which " + kIndexFile + " does not list");
      }
      if (listed->second != path) {
        refuse(path, "holds tensor " + quote_value(held) + ", which " + kIndexFile + " places in " +
                         quote_value(listed->second.filename().string()));
      }
    }
  }
  std::set<std::string> expected;
  for (const auto& p : layout) {
    expected.insert(p.name);
    const auto it = where.find(p.name);
    if (it == where.end()) refuse(dir / (sharded ? kIndexFile : kWeightsFile), "tensor " + quote_value(p.name) + " is missing");
    const auto& file = file_of(it->second);
    const auto t = file.tensors().find(p.name);
    if (t == file.tensors().end()) refuse(it->second, "has no tensor " + quote_value(p.name) + " (the index names it)");
    std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
    if (t->second.shape != shape) {
      const auto dims = [](const std::vector<std::int64_t>& s) {
        return join(s, ", ", [](std::int64_t d) { return std::to_string(d); });
      };
      refuse(it->second, "tensor " + quote_value(p.name) + " has shape [" + dims(t->second.shape) + "], the config says [" +
                             dims(shape) + "]");
    }
    file.read(p.name, params.subspan(static_cast<std::size_t>(p.offset), static_cast<std::size_t>(t->second.elements())));
  }
  // Tied: Hugging Face accepts a file with lm_head.weight when it equals the embedding.
  if (config.tie_embeddings && where.contains(kLmHead)) {
    check_tied_head(file_of(where[kLmHead]), where[kLmHead], config, params);
    expected.insert(kLmHead);
  }
  for (const auto& [name, path] : where) {
    if (expected.contains(name) || name.ends_with("rotary_emb.inv_freq")) continue;
    refuse(path, "tensor " + quote_value(name) + " is not part of the model the config describes");
  }
}

namespace {

// A checkpoint's parameters restored whole (checksums verified), its model and step.
LoadedModel restore_params(const fs::path& checkpoint) {
  // A step directory or a root.
  checkpoint::CheckpointOptions restore;
  fs::path manifest_dir;
  if (auto step = checkpoint::parse_step_dir(checkpoint.filename().string())) {
    restore.root = checkpoint.parent_path();
    restore.only_step = *step;
    manifest_dir = checkpoint;
  } else {
    const auto committed = checkpoint::list_committed(checkpoint);
    if (committed.empty()) {
      throw InvalidArgument("'" + checkpoint.string() + "' is neither a checkpoint directory (step-<N>) nor a root holding one");
    }
    restore.root = checkpoint;
    manifest_dir = committed.back().path;
  }
  restore.model_config = checkpoint::read_manifest(manifest_dir).model_config;
  LoadedModel loaded;
  loaded.config = model_from_manifest(restore.model_config);
  const checkpoint::FlatLayout layout = checkpoint_layout(loaded.config);
  loaded.params.resize(static_cast<std::size_t>(layout.total()));
  std::vector<float> m(loaded.params.size()), v(loaded.params.size());
  checkpoint::SoloGroup solo;
  const checkpoint::ShardTarget target{{0, layout.total()}, {std::span(loaded.params), std::span(m), std::span(v)}};
  const auto progress = checkpoint::restore_latest(restore, layout, solo, target);
  if (!progress) throw InvalidArgument("no committed checkpoint under '" + restore.root.string() + "'");
  loaded.step = progress->step;
  return loaded;
}

}  // namespace

LoadedModel load_model(const fs::path& path) {
  if (fs::exists(path / "config.json")) {
    LoadedModel loaded;
    loaded.config = read_hf_config(path / "config.json");
    loaded.params.resize(static_cast<std::size_t>(ops::model::param_count(loaded.config)));
    load_hf_weights(path, loaded.config, loaded.params);
    return loaded;
  }
  return restore_params(path);
}

ExportResult export_checkpoint(const ExportOptions& options) {
  const LoadedModel loaded = restore_params(options.checkpoint);
  const ops::model::LlamaConfig& model = loaded.config;
  const std::vector<float>& params = loaded.params;

  fs::create_directories(options.out);
  for (const char* name : {kWeightsFile, kIndexFile}) {
    if (fs::exists(options.out / name)) {
      throw InvalidArgument("'" + (options.out / name).string() + "' exists: export into an empty directory");
    }
  }
  ExportResult result;
  result.step = loaded.step;
  // Tensors in layout order, cut into shards of at most max_shard_bytes.
  const auto entries = ops::model::param_layout(model);
  const auto element = static_cast<std::int64_t>(checkpoint::dtype_bytes(options.dtype));
  std::vector<std::vector<checkpoint::TensorToWrite>> shards(1);
  std::int64_t in_shard = 0;
  for (const auto& p : entries) {
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    if (in_shard > 0 && in_shard + n * element > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({p.name, std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                             std::span<const float>(params).subspan(static_cast<std::size_t>(p.offset), static_cast<std::size_t>(n))});
    in_shard += n * element;
    result.tensor_bytes += n * element;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"producer", "hdp"},
                                                    {"step", std::to_string(loaded.step)}};
  if (shards.size() == 1) {
    checkpoint::write_safetensors(options.out / kWeightsFile, shards[0], options.dtype, metadata);
    result.files.push_back(options.out / kWeightsFile);
  } else {
    json weight_map = json::object();
    for (std::size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      checkpoint::write_safetensors(options.out / name, shards[i], options.dtype, metadata);
      for (const auto& t : shards[i]) weight_map[t.name] = name;
      result.files.push_back(options.out / name);
    }
    const json index = {{"metadata", {{"total_size", result.tensor_bytes}}}, {"weight_map", weight_map}};
    checkpoint::replace_file_atomically(options.out / kIndexFile, index.dump(2) + "\n");
    result.files.push_back(options.out / kIndexFile);
  }
  checkpoint::replace_file_atomically(options.out / "config.json", hf_config(model, options.dtype).dump(2) + "\n");
  result.files.insert(result.files.begin(), options.out / "config.json");
  return result;
}

}  // namespace hdp::trainer
