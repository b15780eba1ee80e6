// File: checkpoint/safetensors.h
//
// The safetensors format (Hugging Face's weights files; ../shared references, formats.md §2): an
// 8-byte little-endian header length N, N bytes of a JSON object {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {string: string}} padded with spaces, then the
// tensors' bytes, row-major, little-endian, offsets relative to the end of the header. hdp writes
// and reads F32 and BF16 and also reads F16; every other dtype is refused by name.
//
// The reader checks what the reference implementation checks: N at most 100,000,000 and inside
// the file, the header a JSON object, each entry's dtype, shape and offsets, its byte size equal
// to the product of its shape times the element size (overflow-checked), and the entries tiling
// the data exactly (no hole, no overlap, nothing after the last). Every failure is an
// InvalidArgument naming the file and the tensor or byte offset at fault, never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace hdp::checkpoint {

enum class TensorDtype { kF32, kBF16, kF16 };

// "F32", "BF16", "F16".
const char* dtype_name(TensorDtype dtype);
std::size_t dtype_bytes(TensorDtype dtype);

struct TensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;  // converted to the file's dtype on write
};

// Writes `tensors` to `path` in `dtype` (BF16: round to nearest even), with `metadata` as
// __metadata__, tensors sorted by name, each aligned to its element size; through a temporary
// file renamed into place once it is durable. Throws InvalidArgument for a shape that does not
// match its values or a duplicate name, Error for I/O.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata = {});

struct TensorInfo {
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;  // byte offsets into the data section
  std::int64_t elements() const;
};

// One safetensors file, its header checked on open (the data is read on demand).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Reads tensor `name` converted to f32 into `out` (its size must equal the tensor's elements).
  void read(const std::string& name, std::span<float> out) const;

 private:
  std::filesystem::path path_;
  std::int64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

float from_f16(std::uint16_t bits);

}  // namespace hdp::checkpoint
