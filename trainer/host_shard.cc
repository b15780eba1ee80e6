#include "trainer/host_shard.h"

#include <string>

#include "common/error.h"

namespace hdp::trainer {
namespace {

std::span<float> span_of(const ops::Tensor& t) { return {t.data<float>(), static_cast<std::size_t>(t.numel())}; }

}  // namespace

bool HostShard::bind(const checkpoint::ShardRange& range, const Buffers& shard) {
  for (const ops::Tensor& t : shard) {
    if (!t.defined() || t.dtype() != ops::DType::kF32 || t.numel() != range.size() ||
        t.device() != shard[0].device()) {
      throw InvalidArgument("HostShard: a shard of " + std::to_string(range.size()) + " f32 elements on " +
                            ops::device_name(shard[0].device()) + " was expected, got " + t.describe());
    }
  }
  staged_ = shard[0].device() != ops::Device::kCpu;
  if (!staged_) return false;
  for (ops::Tensor& h : host_) {
    if (!h.defined() || h.numel() != range.size()) h = ops::Tensor::pinned({range.size()}, ops::DType::kF32);
  }
  return true;
}

std::array<std::span<const float>, checkpoint::kBufferCount> HostShard::for_save(const checkpoint::ShardRange& range,
                                                                                   const Buffers& shard) {
  const bool staged = bind(range, shard);
  std::array<std::span<const float>, checkpoint::kBufferCount> spans;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (staged) host_[i].copy_from(shard[i]);
    spans[i] = span_of(staged ? host_[i] : shard[i]);
  }
  return spans;
}

checkpoint::ShardTarget HostShard::for_restore(const checkpoint::ShardRange& range, const Buffers& shard) {
  const bool staged = bind(range, shard);
  pending_ = staged ? shard : Buffers{};
  checkpoint::ShardTarget target{range, {}};
  for (std::size_t i = 0; i < host_.size(); ++i) target.buffers[i] = span_of(staged ? host_[i] : shard[i]);
  return target;
}

void HostShard::upload() {
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].defined()) pending_[i].copy_from(host_[i]);
  }
  pending_ = {};
}

}  // namespace hdp::trainer
