#include "checkpoint/flat_layout.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace hdp::checkpoint {

std::int64_t numel(const TensorSpec& tensor) {
  if (tensor.shape.empty()) throw InvalidArgument("tensor '" + tensor.name + "': shape must have at least one dimension");
  std::int64_t n = 1;
  for (std::int64_t dim : tensor.shape) {
    if (dim < 1) {
      throw InvalidArgument("tensor '" + tensor.name + "': dimension " + std::to_string(dim) + " must be >= 1");
    }
    n *= dim;
  }
  return n;
}

ShardRange intersect(ShardRange a, ShardRange b) {
  const std::int64_t begin = std::max(a.begin, b.begin);
  const std::int64_t end = std::min(a.end, b.end);
  return end > begin ? ShardRange{begin, end} : ShardRange{begin, begin};
}

FlatLayout::FlatLayout(std::vector<TensorSpec> tensors) : tensors_(std::move(tensors)) {
  if (tensors_.empty()) throw InvalidArgument("flat layout: the tensor list is empty");
  std::set<std::string> names;
  offsets_.reserve(tensors_.size() + 1);
  offsets_.push_back(0);
  for (const TensorSpec& tensor : tensors_) {
    if (tensor.name.empty()) throw InvalidArgument("flat layout: a tensor has an empty name");
    if (!names.insert(tensor.name).second) throw InvalidArgument("flat layout: tensor '" + tensor.name + "' appears twice");
    offsets_.push_back(offsets_.back() + checkpoint::numel(tensor));
  }
}

std::vector<Slice> FlatLayout::slices(ShardRange range) const {
  if (range.begin < 0 || range.end > total() || range.begin > range.end) {
    throw InvalidArgument("shard range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                          ") is not inside the flat buffer [0, " + std::to_string(total()) + ")");
  }
  std::vector<Slice> out;
  // First tensor whose end lies beyond range.begin; tensors are sorted by offset.
  auto it = std::upper_bound(offsets_.begin() + 1, offsets_.end(), range.begin);
  for (auto i = static_cast<std::size_t>(it - offsets_.begin() - 1); i < tensors_.size() && offsets_[i] < range.end; ++i) {
    const ShardRange part = intersect(range, {offsets_[i], offsets_[i + 1]});
    if (part.empty()) continue;
    out.push_back({i, part.begin - offsets_[i], part.size(), part.begin});
  }
  return out;
}

std::vector<ShardRange> split_evenly(std::int64_t total, int world_size) {
  if (world_size < 1) throw InvalidArgument("world size " + std::to_string(world_size) + " must be >= 1");
  if (total < 0) throw InvalidArgument("flat buffer size " + std::to_string(total) + " must be >= 0");
  std::vector<ShardRange> out;
  const std::int64_t base = total / world_size, extra = total % world_size;
  std::int64_t begin = 0;
  for (int r = 0; r < world_size; ++r) {
    const std::int64_t size = base + (r < extra ? 1 : 0);
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

}  // namespace hdp::checkpoint
