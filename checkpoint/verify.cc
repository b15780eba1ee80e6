#include "checkpoint/verify.h"

#include <algorithm>

#include "checkpoint/hdf5_file.h"
#include "checkpoint/shard_io.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace fs = std::filesystem;
namespace {

// Reads of at most this many elements bound the memory a verify needs.
constexpr std::int64_t kReadElems = std::int64_t{4} << 20;

// The tensors with a piece in file `index`, for messages about a whole file.
std::string tensors_in_file(const Manifest& m, std::size_t index) {
  std::vector<std::string> names;
  for (const TensorRecord& tensor : m.tensors) {
    const auto& pieces = tensor.pieces[0];
    if (std::any_of(pieces.begin(), pieces.end(), [&](const PieceRecord& p) { return p.file == index; })) {
      names.push_back(tensor.name);
    }
  }
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 3; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 3) text += " (+" + std::to_string(names.size() - 3) + " more)";
  return text;
}

// Checks one file: size, that it opens, every piece and its RNG state.
void verify_file(const Manifest& m, const fs::path& dir, std::size_t index, VerifyReport& report) {
  const FileRecord& record = m.files[index];
  const fs::path path = dir / record.name;
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) {
    report.faults.push_back({record.name, tensors_in_file(m, index), "missing"});
    return;
  }
  if (size != record.bytes) {
    report.faults.push_back({record.name, tensors_in_file(m, index),
                             std::to_string(size) + " bytes, the manifest says " + std::to_string(record.bytes) +
                                 (size < record.bytes ? " (truncated)" : "")});
  }
  std::optional<Hdf5File> file;
  try {
    file.emplace(Hdf5File::open_read(path));
  } catch (const Error& e) {
    report.faults.push_back({record.name, tensors_in_file(m, index), e.what()});
    return;
  }
  const std::int64_t block = m.checksum_block_elems();
  const std::int64_t chunk = std::max(block, kReadElems / block * block);
  std::vector<float> buffer, scratch;
  for (const TensorRecord& tensor : m.tensors) {
    for (std::size_t b = 0; b < kBufferCount; ++b) {
      for (const PieceRecord& piece : tensor.pieces[b]) {
        if (piece.file != index) continue;
        const std::string what = std::string(kBufferNames[b]) + " " + tensor.name;
        try {
          for (std::int64_t begin = 0; begin < piece.length; begin += chunk) {
            buffer.resize(static_cast<std::size_t>(std::min(chunk, piece.length - begin)));
            read_piece_verified(*file, piece, block, begin, buffer, what, scratch);
            report.bytes_checked += buffer.size() * sizeof(float);
          }
        } catch (const Error& e) {
          report.faults.push_back({record.name, what, e.what()});
        }
      }
    }
  }
  try {
    report.bytes_checked += read_rng_verified(*file, record).size();
  } catch (const Error& e) {
    report.faults.push_back({record.name, "/state/rng", e.what()});
  }
}

}  // namespace

VerifyReport verify_checkpoint(const fs::path& dir) {
  VerifyReport report;
  try {
    report.manifest = read_manifest(dir);
  } catch (const Error& e) {
    report.faults.push_back({std::string(kManifestFile), {}, e.what()});
    return report;
  }
  const std::vector<std::string> structure = structural_faults(*report.manifest);
  for (const std::string& fault : structure) report.faults.push_back({std::string(kManifestFile), {}, fault});
  if (!structure.empty()) return report;
  for (std::size_t f = 0; f < report.manifest->files.size(); ++f) verify_file(*report.manifest, dir, f, report);
  return report;
}

}  // namespace hdp::checkpoint
