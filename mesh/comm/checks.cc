#include "mesh/comm/checks.h"

#include <cctype>

#include "common/error.h"

namespace hdp::mesh {
namespace {

bool overlaps(const std::byte* a, std::size_t a_bytes, const std::byte* b, std::size_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

}  // namespace

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> offsets(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

void check_group(const std::string& what, int rank, int size, int max_size) {
  if (size < 1 || size > max_size) {
    const std::string range = max_size == std::numeric_limits<int>::max() ? " is below 1"
                                                                          : " is not in [1, " + std::to_string(max_size) + "]";
    throw InvalidArgument(what + ": size " + std::to_string(size) + range);
  }
  check_rank(what, "rank", rank, size);
}

void check_positive(const std::string& what, const char* name, std::chrono::milliseconds value) {
  if (value <= std::chrono::milliseconds::zero()) {
    throw InvalidArgument(what + ": " + name + " " + std::to_string(value.count()) + " ms is not positive");
  }
}

void check_given(bool given, const std::string& what, const char* name) {
  if (!given) throw InvalidArgument(what + ": no " + name);
}

void check_rank(const std::string& what, const char* name, int r, int size) {
  if (r < 0 || r >= size) {
    throw InvalidArgument(what + ": " + name + " " + std::to_string(r) + " is not in [0, " + std::to_string(size) + ")");
  }
}

void check_tag(const std::string& what, Tag tag) {
  if (tag >= kMaxTag) throw InvalidArgument(what + ": tag " + std::to_string(tag) + " is reserved (at or above 2^56)");
}

void check_p2p(const std::string& what, const ops::Tensor& buffer, int peer, Tag tag, int size, ops::Device device) {
  check_tensor(buffer, what, "buffer", device);
  check_rank(what, "rank", peer, size);
  check_tag(what, tag);
}

void check_tensor(const ops::Tensor& t, const std::string& what, const char* name, ops::Device device) {
  if (!t.defined()) throw InvalidArgument(what + ": " + name + " is an undefined tensor");
  // ops::Tensor is always dense and contiguous (ops/tensor.h): no stride to check.
  if (t.device() != device) {
    std::string expected = ops::device_name(device);
    for (char& c : expected) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    throw InvalidArgument(what + ": " + name + " is " + t.describe() + "; this communicator takes " + expected +
                          " tensors only");
  }
}

std::vector<std::int64_t> check_counts(std::span<const std::int64_t> counts, int size, const std::string& what) {
  if (std::ssize(counts) != size) {
    throw InvalidArgument(what + ": counts has " + std::to_string(counts.size()) + " entries for " +
                          std::to_string(size) + " ranks");
  }
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) throw InvalidArgument(what + ": counts[" + std::to_string(i) + "] is " + std::to_string(counts[i]));
  }
  return {counts.begin(), counts.end()};
}

Blocks check_blocks(const std::string& what, const ops::Tensor& whole, const char* whole_name, const ops::Tensor& part,
                    const char* part_name, std::span<const std::int64_t> counts_in, int rank, int size,
                    ops::Device device) {
  check_tensor(whole, what, whole_name, device);
  check_tensor(part, what, part_name, device);
  Blocks b{check_counts(counts_in, size, what), {}, ops::dtype_size(whole.dtype())};
  b.offsets = offsets_of(b.counts);
  if (whole.dtype() != part.dtype()) {
    throw InvalidArgument(what + ": " + whole_name + " is " + whole.describe() + " but " + part_name + " is " +
                          part.describe());
  }
  if (whole.numel() != b.offsets.back()) {
    throw InvalidArgument(what + ": " + whole_name + " has " + std::to_string(whole.numel()) +
                          " elements, the counts sum to " + std::to_string(b.offsets.back()));
  }
  const std::int64_t mine = b.counts[static_cast<std::size_t>(rank)];
  if (part.numel() != mine) {
    throw InvalidArgument(what + ": " + part_name + " has " + std::to_string(part.numel()) + " elements, counts[" +
                          std::to_string(rank) + "] is " + std::to_string(mine));
  }
  const std::byte* own = bytes_of(whole) + static_cast<std::size_t>(b.offsets[static_cast<std::size_t>(rank)]) * b.elem;
  if (overlaps(bytes_of(part), part.bytes(), bytes_of(whole), whole.bytes()) && bytes_of(part) != own) {
    throw InvalidArgument(what + ": " + part_name + " overlaps " + whole_name + " other than as this rank's block");
  }
  return b;
}

}  // namespace hdp::mesh
