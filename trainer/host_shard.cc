#include "trainer/host_shard.h"

#include <string>

#include "common/error.h"

namespace hdp::trainer {
namespace {

std::span<float> span_of(const ops::Tensor& t) { return {t.data<float>(), static_cast<std::size_t>(t.numel())}; }

}  // namespace

void HostShard::bind(const checkpoint::ShardRange& range, const Buffers& shard) {
  for (const ops::Tensor& t : shard) {
    if (!t.defined() || t.dtype() != ops::DType::kF32 || t.numel() != range.size() ||
        t.device() != shard[0].device()) {
      throw InvalidArgument("HostShard: a shard of " + std::to_string(range.size()) + " f32 elements on " +
                            ops::device_name(shard[0].device()) + " was expected, got " + t.describe());
    }
  }
  shard_ = shard;
  staged_ = shard[0].device() != ops::Device::kCpu;
  if (!staged_) {
    host_ = shard;
    return;
  }
  for (std::size_t i = 0; i < host_.size(); ++i) {
    if (!host_[i].defined() || host_[i].device() != ops::Device::kCpu || host_[i].numel() != range.size()) {
      host_[i] = ops::Tensor::pinned({range.size()}, ops::DType::kF32);
    }
  }
}

std::array<std::span<const float>, checkpoint::kBufferCount> HostShard::for_save(const checkpoint::ShardRange& range,
                                                                                   const Buffers& shard) {
  bind(range, shard);
  std::array<std::span<const float>, checkpoint::kBufferCount> spans;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (staged_) host_[i].copy_from(shard_[i]);
    spans[i] = span_of(host_[i]);
  }
  return spans;
}

checkpoint::ShardTarget HostShard::for_restore(const checkpoint::ShardRange& range, const Buffers& shard) {
  bind(range, shard);
  checkpoint::ShardTarget target{range, {}};
  for (std::size_t i = 0; i < host_.size(); ++i) target.buffers[i] = span_of(host_[i]);
  return target;
}

void HostShard::upload() {
  if (!staged_) return;
  for (std::size_t i = 0; i < shard_.size(); ++i) shard_[i].copy_from(host_[i]);
}

}  // namespace hdp::trainer
