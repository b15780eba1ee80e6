#include "checkpoint/manifest.h"

#include <map>
#include <optional>

#include "checkpoint/checksum.h"
#include "checkpoint/posix_io.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace {

using nlohmann::json;

std::string range_text(std::int64_t begin, std::int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

json piece_json(const Manifest& manifest, const PieceRecord& piece) {
  json sums = json::array();
  for (std::uint64_t sum : piece.xxh3) sums.push_back(to_hex(sum));
  return {{"file", manifest.files.at(piece.file).name},
          {"dataset", piece.dataset},
          {"offset", piece.offset},
          {"length", piece.length},
          {"xxh3", sums}};
}

// Faults of one tensor's pieces in one buffer: they must tile [0, numel) in order, each the
// intersection of the tensor with its file's shard, with one checksum per block.
void piece_faults(const Manifest& m, const FlatLayout& layout, std::size_t t, std::size_t b,
                  std::vector<std::string>& faults) {
  const TensorRecord& tensor = m.tensors[t];
  const std::string where = std::string(kBufferNames[b]) + " tensor '" + tensor.name + "'";
  const std::int64_t block = m.checksum_block_elems();
  std::int64_t next = 0;
  for (const PieceRecord& piece : tensor.pieces[b]) {
    if (piece.file >= m.files.size()) {
      faults.push_back(where + ": a piece names file #" + std::to_string(piece.file) + ", beyond the file list");
      return;
    }
    const FileRecord& file = m.files[piece.file];
    const ShardRange expected = intersect(file.shard, {layout.offset(t), layout.offset(t) + layout.numel(t)});
    if (piece.offset != next || piece.length < 1 || expected.begin - layout.offset(t) != piece.offset ||
        expected.size() != piece.length) {
      faults.push_back(where + ": piece " + range_text(piece.offset, piece.offset + piece.length) + " in " + file.name +
                       " does not continue at element " + std::to_string(next) + " or does not match the file's shard");
      return;
    }
    if (piece.dataset != dataset_name(b, tensor.name)) {
      faults.push_back(where + ": piece in " + file.name + " names dataset '" + piece.dataset + "'");
    }
    if (std::ssize(piece.xxh3) != (piece.length + block - 1) / block) {
      faults.push_back(where + ": piece in " + file.name + " has " + std::to_string(piece.xxh3.size()) +
                       " checksums for " + std::to_string(piece.length) + " elements");
    }
    next += piece.length;
  }
  if (next != layout.numel(t)) {
    faults.push_back(where + ": pieces cover " + std::to_string(next) + " of " + std::to_string(layout.numel(t)) +
                     " elements");
  }
}

}  // namespace

std::uint64_t Manifest::total_bytes() const {
  std::uint64_t bytes = 0;
  for (const FileRecord& file : files) bytes += file.bytes;
  return bytes;
}

FlatLayout Manifest::layout() const {
  std::vector<TensorSpec> specs;
  for (const TensorRecord& tensor : tensors) specs.push_back({tensor.name, tensor.shape});
  return FlatLayout(std::move(specs));
}

std::string dataset_name(std::size_t buffer, const std::string& tensor) {
  return "/" + std::string(kBufferNames.at(buffer)) + "/" + tensor;
}

json to_json(const Manifest& m) {
  json files = json::array();
  for (const FileRecord& f : m.files) {
    files.push_back({{"name", f.name},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"shard", {f.shard.begin, f.shard.end}},
                     {"rng", {{"dataset", "/state/rng"}, {"bytes", f.rng_bytes}, {"xxh3", to_hex(f.rng_xxh3)}}}});
  }
  json tensors = json::array();
  for (const TensorRecord& t : m.tensors) {
    json pieces = json::object();
    for (std::size_t b = 0; b < kBufferCount; ++b) {
      json list = json::array();
      for (const PieceRecord& p : t.pieces[b]) list.push_back(piece_json(m, p));
      pieces[std::string(kBufferNames[b])] = list;
    }
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"pieces", pieces}});
  }
  json out = {{"format", kFormatName},
          {"format_version", m.format_version},
          {"step", m.step},
          {"world_size", m.world_size},
          {"dtype", "float32"},
          {"model_config", m.model_config},
          {"data_position", {{"epoch", m.data.epoch}, {"sample", m.data.sample}}},
          {"checksum", {{"algorithm", "xxh3_64"}, {"block_bytes", m.checksum_block_bytes}}},
          {"buffers", kBufferNames},
          {"files", files},
          {"tensors", tensors}};
  if (!m.data_fingerprint.empty()) out["data_fingerprint"] = m.data_fingerprint;
  return out;
}

Manifest manifest_from_json(const json& j) {
  try {
    if (j.at("format").get<std::string>() != kFormatName) throw InvalidArgument("manifest: format is not hdp-checkpoint");
    Manifest m;
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != kFormatVersion) {
      throw InvalidArgument("manifest: format_version " + std::to_string(m.format_version) + " is not supported (this build reads " +
                            std::to_string(kFormatVersion) + ")");
    }
    if (j.at("dtype").get<std::string>() != "float32") throw InvalidArgument("manifest: dtype must be float32");
    m.step = j.at("step").get<std::int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.model_config = j.at("model_config");
    m.data = {j.at("data_position").at("epoch").get<std::uint64_t>(), j.at("data_position").at("sample").get<std::uint64_t>()};
    if (j.contains("data_fingerprint")) m.data_fingerprint = j.at("data_fingerprint").get<std::string>();
    m.checksum_block_bytes = j.at("checksum").at("block_bytes").get<std::int64_t>();
    if (m.checksum_block_bytes < 4 || m.checksum_block_bytes % 4 != 0) {
      throw InvalidArgument("manifest: checksum block_bytes must be a positive multiple of 4");
    }
    std::map<std::string, std::size_t> file_index;
    for (const json& f : j.at("files")) {
      FileRecord file{f.at("name").get<std::string>(), f.at("rank").get<int>(), f.at("bytes").get<std::uint64_t>(),
                      {f.at("shard").at(0).get<std::int64_t>(), f.at("shard").at(1).get<std::int64_t>()},
                      f.at("rng").at("bytes").get<std::int64_t>(), from_hex(f.at("rng").at("xxh3").get<std::string>())};
      file_index[file.name] = m.files.size();
      m.files.push_back(std::move(file));
    }
    for (const json& t : j.at("tensors")) {
      TensorRecord tensor{t.at("name").get<std::string>(), t.at("shape").get<std::vector<std::int64_t>>(), {}};
      for (std::size_t b = 0; b < kBufferCount; ++b) {
        for (const json& p : t.at("pieces").at(std::string(kBufferNames[b]))) {
          const auto file = file_index.find(p.at("file").get<std::string>());
          if (file == file_index.end()) throw InvalidArgument("manifest: tensor '" + tensor.name + "' names an unlisted file");
          PieceRecord piece{file->second, p.at("dataset").get<std::string>(), p.at("offset").get<std::int64_t>(),
                            p.at("length").get<std::int64_t>(), {}};
          for (const json& sum : p.at("xxh3")) piece.xxh3.push_back(from_hex(sum.get<std::string>()));
          tensor.pieces[b].push_back(std::move(piece));
        }
      }
      m.tensors.push_back(std::move(tensor));
    }
    return m;
  } catch (const json::exception& e) {
    throw InvalidArgument(std::string("manifest: ") + e.what());
  }
}

std::vector<std::string> structural_faults(const Manifest& m) {
  std::vector<std::string> faults;
  if (m.world_size < 1 || std::ssize(m.files) != m.world_size) {
    faults.push_back("world_size " + std::to_string(m.world_size) + " but " + std::to_string(m.files.size()) + " files");
    return faults;
  }
  std::optional<FlatLayout> layout;
  try {
    layout.emplace(m.layout());
  } catch (const InvalidArgument& e) {
    faults.push_back(e.what());
    return faults;
  }
  std::int64_t next = 0;
  for (std::size_t r = 0; r < m.files.size(); ++r) {
    const FileRecord& f = m.files[r];
    if (f.rank != static_cast<int>(r) || f.shard.begin != next || f.shard.end < f.shard.begin) {
      faults.push_back("file " + f.name + " (rank " + std::to_string(f.rank) + ") holds shard " +
                       range_text(f.shard.begin, f.shard.end) + ", expected rank " + std::to_string(r) +
                       " starting at element " + std::to_string(next));
      return faults;
    }
    next = f.shard.end;
  }
  if (next != layout->total()) {
    faults.push_back("the shards cover " + std::to_string(next) + " of " + std::to_string(layout->total()) + " elements");
    return faults;
  }
  for (std::size_t t = 0; t < m.tensors.size(); ++t) {
    for (std::size_t b = 0; b < kBufferCount; ++b) piece_faults(m, *layout, t, b, faults);
  }
  return faults;
}

void check_compatible(const Manifest& m, const FlatLayout& layout, const json& model_config,
                      const std::filesystem::path& where) {
  const std::string prefix = "checkpoint " + where.string() + " cannot be restored into this job: ";
  // max_position_embeddings records the context a job trained at, not the model's shape: a job
  // may resume at another --context (and a checkpoint of a build that did not record it restores).
  const auto shape = [](json config) {
    if (config.is_object()) config.erase("max_position_embeddings");
    return config;
  };
  if (shape(m.model_config) != shape(model_config)) {
    throw InvalidArgument(prefix + "its model config " + m.model_config.dump() + " differs from the job's " +
                          model_config.dump());
  }
  if (m.tensors.size() != layout.tensors().size()) {
    throw InvalidArgument(prefix + "it holds " + std::to_string(m.tensors.size()) + " tensors, the job has " +
                          std::to_string(layout.tensors().size()));
  }
  for (std::size_t t = 0; t < m.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors()[t];
    if (m.tensors[t].name != spec.name || m.tensors[t].shape != spec.shape) {
      throw InvalidArgument(prefix + "tensor #" + std::to_string(t) + " is '" + m.tensors[t].name + "' " +
                            json(m.tensors[t].shape).dump() + ", the job expects '" + spec.name + "' " +
                            json(spec.shape).dump());
    }
  }
}

Manifest read_manifest(const std::filesystem::path& dir) {
  const std::string text = read_small_file(dir / kManifestFile);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InvalidArgument("manifest " + (dir / kManifestFile).string() + " is not valid JSON");
  return manifest_from_json(j);
}

}  // namespace hdp::checkpoint
