// The user's model in and out (trainer/hf_model.h, checkpoint/safetensors.h): safetensors written
// and read back (f32 bitwise, bf16 within its rounding), every malformed file refused naming the
// file and what is wrong, Hugging Face configs read and refused field by field, and a real
// checkpoint exported by `hdp export` (one file and sharded) loaded back bitwise; a shard holding a
// tensor its index does not place there refused.
#include "trainer/hf_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "kernels/cpu/bf16.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/safetensors.h"
#include "ops/model/llama_model.h"
#include "ops/model/llama_params.h"
#include "ops/rope.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "trainer/sample.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;
using checkpoint::TensorDtype;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}
std::string header_of(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json;
}
// The InvalidArgument text of opening `path`, or "" when it opened.
std::string open_error(const fs::path& path) {
  try {
    SafetensorsFile file(path);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

TEST(Safetensors, F32IsBitwiseAndBf16IsWithinItsRounding) {
  hdp::test::TempDir dir;
  std::vector<float> a = {1.0f, -2.5f, 3.14159265f, 1e-30f, -0.0f, 65504.0f};
  std::vector<float> b(12);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::sin(static_cast<float>(i)) * 1000.0f;
  const std::vector<checkpoint::TensorToWrite> tensors = {{"z.b", {3, 4}, b}, {"a", {6}, a}};
  checkpoint::write_safetensors(dir.path() / "f32.safetensors", tensors, TensorDtype::kF32, {{"format", "pt"}});
  checkpoint::write_safetensors(dir.path() / "bf16.safetensors", tensors, TensorDtype::kBF16);
  const SafetensorsFile f32(dir.path() / "f32.safetensors");
  EXPECT_EQ(f32.metadata().at("format"), "pt");
  ASSERT_EQ(f32.tensors().size(), 2u);
  EXPECT_EQ(f32.tensors().at("z.b").shape, (std::vector<std::int64_t>{3, 4}));
  std::vector<float> back(12);
  f32.read("z.b", back);
  EXPECT_EQ(0, std::memcmp(back.data(), b.data(), 48));
  // The data starts 8-aligned, and each tensor at a multiple of its element size.
  const std::string bytes = read_bytes(dir.path() / "f32.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);
  for (const auto& [name, t] : f32.tensors()) EXPECT_EQ(t.begin % 4, 0) << name;
  const SafetensorsFile bf16(dir.path() / "bf16.safetensors");
  EXPECT_EQ(bf16.tensors().at("a").dtype, TensorDtype::kBF16);
  std::vector<float> half(6);
  bf16.read("a", half);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(std::abs(half[i] - a[i]), std::abs(a[i]) * std::ldexp(1.0f, -8)) << i << ": " << half[i] << " vs " << a[i];
  }
  EXPECT_EQ(kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f) << "a tie rounds to even";
  EXPECT_TRUE(std::isnan(kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(NAN))));
  EXPECT_EQ(checkpoint::from_f16(0x3c00), 1.0f);
  EXPECT_EQ(checkpoint::from_f16(0xc000), -2.0f);
  EXPECT_EQ(checkpoint::from_f16(0x0001), std::ldexp(1.0f, -24)) << "subnormal";
}

TEST(Safetensors, EveryMalformedFileIsRefusedNamingTheFileAndTheFault) {
  hdp::test::TempDir dir;
  const std::vector<float> v(4, 1.0f);
  checkpoint::write_safetensors(dir.path() / "good.safetensors", {{"w", {4}, v}}, TensorDtype::kF32);
  const std::string good = read_bytes(dir.path() / "good.safetensors");
  const std::string tensor = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {good.substr(0, good.size() - 1), "the file is truncated or its header lies"},
      {good.substr(0, 5), "shorter than the 8-byte header length"},
      {header_of("{\"w\":") + std::string(16, '\0'), "not a JSON object"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "above 100,000,000"},
      {header_of("{}").substr(0, 8) + std::string("\x40", 1), "runs past the end of the file"},
      {header_of(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})") + std::string(16, '\0'), "dtype 'I64'"},
      {header_of(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})") + std::string(16, '\0'), "its dtype and shape say 20"},
      {header_of(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})") + std::string(16, '\0'), "outside the data section"},
      {header_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})") + std::string(16, '\0'), "a hole or an overlap"},
      {header_of(tensor) + std::string(20, '\0'), "the data section holds 20"},
      {header_of(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})") + std::string(16, '\0'), "not a non-negative integer"},
      {header_of(R"({"__metadata__":{"a":1},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})") + std::string(16, '\0'),
       "not a string"},
  };
  int i = 0;
  for (const auto& [bytes, reason] : cases) {
    const fs::path path = dir.path() / ("bad" + std::to_string(i++) + ".safetensors");
    write_bytes(path, bytes);
    const std::string error = open_error(path);
    EXPECT_NE(error.find(path.string()), std::string::npos) << error;
    EXPECT_NE(error.find(reason), std::string::npos) << "case " << i - 1 << ": " << error;
  }
}

fs::path write_config(const fs::path& dir, const nlohmann::json& config) {
  const fs::path path = dir / "config.json";
  std::ofstream(path) << config.dump();
  return path;
}

nlohmann::json llama_config() {
  return {{"model_type", "llama"},      {"vocab_size", 300},        {"hidden_size", 64},
          {"intermediate_size", 192},   {"num_hidden_layers", 2},   {"num_attention_heads", 4},
          {"num_key_value_heads", 2},   {"rope_theta", 500000.0},   {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", false}, {"hidden_act", "silu"},   {"max_position_embeddings", 4096}};
}

TEST(HfConfig, ALlamaConfigIsReadAndWhatHdpCannotTrainIsRefusedByName) {
  hdp::test::TempDir dir;
  const auto m = read_hf_config(write_config(dir.path(), llama_config()));
  EXPECT_EQ(m.vocab_size, 300);
  EXPECT_EQ(m.d_model, 64);
  EXPECT_EQ(m.n_kv_heads, 2);
  EXPECT_EQ(m.ffn_dim, 192);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.norm_eps, 1e-5);
  EXPECT_EQ(m.max_positions, 4096);
  // What hdp writes, it reads back.
  std::ofstream(dir.path() / "back.json") << hf_config(m, TensorDtype::kBF16).dump();
  const auto back = read_hf_config(dir.path() / "back.json");
  EXPECT_EQ(back.d_model, m.d_model);
  EXPECT_EQ(back.rope_theta, m.rope_theta);
  EXPECT_EQ(back.max_positions, 4096);
  // max_position_embeddings is optional (0: not known), and left out of what hdp writes then.
  nlohmann::json unknown = llama_config();
  unknown.erase("max_position_embeddings");
  const auto without = read_hf_config(write_config(dir.path(), unknown));
  EXPECT_EQ(without.max_positions, 0);
  EXPECT_FALSE(hf_config(without, TensorDtype::kF32).contains("max_position_embeddings"));
  const std::vector<std::pair<nlohmann::json, std::string>> refused = {
      {{{"model_type", "gemma"}}, "'model_type'"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}}}}, "'rope_scaling.rope_type'"},
      {{{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}, "'rope_scaling.rope_type'"},
      {{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "'rope_scaling.low_freq_factor'"},
      {{{"rope_scaling", {{"rope_type", "linear"}}}}, "'rope_scaling.factor'"},
      {{{"rope_scaling", "llama3"}}, "'rope_scaling'"},
      {{{"rope_parameters", {{"rope_type", "yarn"}}}}, "'rope_parameters.rope_type'"},
      {{{"tie_word_embeddings", "yes"}}, "'tie_word_embeddings'"},
      {{{"attention_bias", true}}, "'attention_bias'"},
      {{{"model_type", "mistral"}, {"attention_bias", true}}, "'attention_bias'"},
      {{{"model_type", "qwen2"}, {"use_sliding_window", true}}, "'use_sliding_window'"},
      {{{"model_type", "mistral"}, {"sliding_window", 0}}, "'sliding_window'"},
      {{{"mlp_bias", true}}, "'mlp_bias'"},
      {{{"hidden_act", "gelu"}}, "'hidden_act'"},
      {{{"head_dim", 0}}, "'head_dim'"},
      {{{"head_dim", 7}}, "head_dim 7 must be even"},
      {{{"hidden_size", "64"}}, "'hidden_size'"},
      {{{"num_attention_heads", 0}}, "'num_attention_heads'"},
      {{{"rms_norm_eps", -1}}, "'rms_norm_eps'"},
      {{{"max_position_embeddings", 0}}, "'max_position_embeddings'"},
      {{{"max_position_embeddings", "4096"}}, "'max_position_embeddings'"},
      {{{"max_position_embeddings", 4096.5}}, "'max_position_embeddings'"},
  };
  for (const auto& [change, field] : refused) {
    nlohmann::json c = llama_config();
    c.update(change);
    try {
      read_hf_config(write_config(dir.path(), c));
      ADD_FAILURE() << change.dump() << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
  nlohmann::json missing = llama_config();
  missing.erase("hidden_size");
  EXPECT_THROW(read_hf_config(write_config(dir.path(), missing)), InvalidArgument);
}

// The published configs (tests/trainer/published_configs, copied from the model cards' config.json)
// are read with each family's features, and the parameter count is the model card's.
TEST(HfConfig, PublishedLlamaQwenAndMistralConfigsHaveTheirModelCardsParameterCounts) {
  const fs::path dir = fs::path(HDP_SOURCE_DIR) / "tests/trainer/published_configs";
  const std::vector<std::pair<std::string, std::int64_t>> published = {{"llama-3.2-1b.json", 1'235'814'400},
                                                                       {"llama-3.1-8b.json", 8'030'261'248},
                                                                       {"qwen2.5-0.5b.json", 494'032'768},
                                                                       {"mistral-7b-v0.3.json", 7'248'023'552}};
  for (const auto& [file, count] : published) {
    const auto m = read_hf_config(dir / file);
    EXPECT_EQ(ops::model::param_count(m), count) << file;
  }
  using ops::model::Family;
  using ops::model::RopeType;
  const auto l32 = read_hf_config(dir / "llama-3.2-1b.json");
  EXPECT_TRUE(l32.tie_embeddings);
  EXPECT_EQ(l32.head_dim(), 64);
  EXPECT_EQ(l32.rope_scaling, (ops::model::RopeScaling{RopeType::kLlama3, 32.0, 1.0, 4.0, 8192}));
  const auto l31 = read_hf_config(dir / "llama-3.1-8b.json");
  EXPECT_FALSE(l31.tie_embeddings);
  EXPECT_EQ(l31.head_dim(), 128);
  EXPECT_EQ(l31.rope_scaling.factor, 8.0);
  const auto qwen = read_hf_config(dir / "qwen2.5-0.5b.json");
  EXPECT_EQ(qwen.family, Family::kQwen2);
  EXPECT_TRUE(qwen.qkv_bias && qwen.tie_embeddings);
  EXPECT_EQ(qwen.sliding_window, 0) << "ignored while use_sliding_window is false";
  const auto mistral = read_hf_config(dir / "mistral-7b-v0.3.json");
  EXPECT_EQ(mistral.family, Family::kMistral);
  EXPECT_EQ(mistral.sliding_window, 0);
  EXPECT_FALSE(mistral.qkv_bias || mistral.tie_embeddings);

  // Llama 3's frequency bands at Llama 3.2's settings: wavelengths below 8192 / 4 = 2048 keep
  // their frequency, those above 8192 are divided by 32, those between are blended.
  const std::vector<double> plain = ops::rope_default_inv_freq(500000.0, 64), scaled = l32.rope_inv_freq();
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double wavelength = 2 * M_PI / plain[i];
    if (wavelength < 2048) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelength > 8192) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 32);
      ++divided;
    } else {
      EXPECT_TRUE(scaled[i] < plain[i] && scaled[i] > plain[i] / 32) << i;
      ++blended;
    }
  }
  EXPECT_TRUE(kept > 0 && divided > 0 && blended > 0) << kept << " " << divided << " " << blended;
}

// model.safetensors in `out` (created) holding `model`'s tensors from the flat `params`, but for
// `skip`, with an `extra` tensor of 3 elements, and model.norm.weight shaped [1, d] when `reshape`.
void write_weights(const fs::path& out, const ops::model::LlamaConfig& model, std::span<const float> params,
                   const std::string& skip = "", const std::string& extra = "", bool reshape = false) {
  fs::create_directories(out);
  std::vector<checkpoint::TensorToWrite> tensors;
  const std::vector<float> spare(3, 0.5f);
  for (const auto& p : ops::model::param_layout(model)) {
    if (p.name == skip) continue;
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
    if (reshape && p.name == "model.norm.weight") shape = {1, shape[0]};
    tensors.push_back({p.name, shape, params.subspan(static_cast<std::size_t>(p.offset), static_cast<std::size_t>(n))});
  }
  if (!extra.empty()) tensors.push_back({extra, {3}, spare});
  checkpoint::write_safetensors(out / "model.safetensors", tensors, TensorDtype::kF32);
}

// A checkpoint under `root` of `model`'s parameters (moments of a pattern), saved by `ranks` ranks at
// `step`; its options.
checkpoint::CheckpointOptions save_model(const fs::path& root, const TrainerConfig& config,
                                         const ops::model::LlamaModel& model, int ranks, std::int64_t step) {
  const checkpoint::FlatLayout layout = checkpoint_layout(config.model);
  checkpoint::test::FullState state = checkpoint::test::make_state(layout, 3);
  const float* params = model.params().data<float>();
  state.buffers[0].assign(params, params + model.params().numel());
  checkpoint::CheckpointOptions options;
  options.root = root;
  options.model_config = config.model_json();
  checkpoint::test::save_on(ranks, options, layout, state, step);
  return options;
}

// A real checkpoint of the tiny model (written by the Saver on 3 thread-ranks), exported by the
// `hdp export` binary, loads back bitwise (f32) and within bf16's rounding (bf16), as one file and
// as shards with an index; a directory missing a tensor, holding an extra one or one of another
// shape is refused naming it.
// An independent reader and forward pass of `hdp export`'s output (tests/trainer/numpy_llama.py:
// numpy in float64, the safetensors layout from its specification, no hdp code) gives hdp's logits
// on two packed documents within 1e-4 of the largest logit: hdp runs in f32 (its sums of 64 to 192
// products carry ~1e-6 relative error per layer), so 1e-4 leaves room and still catches a wrong
// tensor, transpose, RoPE layout or GQA grouping, each of which moves logits by O(1). The model is
// the tiny preset (GQA: 4 heads over 2 key/value heads) with a non-default rope_theta and epsilon,
// so that both must travel through config.json.
TEST(HfExport, AnIndependentNumpyForwardOfTheExportGivesHdpsLogits) {
  hdp::test::TempDir dir;
  TrainerConfig config;
  config.model = model_preset("tiny");
  config.model.rope_theta = 500000.0;
  config.model.norm_eps = 1e-6;
  ops::model::LlamaModel model(config.model);
  model.init(1234);
  const checkpoint::CheckpointOptions options = save_model(dir.path() / "ckpt", config, model, 2, 5);
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const fs::path out = dir.path() / "export";
  const auto exported = hdp::test::run_command({hdp, "export", options.root.string(), "--out", out.string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;

  const std::vector<std::vector<std::int32_t>> docs = {{72, 100, 112, 32, 101, 120, 112, 111, 114, 116, 33},
                                                       {3, 250, 17, 17, 64, 0}};
  model.forward(ops::model::pack_documents(docs));
  const ops::Tensor& logits = model.logits();
  std::ofstream(dir.path() / "docs.json") << nlohmann::json(docs).dump();
  const fs::path theirs = dir.path() / "numpy_logits.f64";
  const auto r = hdp::test::run_command({"/usr/bin/python3", std::string(HDP_SOURCE_DIR) + "/tests/trainer/numpy_llama.py",
                                         out.string(), (dir.path() / "docs.json").string(), theirs.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto count = static_cast<std::size_t>(logits.numel());
  ASSERT_EQ(fs::file_size(theirs), count * sizeof(double));
  std::vector<double> expected(count);
  std::ifstream(theirs, std::ios::binary).read(reinterpret_cast<char*>(expected.data()),
                                               static_cast<std::streamsize>(count * sizeof(double)));
  const float* ours = logits.data<float>();
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < count; ++i) {
    largest = std::max(largest, std::abs(expected[i]));
    worst = std::max(worst, std::abs(double(ours[i]) - expected[i]));
  }
  std::cout << "logits: " << count << ", largest |logit| " << largest << ", largest difference " << worst << " ("
            << worst / largest << " of it)\n";
  EXPECT_GT(largest, 0.1) << "logits that are all ~0 would compare equal for any weights";
  EXPECT_LE(worst, 1e-4 * largest);

  // The comparison can fail: the same export read with the default rope_theta (10000) instead of
  // the one config.json says gives other logits, by far more than the bound.
  nlohmann::json hf;
  std::ifstream(out / "config.json") >> hf;
  EXPECT_EQ(hf["rope_theta"], 500000.0);
  EXPECT_EQ(hf["max_position_embeddings"], config.context) << "the reader above was given the field and ignored it";
  hf["rope_theta"] = 10000.0;
  std::ofstream(out / "config.json", std::ios::trunc) << hf.dump();
  ASSERT_EQ(hdp::test::run_command({"/usr/bin/python3", std::string(HDP_SOURCE_DIR) + "/tests/trainer/numpy_llama.py",
                                    out.string(), (dir.path() / "docs.json").string(), theirs.string()})
                .exit_code,
            0);
  std::ifstream(theirs, std::ios::binary).read(reinterpret_cast<char*>(expected.data()),
                                               static_cast<std::streamsize>(count * sizeof(double)));
  double off = 0;
  for (std::size_t i = 0; i < count; ++i) off = std::max(off, std::abs(double(ours[i]) - expected[i]));
  std::cout << "with rope_theta 10000: largest difference " << off << "\n";
  EXPECT_GT(off, 10 * 1e-4 * largest);
}

TEST(HfExport, ACheckpointExportedLoadsBackBitwise) {
  hdp::test::TempDir dir;
  TrainerConfig config;
  config.model = model_preset("tiny");
  const checkpoint::FlatLayout layout = checkpoint_layout(config.model);
  checkpoint::CheckpointOptions options;
  options.root = dir.path() / "ckpt";
  options.model_config = config.model_json();
  const auto state = checkpoint::test::make_state(layout, 7);
  checkpoint::test::save_on(3, options, layout, state, 12);
  const std::vector<float>& params = state.buffers[0];
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";

  struct Case {
    std::vector<std::string> args;
    bool bf16;
    bool sharded;
  };
  const std::vector<Case> cases = {
      {{"--dtype", "f32"}, false, false},
      {{"--dtype", "bf16"}, true, false},
      {{"--dtype", "f32", "--max-shard-mb", "0.05"}, false, true},  // the tiny model's ~0.5 MB in shards
  };
  int i = 0;
  for (const auto& c : cases) {
    const fs::path out = dir.path() / ("out" + std::to_string(i++));
    std::vector<std::string> argv = {hdp, "export", (options.root / checkpoint::step_dir_name(12)).string(), "--out", out.string()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto r = hdp::test::run_command(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("exported step 12"), std::string::npos) << r.out;
    EXPECT_EQ(fs::exists(out / "model.safetensors.index.json"), c.sharded) << r.out;
    const auto model = read_hf_config(out / "config.json");
    EXPECT_EQ(model.d_model, config.model.d_model);
    std::vector<float> loaded(params.size());
    load_hf_weights(out, model, loaded);
    if (!c.bf16) {
      EXPECT_EQ(0, std::memcmp(loaded.data(), params.data(), params.size() * 4)) << "not bitwise";
    } else {
      for (std::size_t k = 0; k < params.size(); ++k) {
        ASSERT_LE(std::abs(loaded[k] - params[k]), std::abs(params[k]) * std::ldexp(1.0f, -8)) << k;
      }
    }
  }
  // Exporting over an existing model is refused; a root exports its newest checkpoint.
  auto r = hdp::test::run_command({hdp, "export", options.root.string(), "--out", (dir.path() / "out0").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("exists"), std::string::npos) << r.err;
  r = hdp::test::run_command({hdp, "export", (dir.path() / "nosuch").string(), "--out", (dir.path() / "x").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;

  // Missing, extra and misshapen tensors.
  auto write_without = [&](const fs::path& out, const std::string& skip, const std::string& extra, bool reshape) {
    write_weights(out, config.model, params, skip, extra, reshape);
  };
  std::vector<float> loaded(params.size());
  const std::vector<std::tuple<std::string, std::string, bool, std::string>> bad = {
      {"lm_head.weight", "", false, "'lm_head.weight' is missing"},
      {"", "model.layers.0.self_attn.q_proj.bias", false, "'model.layers.0.self_attn.q_proj.bias' is not part of the model"},
      {"", "", true, "has shape [1, 64], the config says [64]"},
  };
  i = 0;
  for (const auto& [skip, extra, reshape, reason] : bad) {
    const fs::path out = dir.path() / ("bad" + std::to_string(i++));
    write_without(out, skip, extra, reshape);
    try {
      load_hf_weights(out, config.model, loaded);
      ADD_FAILURE() << reason << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  // Old checkpoints' rotary buffers are ignored.
  write_without(dir.path() / "rotary", "", "model.layers.0.self_attn.rotary_emb.inv_freq", false);
  EXPECT_NO_THROW(load_hf_weights(dir.path() / "rotary", config.model, loaded));
}

// A sharded directory (model.safetensors.index.json and two shards) loads bitwise when every shard
// holds exactly what the index places in it; a shard holding a tensor the index does not list, or
// places in the other shard, is refused naming the shard and the tensor.
TEST(HfWeights, AShardHoldingATensorItsIndexDoesNotPlaceThereIsRefused) {
  hdp::test::TempDir dir;
  const ops::model::LlamaConfig model = model_preset("tiny");
  const checkpoint::FlatLayout layout = checkpoint_layout(model);
  const std::vector<float> params = checkpoint::test::make_state(layout, 5).buffers[0];
  const auto entries = ops::model::param_layout(model);
  const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  const std::vector<float> spare(3, 0.5f);
  // The layout's tensors, the first half in shard 1 and the rest in shard 2, the index listing each
  // where it is; `extra` (name, shard) is added to a shard but not to the index.
  auto write = [&](const fs::path& out, const std::optional<std::pair<std::string, int>>& extra) {
    fs::create_directories(out);
    std::vector<checkpoint::TensorToWrite> shards[2];
    nlohmann::json weight_map = nlohmann::json::object();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& p = entries[i];
      const int shard = i < entries.size() / 2 ? 0 : 1;
      std::int64_t n = 1;
      for (auto d : p.shape) n *= d;
      shards[shard].push_back({p.name, std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                               std::span<const float>(params).subspan(static_cast<std::size_t>(p.offset), static_cast<std::size_t>(n))});
      weight_map[p.name] = names[shard];
      if (extra && extra->first == p.name && extra->second != shard) shards[extra->second].push_back(shards[shard].back());
    }
    if (extra && weight_map.find(extra->first) == weight_map.end()) shards[extra->second].push_back({extra->first, {3}, spare});
    for (int k = 0; k < 2; ++k) checkpoint::write_safetensors(out / names[k], shards[k], TensorDtype::kF32);
    std::ofstream(out / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  };
  std::vector<float> loaded(params.size());
  write(dir.path() / "good", std::nullopt);
  load_hf_weights(dir.path() / "good", model, loaded);
  EXPECT_EQ(0, std::memcmp(loaded.data(), params.data(), params.size() * 4)) << "not bitwise";

  const std::vector<std::tuple<std::string, std::pair<std::string, int>, int, std::string>> bad = {
      {"unlisted", {"model.layers.0.self_attn.q_proj.bias", 1}, 1,
       "holds tensor 'model.layers.0.self_attn.q_proj.bias', which model.safetensors.index.json does not list"},
      {"elsewhere", {"lm_head.weight", 0}, 0,
       "holds tensor 'lm_head.weight', which model.safetensors.index.json places in '" + names[1] + "'"},
  };
  for (const auto& [name, extra, shard, reason] : bad) {
    write(dir.path() / name, extra);
    try {
      load_hf_weights(dir.path() / name, model, loaded);
      ADD_FAILURE() << name << ": accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + (dir.path() / name / names[shard]).string() + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(reason), std::string::npos) << what;
    }
  }
}

// max_position_embeddings in `hdp export`'s config.json: the larger of the config's value the job
// was given and the context it trained at (the manifest records it), so a model trained past its
// config's positions says so; the trained context alone for a job without a config value; left out
// for a checkpoint of a build that did not record it.
TEST(HfExport, MaxPositionEmbeddingsIsTheLargerOfTheConfigsAndTheTrainedContext) {
  hdp::test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  struct Case {
    int config_value;
    std::int64_t context;
    bool recorded;
    std::optional<std::int64_t> exported;
  };
  const std::vector<Case> cases = {{4096, 1024, true, 4096}, {4096, 8192, true, 8192}, {0, 64, true, 64},
                                   {2048, 512, false, std::nullopt}};
  int i = 0;
  for (const Case& c : cases) {
    TrainerConfig config;
    config.model = model_preset("tiny");
    config.model.max_positions = c.config_value;
    config.context = c.context;
    const checkpoint::FlatLayout layout = checkpoint_layout(config.model);
    checkpoint::CheckpointOptions options;
    options.root = dir.path() / ("ckpt" + std::to_string(i));
    options.model_config = config.model_json();
    if (!c.recorded) options.model_config.erase("max_position_embeddings");
    checkpoint::test::save_on(1, options, layout, checkpoint::test::make_state(layout, 3), 4);
    const fs::path out = dir.path() / ("out" + std::to_string(i++));
    const auto r = hdp::test::run_command({hdp, "export", options.root.string(), "--out", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json hf;
    std::ifstream(out / "config.json") >> hf;
    if (c.exported) {
      EXPECT_EQ(hf.value("max_position_embeddings", -1), *c.exported) << "config " << c.config_value << ", context " << c.context;
      EXPECT_EQ(read_hf_config(out / "config.json").max_positions, *c.exported);
    } else {
      EXPECT_FALSE(hf.contains("max_position_embeddings")) << hf.dump();
    }
  }
}

// What a user gets wrong, through the binary (so under the sanitizers too): `hdp train
// --model-config` of a config hdp cannot train, and `hdp sample` of a corrupt export (a truncated
// model.safetensors, a header that lies about the offsets, a missing and an extra tensor), each exit
// 2 with one line on stderr naming the file and the fault.
TEST(HfCli, ABadConfigOrACorruptExportExitsTwoWithOneLineNamingTheFile) {
  hdp::test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  auto expect_refused = [](const hdp::test::CommandResult& r, const fs::path& file, const std::string& fault) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(hdp::test::line_count(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("hdp: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("'" + file.string() + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(fault), std::string::npos) << r.err;
  };
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> configs = {
      {"gemma", {{"model_type", "gemma"}}, "field 'model_type' is \"gemma\": hdp trains llama, mistral and qwen2 models"},
      {"rope_scaling", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}}}}, "field 'rope_scaling.rope_type' is \"yarn\""},
      {"attention_bias", {{"attention_bias", true}}, "field 'attention_bias' is true: hdp's attention has no biases"},
      {"positions", {{"max_position_embeddings", -8}}, "field 'max_position_embeddings' must be an integer in [1, "},
  };
  for (const auto& [name, change, fault] : configs) {
    nlohmann::json c = llama_config();
    c.update(change);
    fs::create_directories(dir.path() / name);
    const fs::path config = write_config(dir.path() / name, c);
    SCOPED_TRACE(name);
    expect_refused(hdp::test::run_command({hdp, "train", "--model-config", config.string()}), config, fault);
  }

  // A real export of the tiny model, then copies of it spoiled one way each.
  TrainerConfig config;
  config.model = model_preset("tiny");
  const checkpoint::FlatLayout layout = checkpoint_layout(config.model);
  const checkpoint::test::FullState state = checkpoint::test::make_state(layout, 9);
  const std::vector<float>& params = state.buffers[0];
  checkpoint::CheckpointOptions options;
  options.root = dir.path() / "ckpt";
  options.model_config = config.model_json();
  checkpoint::test::save_on(1, options, layout, state, 3);
  const fs::path good = dir.path() / "export";
  ASSERT_EQ(hdp::test::run_command({hdp, "export", options.root.string(), "--out", good.string()}).exit_code, 0);
  const std::vector<std::string> sample = {"--prompt", "int", "--max-new-tokens", "2", "--temperature", "0"};
  auto run_sample = [&](const fs::path& model) {
    std::vector<std::string> argv = {hdp, "sample", model.string()};
    argv.insert(argv.end(), sample.begin(), sample.end());
    return hdp::test::run_command(argv);
  };
  const auto fine = run_sample(good);
  ASSERT_EQ(fine.exit_code, 0) << fine.err;

  const std::string bytes = read_bytes(good / "model.safetensors");
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  // The header with the first tensor's data_offsets moved 4 bytes on: it claims bytes of its
  // neighbour and leaves a hole where it begins.
  auto lying = [&] {
    nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_length));
    for (auto& [name, entry] : header.items()) {
      if (name == "__metadata__" || entry["data_offsets"][0] != 0) continue;
      entry["data_offsets"] = {4, entry["data_offsets"][1].get<std::int64_t>() + 4};
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return header_of(text) + bytes.substr(8 + header_length);
  };
  const std::vector<std::tuple<std::string, std::function<void(const fs::path&)>, std::string>> exports = {
      {"truncated", [&](const fs::path& d) { write_bytes(d / "model.safetensors", bytes.substr(0, bytes.size() - 100)); },
       "outside the data section"},
      {"lying", [&](const fs::path& d) { write_bytes(d / "model.safetensors", lying()); },
       "begins at data byte 4, expected 0 (a hole or an overlap)"},
      {"missing", [&](const fs::path& d) { write_weights(d, config.model, params, "lm_head.weight"); },
       "tensor 'lm_head.weight' is missing"},
      {"extra", [&](const fs::path& d) { write_weights(d, config.model, params, "", "model.layers.0.mlp.up_proj.bias"); },
       "tensor 'model.layers.0.mlp.up_proj.bias' is not part of the model the config describes"},
  };
  for (const auto& [name, spoil, fault] : exports) {
    const fs::path copy = dir.path() / name;
    fs::copy(good, copy, fs::copy_options::recursive);
    spoil(copy);
    SCOPED_TRACE(name);
    expect_refused(run_sample(copy), copy / "model.safetensors", fault);
  }
}

// `hdp sample` on a checkpoint and on its export: greedy decoding (temperature 0) gives exactly the
// bytes that repeated full forwards' argmax give (the KV cache changes nothing that matters); the
// same seed draws the same text; a path that holds no model exits 2.
TEST(HfSample, GreedyTextIsTheFullForwardsArgmaxFromACheckpointAndItsExport) {
  hdp::test::TempDir dir;
  TrainerConfig config;
  config.model = model_preset("tiny");
  ops::model::LlamaModel model(config.model);
  model.init(77);
  const checkpoint::CheckpointOptions options = save_model(dir.path() / "ckpt", config, model, 1, 9);
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const fs::path out = dir.path() / "export";
  ASSERT_EQ(hdp::test::run_command({hdp, "export", options.root.string(), "--out", out.string()}).exit_code, 0);

  const std::string prompt = "int main(";
  constexpr int kNew = 12;
  std::vector<std::int32_t> seq(prompt.begin(), prompt.end());
  for (int i = 0; i < kNew; ++i) {
    model.forward(ops::model::pack_documents({seq}));
    const std::vector<float> logits = model.logits().to_vector<float>();
    const std::size_t row = (seq.size() - 1) * 256;
    seq.push_back(static_cast<std::int32_t>(
        std::max_element(logits.begin() + static_cast<long>(row), logits.begin() + static_cast<long>(row + 256)) -
        (logits.begin() + static_cast<long>(row))));
  }
  const std::string expected = std::string(seq.begin(), seq.end()) + "\n";
  for (const fs::path& source : {options.root, out}) {
    const auto r = hdp::test::run_command({hdp, "sample", source.string(), "--prompt", prompt, "--temperature", "0",
                                           "--max-new-tokens", std::to_string(kNew)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, expected) << "from " << source;
  }
  const std::vector<std::string> drawn = {"sample", options.root.string(), "--prompt", prompt, "--seed", "5",
                                          "--max-new-tokens", "20"};
  std::vector<std::string> argv{hdp};
  argv.insert(argv.end(), drawn.begin(), drawn.end());
  const auto a = hdp::test::run_command(argv), b = hdp::test::run_command(argv);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out) << "one seed, one text";
  EXPECT_EQ(a.out.size(), prompt.size() + 20 + 1);
  const auto bad = hdp::test::run_command({hdp, "sample", (dir.path() / "nosuch").string(), "--prompt", "x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("nosuch"), std::string::npos) << bad.err;
}

TEST(HfSample, PickTokenIsGreedyAtZeroKeepsTheTopKAndDrawsBySoftmax) {
  std::mt19937_64 rng(1);
  const std::vector<float> logits{0.0f, std::log(3.0f), -1.0f, std::log(3.0f)};
  EXPECT_EQ(pick_token(logits, 0, 0, rng), 1) << "the argmax, the lower id on a tie";
  for (int i = 0; i < 50; ++i) EXPECT_NE(pick_token(logits, 1.0, 2, rng), 0) << "outside the top 2";
  // Temperature 1 over all four: p = (1, 3, e^-1, 3) / (7 + e^-1).
  int counts[4] = {};
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) ++counts[pick_token(logits, 1.0, 0, rng)];
  const double z = 7 + std::exp(-1.0);
  const double expect[4] = {1 / z, 3 / z, std::exp(-1.0) / z, 3 / z};
  // Binomial standard deviation at most sqrt(0.25 / 40000) = 0.0025: 0.01 is four of them.
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(counts[t] / double(kDraws), expect[t], 0.01) << t;
  EXPECT_THROW(check(SampleOptions{.temperature = -1}), InvalidArgument);
}

// Runs tests/trainer/numpy_llama.py with `args`; its exit code.
int numpy_llama(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3", std::string(HDP_SOURCE_DIR) + "/tests/trainer/numpy_llama.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = hdp::test::run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code;
}

std::vector<double> read_f64(const fs::path& path) {
  std::vector<double> values(fs::file_size(path) / sizeof(double));
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(values.data()),
                                             static_cast<std::streamsize>(values.size() * sizeof(double)));
  return values;
}

// Small random models of each family, in bf16 safetensors written by an independent writer
// (tests/trainer/numpy_llama.py: the format from its specification, no hdp code): a Llama 3.2-style
// one (llama3 RoPE scaling with all three frequency bands in use, tied, head_dim 12 on hidden 32,
// GQA), a Qwen2-style one (q/k/v biases, tied) and a Mistral-style one (sliding_window null, one key/value
// head) in three shards with an index. For each:
//   - `hdp sample --temperature 0` continues a prompt with exactly the tokens the float64 forward of
//     the same script picks (argmax of a full forward per token);
//   - hdp's logits over that sequence and another document equal the float64 forward's within
//     1e-4 of the largest logit: both read the same bf16 values (exact in f32 and f64), hdp sums in
//     f32 (~1e-6 relative per layer over 2 layers), while a wrong RoPE frequency, bias, head width or
//     tied head moves logits by O(1) (the reader with the llama3 scaling dropped is checked to
//     differ by more than 10x the bound).
TEST(HfFamilies, IndependentBf16ModelsGiveTheFloat64ForwardsGreedyTokensAndLogits) {
  hdp::test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const std::string prompt = "Hello, ";
  constexpr int kNew = 12;
  std::ofstream(dir.path() / "prompt.json") << nlohmann::json(std::vector<int>(prompt.begin(), prompt.end())).dump();
  for (const auto& [family, shards] : std::vector<std::pair<std::string, int>>{{"llama3", 1}, {"qwen2", 1}, {"mistral", 3}}) {
    SCOPED_TRACE(family);
    const fs::path model_dir = dir.path() / family;
    ASSERT_EQ(numpy_llama({"write", family, model_dir.string(), "17", std::to_string(shards)}), 0);
    EXPECT_EQ(fs::exists(model_dir / "model.safetensors.index.json"), shards > 1);
    ASSERT_EQ(numpy_llama({"greedy", model_dir.string(), (dir.path() / "prompt.json").string(), std::to_string(kNew),
                           (dir.path() / "greedy.json").string()}),
              0);
    nlohmann::json greedy;
    std::ifstream(dir.path() / "greedy.json") >> greedy;
    const std::vector<std::int32_t> seq = greedy.get<std::vector<std::int32_t>>();
    const auto r = hdp::test::run_command({hdp, "sample", model_dir.string(), "--prompt", prompt, "--temperature", "0",
                                           "--max-new-tokens", std::to_string(kNew)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, std::string(seq.begin(), seq.end()) + "\n") << "hdp's greedy tokens differ from the float64 forward's";

    const LoadedModel loaded = load_model(model_dir);
    EXPECT_EQ(ops::model::family_name(loaded.config.family), family == "llama3" ? "llama" : family);
    ops::model::LlamaModel model(loaded.config);
    model.params().copy_from(ops::Tensor::from_vector(loaded.params, {static_cast<std::int64_t>(loaded.params.size())}));
    const std::vector<std::vector<std::int32_t>> docs = {seq, {3, 250, 17, 17, 64, 0, 99}};
    model.forward(ops::model::pack_documents(docs));
    std::ofstream(dir.path() / "docs.json") << nlohmann::json(docs).dump();
    ASSERT_EQ(numpy_llama({model_dir.string(), (dir.path() / "docs.json").string(), (dir.path() / "logits.f64").string()}), 0);
    const std::vector<double> expected = read_f64(dir.path() / "logits.f64");
    const std::vector<float> ours = model.logits().to_vector<float>();
    ASSERT_EQ(expected.size(), ours.size());
    double largest = 0, worst = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      largest = std::max(largest, std::abs(expected[i]));
      worst = std::max(worst, std::abs(double(ours[i]) - expected[i]));
    }
    std::cout << family << ": " << ours.size() << " logits, largest |logit| " << largest << ", largest difference "
              << worst << " (" << worst / largest << " of it)\n";
    EXPECT_GT(largest, 1.0);
    EXPECT_LE(worst, 1e-4 * largest);
    if (family != "llama3") continue;
    nlohmann::json config;
    std::ifstream(model_dir / "config.json") >> config;
    config["rope_scaling"] = nullptr;
    std::ofstream(model_dir / "config.json", std::ios::trunc) << config.dump();
    ASSERT_EQ(numpy_llama({model_dir.string(), (dir.path() / "docs.json").string(), (dir.path() / "logits.f64").string()}), 0);
    const std::vector<double> unscaled = read_f64(dir.path() / "logits.f64");
    double off = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) off = std::max(off, std::abs(double(ours[i]) - unscaled[i]));
    std::cout << "llama3 read without its rope_scaling: largest difference " << off << "\n";
    EXPECT_GT(off, 10 * 1e-4 * largest);
  }
}

// The tiny model with each family's features (tests/ops/tiny_llama.h's, and a Mistral with a
// window): its config.json names the family, and reads back to the same config.
ops::model::LlamaConfig family_model(const std::string& family) {
  ops::model::LlamaConfig c = model_preset("tiny");
  if (family == "llama3") {
    c.explicit_head_dim = 12;
    c.tie_embeddings = true;
    c.rope_scaling = {.type = ops::model::RopeType::kLlama3, .factor = 8.0, .original_max_positions = 64};
  } else if (family == "qwen2") {
    c.family = ops::model::Family::kQwen2;
    c.qkv_bias = true;
    c.tie_embeddings = true;
  } else {
    c.family = ops::model::Family::kMistral;
    c.sliding_window = 4096;
    c.rope_scaling = {.type = ops::model::RopeType::kLinear, .factor = 2.0};
  }
  return c;
}

// A checkpoint of each family (saved by 3 thread-ranks, restored whole by the export) exported by
// `hdp export`: the config.json of its family, read back to the same config, a tied model's weights
// without lm_head.weight, and the weights bitwise (f32) or exactly rounded to bf16 (bf16). A tied
// file that holds lm_head.weight loads when it equals the embedding and is refused when not.
TEST(HfExport, EachFamilyExportsItsOwnConfigAndLoadsBackBitwise) {
  hdp::test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  for (const std::string family : {"llama3", "qwen2", "mistral"}) {
    SCOPED_TRACE(family);
    TrainerConfig config;
    config.model = family_model(family);
    const checkpoint::FlatLayout layout = checkpoint_layout(config.model);
    checkpoint::CheckpointOptions options;
    options.root = dir.path() / family / "ckpt";
    options.model_config = config.model_json();
    const auto state = checkpoint::test::make_state(layout, 7);
    checkpoint::test::save_on(3, options, layout, state, 4);
    const std::vector<float>& params = state.buffers[0];
    for (const std::string dtype : {"f32", "bf16"}) {
      const fs::path out = dir.path() / family / dtype;
      const auto r = hdp::test::run_command({hdp, "export", options.root.string(), "--out", out.string(), "--dtype", dtype});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      nlohmann::json hf;
      std::ifstream(out / "config.json") >> hf;
      EXPECT_EQ(hf["model_type"], family == "llama3" ? "llama" : family);
      const auto back = read_hf_config(out / "config.json");
      EXPECT_EQ(back.family, config.model.family);
      EXPECT_EQ(back.head_dim(), config.model.head_dim());
      EXPECT_EQ(back.rope_scaling, config.model.rope_scaling);
      EXPECT_EQ(back.tie_embeddings, config.model.tie_embeddings);
      EXPECT_EQ(back.qkv_bias, config.model.qkv_bias);
      EXPECT_EQ(back.sliding_window, config.model.sliding_window);
      EXPECT_EQ(ops::model::param_count(back), static_cast<std::int64_t>(params.size()));
      const SafetensorsFile weights(out / "model.safetensors");
      EXPECT_EQ(weights.tensors().contains("lm_head.weight"), !config.model.tie_embeddings);
      EXPECT_EQ(weights.tensors().contains("model.layers.1.self_attn.v_proj.bias"), config.model.qkv_bias);
      std::vector<float> loaded(params.size());
      load_hf_weights(out, back, loaded);
      std::size_t differ = 0;
      for (std::size_t k = 0; k < params.size(); ++k) {
        const float want = dtype == "f32" ? params[k] : kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(params[k]));
        differ += std::memcmp(&loaded[k], &want, 4) != 0;
      }
      EXPECT_EQ(differ, 0u) << dtype;
    }
  }
  // A tied model's file with lm_head.weight: accepted equal to the embedding, refused otherwise.
  const ops::model::LlamaConfig tied = family_model("qwen2");
  std::vector<float> params(static_cast<std::size_t>(ops::model::param_count(tied)));
  for (std::size_t k = 0; k < params.size(); ++k) params[k] = std::sin(float(k));
  const auto embed = ops::model::param_layout(tied).front();
  std::vector<float> head(params.begin(), params.begin() + embed.shape[0] * embed.shape[1]);
  auto write_with_head = [&](const fs::path& out) {
    write_weights(out, tied, params);
    std::vector<checkpoint::TensorToWrite> tensors;
    for (const auto& p : ops::model::param_layout(tied)) {
      std::int64_t n = 1;
      for (auto d : p.shape) n *= d;
      tensors.push_back({p.name, {p.shape.begin(), p.shape.end()},
                         std::span<const float>(params).subspan(static_cast<std::size_t>(p.offset), static_cast<std::size_t>(n))});
    }
    tensors.push_back({"lm_head.weight", {embed.shape[0], embed.shape[1]}, head});
    checkpoint::write_safetensors(out / "model.safetensors", tensors, TensorDtype::kF32);
  };
  std::vector<float> loaded(params.size());
  write_with_head(dir.path() / "tied_equal");
  EXPECT_NO_THROW(load_hf_weights(dir.path() / "tied_equal", tied, loaded));
  head[5] += 1.0f;
  write_with_head(dir.path() / "tied_differs");
  try {
    load_hf_weights(dir.path() / "tied_differs", tied, loaded);
    ADD_FAILURE() << "a tied file whose lm_head.weight differs was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'tie_word_embeddings'"), std::string::npos) << e.what();
  }
}

// `hdp train --dry-run --model-config` on the published configs prints the model card's parameter
// count; a rope_type hdp does not implement, a Mistral window shorter than --context and attention
// biases on a llama config exit 2 with one line naming the field.
TEST(HfCli, DryRunReportsThePublishedParameterCountsAndUnsupportedFieldsExitTwo) {
  hdp::test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const fs::path configs = fs::path(HDP_SOURCE_DIR) / "tests/trainer/published_configs";
  for (const auto& [file, count] : std::vector<std::pair<std::string, std::string>>{{"llama-3.2-1b.json", "1235814400"},
                                                                                    {"llama-3.1-8b.json", "8030261248"},
                                                                                    {"qwen2.5-0.5b.json", "494032768"},
                                                                                    {"mistral-7b-v0.3.json", "7248023552"}}) {
    const auto r = hdp::test::run_command({hdp, "train", "--dry-run", "--model-config", (configs / file).string()});
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.err;
    EXPECT_NE(r.out.find("parameters: " + count + "\n"), std::string::npos) << file << ": " << r.out;
  }
  nlohmann::json v01;
  std::ifstream(configs / "mistral-7b-v0.3.json") >> v01;
  v01["sliding_window"] = 4096;  // Mistral 7B v0.1's
  nlohmann::json yarn = v01;
  yarn["sliding_window"] = nullptr;
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  nlohmann::json biased;
  std::ifstream(configs / "llama-3.1-8b.json") >> biased;
  biased["attention_bias"] = true;
  const std::vector<std::tuple<nlohmann::json, std::vector<std::string>, std::string>> refused = {
      {v01, {"--context", "8192"}, "field 'sliding_window' is 4096, shorter than --context 8192"},
      {yarn, {}, "field 'rope_scaling.rope_type' is \"yarn\""},
      {biased, {}, "field 'attention_bias' is true"},
  };
  int i = 0;
  for (const auto& [config, extra, field] : refused) {
    const fs::path path = dir.path() / std::to_string(i++);
    fs::create_directories(path);
    std::ofstream(path / "config.json") << config.dump();
    std::vector<std::string> argv = {hdp, "train", "--dry-run", "--model-config", (path / "config.json").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = hdp::test::run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // v0.1's window at a context within it trains.
  std::ofstream(dir.path() / "0" / "config.json", std::ios::trunc) << v01.dump();
  const auto r = hdp::test::run_command(
      {hdp, "train", "--dry-run", "--model-config", (dir.path() / "0" / "config.json").string(), "--context", "4096"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // `hdp sample` of a Mistral model with a window of 8 tokens: 4 prompt tokens and 4 new fit, 4 and
  // 5 do not.
  const fs::path windowed = dir.path() / "windowed";
  ASSERT_EQ(numpy_llama({"write", "mistral", windowed.string(), "3", "1"}), 0);
  nlohmann::json config;
  std::ifstream(windowed / "config.json") >> config;
  config["sliding_window"] = 8;
  std::ofstream(windowed / "config.json", std::ios::trunc) << config.dump();
  for (const auto& [fresh, code] : std::vector<std::pair<std::string, int>>{{"4", 0}, {"5", 2}}) {
    const auto s = hdp::test::run_command(
        {hdp, "sample", windowed.string(), "--prompt", "abcd", "--temperature", "0", "--max-new-tokens", fresh});
    EXPECT_EQ(s.exit_code, code) << s.err;
    if (code == 2) {
      EXPECT_NE(s.err.find("field 'sliding_window' of '" + windowed.string() + "' is 8"), std::string::npos) << s.err;
    }
  }
}

}  // namespace
}  // namespace hdp::trainer
