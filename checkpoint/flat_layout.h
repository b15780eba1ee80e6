// File: checkpoint/flat_layout.h
//
// The flat fp32 buffer the trainer keeps its parameters (and each AdamW moment) in: named tensors
// with global shapes laid back to back, and ZeRO-1 style shard ranges [begin, end) of that buffer
// which may cut a tensor anywhere. Pure arithmetic, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hdp::checkpoint {

// One tensor by its Hugging Face LLaMA name ("model.layers.0.self_attn.q_proj.weight") and global shape.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Elements of a shape; throws InvalidArgument for an empty shape or a dimension < 1.
std::int64_t numel(const TensorSpec& tensor);

// A half-open range [begin, end) of flat-buffer elements.
struct ShardRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const ShardRange&) const = default;
};

// The overlap of two ranges (empty when they are disjoint: begin == end).
ShardRange intersect(ShardRange a, ShardRange b);

// The part of one tensor that a shard range covers.
struct Slice {
  std::size_t tensor = 0;          // index into FlatLayout::tensors()
  std::int64_t tensor_offset = 0;  // first element, within the flattened tensor
  std::int64_t length = 0;         // elements
  std::int64_t flat_offset = 0;    // first element, within the flat buffer
};

class FlatLayout {
 public:
  // Throws InvalidArgument on an empty list, an empty or duplicate name, or a bad shape.
  explicit FlatLayout(std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::int64_t offset(std::size_t tensor) const { return offsets_.at(tensor); }
  std::int64_t numel(std::size_t tensor) const { return offsets_.at(tensor + 1) - offsets_.at(tensor); }
  std::int64_t total() const { return offsets_.back(); }

  // The tensor slices inside `range`, in flat order; throws InvalidArgument when the range leaves
  // [0, total()).
  std::vector<Slice> slices(ShardRange range) const;

 private:
  std::vector<TensorSpec> tensors_;
  std::vector<std::int64_t> offsets_;  // offsets_[i] = first element of tensor i; back() = total
};

// The ZeRO-1 partition of `total` elements over `world_size` ranks: the first total % world_size
// ranks get one element more. Throws InvalidArgument for world_size < 1.
std::vector<ShardRange> split_evenly(std::int64_t total, int world_size);

}  // namespace hdp::checkpoint
