#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/posix_io.h"
#include "kernels/cpu/bf16.h"
#include "common/error.h"
#include "common/text.h"

namespace hdp::checkpoint {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

[[noreturn]] void bad(const fs::path& path, const std::string& what) {
  throw InvalidArgument("safetensors file '" + path.string() + "': " + what);
}

TensorDtype parse_dtype(const fs::path& path, const std::string& tensor, const std::string& name) {
  if (name == "F32") return TensorDtype::kF32;
  if (name == "BF16") return TensorDtype::kBF16;
  if (name == "F16") return TensorDtype::kF16;
  bad(path, "tensor " + quote_value(tensor) + " has dtype " + quote_value(name) + ", which hdp does not read (F32, BF16, F16)");
}

// a * b, or nullopt on overflow past INT64_MAX.
std::optional<std::int64_t> times(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

void write_all(int fd, const void* data, std::size_t size, const fs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("writing '" + path.string() + "': " + std::strerror(errno));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

const char* dtype_name(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32: return "F32";
    case TensorDtype::kBF16: return "BF16";
    case TensorDtype::kF16: return "F16";
  }
  return "?";
}

std::size_t dtype_bytes(TensorDtype dtype) { return dtype == TensorDtype::kF32 ? 4 : 2; }

float from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  } else {
    bits = sign;
  }
  return std::bit_cast<float>(bits);
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    std::int64_t n = 1;
    for (auto d : t.shape) {
      if (d < 0) throw InvalidArgument("tensor " + quote_value(t.name) + ": negative dimension");
      n *= d;
    }
    if (n != static_cast<std::int64_t>(t.values.size())) {
      throw InvalidArgument("tensor " + quote_value(t.name) + ": its shape holds " + std::to_string(n) +
                            " elements, its values " + std::to_string(t.values.size()));
    }
    if (!names.insert(t.name).second || t.name == "__metadata__") {
      throw InvalidArgument("tensor name " + quote_value(t.name) + " is used twice or reserved");
    }
    order.push_back(&t);
  }
  // One dtype for all: sorting by name keeps every tensor aligned to its element size.
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::int64_t offset = 0;
  const auto element = static_cast<std::int64_t>(dtype_bytes(dtype));
  for (const auto* t : order) {
    const std::int64_t bytes = static_cast<std::int64_t>(t->values.size()) * element;
    header[t->name] = {{"dtype", dtype_name(dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-aligned
  const std::uint64_t length = text.size();

  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("creating '" + tmp.string() + "': " + std::strerror(errno));
  try {
    unsigned char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));  // little-endian
    write_all(fd, prefix, sizeof prefix, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    std::vector<char> buffer;
    for (const auto* t : order) {
      constexpr std::size_t kChunk = 1 << 20;  // elements converted per write
      for (std::size_t at = 0; at < t->values.size(); at += kChunk) {
        const std::size_t n = std::min(kChunk, t->values.size() - at);
        buffer.resize(n * static_cast<std::size_t>(element));
        if (dtype == TensorDtype::kF32) {
          std::memcpy(buffer.data(), t->values.data() + at, n * 4);
        } else if (dtype == TensorDtype::kBF16) {
          for (std::size_t i = 0; i < n; ++i) {
            const std::uint16_t b = kernels::cpu::f32_to_bf16(t->values[at + i]);
            std::memcpy(buffer.data() + 2 * i, &b, 2);
          }
        } else {
          throw InvalidArgument("hdp writes F32 or BF16, not F16");
        }
        write_all(fd, buffer.data(), buffer.size(), tmp);
      }
    }
    if (::fsync(fd) != 0) throw Error("fsync '" + tmp.string() + "': " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    fs::remove(tmp);
    throw;
  }
  ::close(fd);
  fs::rename(tmp, path);
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

SafetensorsFile::SafetensorsFile(fs::path path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) bad(path_, "cannot be opened");
  std::error_code ec;
  const auto size = static_cast<std::uint64_t>(fs::file_size(path_, ec));
  if (ec) bad(path_, "cannot be read: " + ec.message());
  if (size < 8) bad(path_, "is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  unsigned char prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  if (length > kMaxHeaderBytes) bad(path_, "header length " + std::to_string(length) + " is above 100,000,000");
  if (8 + length > size) {
    bad(path_, "header length " + std::to_string(length) + " runs past the end of the file (" + std::to_string(size) +
                   " bytes)");
  }
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  if (!in) bad(path_, "cannot read its header");
  const json header = json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object()) bad(path_, "the header is not a JSON object");
  data_start_ = static_cast<std::int64_t>(8 + length);
  const auto data_bytes = static_cast<std::int64_t>(size) - data_start_;
  std::vector<std::pair<std::int64_t, std::string>> by_offset;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(path_, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad(path_, "__metadata__ value " + quote_value(k) + " is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + quote_value(name);
    if (!entry.is_object()) bad(path_, what + " is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) bad(path_, what + " has no dtype");
    if (shape == entry.end() || !shape->is_array()) bad(path_, what + " has no shape");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      bad(path_, what + " has no data_offsets [begin, end]");
    }
    TensorInfo info;
    info.dtype = parse_dtype(path_, name, dtype->get<std::string>());
    std::optional<std::int64_t> bytes = static_cast<std::int64_t>(dtype_bytes(info.dtype));
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        bad(path_, what + " has a shape entry that is not a non-negative integer");
      }
      info.shape.push_back(d.get<std::int64_t>());
      if (bytes) bytes = times(*bytes, info.shape.back());
    }
    if (!bytes) bad(path_, what + ": its shape overflows");
    const std::uint64_t begin = (*offsets)[0].get<std::uint64_t>(), end = (*offsets)[1].get<std::uint64_t>();
    if (begin > end || end > static_cast<std::uint64_t>(data_bytes)) {
      bad(path_, what + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] outside the data section of " + std::to_string(data_bytes) + " bytes (the file is truncated or its header lies)");
    }
    info.begin = static_cast<std::int64_t>(begin);
    info.end = static_cast<std::int64_t>(end);
    if (info.end - info.begin != *bytes) {
      bad(path_, what + " holds " + std::to_string(info.end - info.begin) + " bytes, its dtype and shape say " +
                     std::to_string(*bytes));
    }
    by_offset.emplace_back(info.begin, name);
    tensors_.emplace(name, std::move(info));
  }
  // The entries tile the data section exactly.
  std::sort(by_offset.begin(), by_offset.end());
  std::int64_t expected = 0;
  for (const auto& [begin, name] : by_offset) {
    const TensorInfo& t = tensors_.at(name);
    if (begin != expected) {
      bad(path_, "tensor " + quote_value(name) + " begins at data byte " + std::to_string(begin) + ", expected " +
                     std::to_string(expected) + " (a hole or an overlap)");
    }
    expected = t.end;
  }
  if (expected != data_bytes) {
    bad(path_, "the tensors end at data byte " + std::to_string(expected) + " but the data section holds " +
                   std::to_string(data_bytes) + " bytes");
  }
}

void SafetensorsFile::read(const std::string& name, std::span<float> out) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) bad(path_, "has no tensor " + quote_value(name));
  const TensorInfo& t = it->second;
  if (static_cast<std::int64_t>(out.size()) != t.elements()) {
    bad(path_, "tensor " + quote_value(name) + " has " + std::to_string(t.elements()) + " elements, expected " +
                   std::to_string(out.size()));
  }
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + t.begin);
  const std::size_t element = dtype_bytes(t.dtype);
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<char> buffer;
  for (std::size_t at = 0; at < out.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, out.size() - at);
    buffer.resize(n * element);
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (!in) bad(path_, "tensor " + quote_value(name) + " cannot be read (the file changed?)");
    for (std::size_t i = 0; i < n; ++i) {
      if (t.dtype == TensorDtype::kF32) {
        std::memcpy(&out[at + i], buffer.data() + 4 * i, 4);
      } else {
        std::uint16_t bits;
        std::memcpy(&bits, buffer.data() + 2 * i, 2);
        out[at + i] = t.dtype == TensorDtype::kBF16 ? kernels::cpu::bf16_to_f32(bits) : from_f16(bits);
      }
    }
  }
}

}  // namespace hdp::checkpoint
