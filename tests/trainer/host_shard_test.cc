// The host side of a rank's checkpoint shard (trainer/host_shard.h) on the CPU: the spans are the
// tensors' own memory (a save copies nothing before the saver's own copy, a restore writes in
// place), and a shard of the wrong size, dtype or mixed devices is refused naming it. Pinned
// host memory (ops::Tensor::pinned) is plain host memory without a device, and works the same.
#include "trainer/host_shard.h"

#include <gtest/gtest.h>

#include <numeric>

#include "common/error.h"

namespace hdp::trainer {
namespace {

using ops::DType;
using ops::Tensor;

HostShard::Buffers shard_of(std::int64_t n) {
  std::vector<float> p(static_cast<std::size_t>(n)), m(p.size()), v(p.size());
  std::iota(p.begin(), p.end(), 1.0f);
  std::iota(m.begin(), m.end(), 100.0f);
  std::iota(v.begin(), v.end(), 200.0f);
  return {Tensor::from_vector(p, {n}), Tensor::from_vector(m, {n}), Tensor::from_vector(v, {n})};
}

TEST(HostShard, OnTheCpuTheSpansAreTheTensorsOwnMemory) {
  const HostShard::Buffers shard = shard_of(5);
  HostShard host;
  const auto saved = host.for_save({10, 15}, shard);
  EXPECT_FALSE(host.staged());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(saved[i].data(), shard[i].data<float>()) << i;
    EXPECT_EQ(saved[i].size(), 5u);
  }
  EXPECT_EQ(saved[1][2], 102.0f);

  const checkpoint::ShardTarget target = host.for_restore({10, 15}, shard);
  EXPECT_EQ(target.range.begin, 10);
  target.buffers[2][4] = -1.0f;
  host.upload();  // nothing to copy: the restore wrote in place
  EXPECT_EQ(shard[2].to_vector<float>()[4], -1.0f);
}

TEST(HostShard, AShardThatIsNotThreeEqualF32BuffersIsRefused) {
  HostShard host;
  HostShard::Buffers shard = shard_of(4);
  EXPECT_THROW(host.for_save({0, 5}, shard), InvalidArgument);  // 4 elements for a range of 5
  shard[1] = Tensor::zeros({4}, DType::kF64);
  try {
    host.for_restore({0, 4}, shard);
    FAIL() << "an f64 moment was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("f64[4] cpu"), std::string::npos) << e.what();
  }
  shard[1] = Tensor();
  EXPECT_THROW(host.for_save({0, 4}, shard), InvalidArgument);
}

TEST(PinnedTensor, IsAHostTensorThatWorksWithOrWithoutADevice) {
  const Tensor t = Tensor::pinned({2, 3}, DType::kF32);
  EXPECT_EQ(t.device(), ops::Device::kCpu);
  EXPECT_EQ(t.numel(), 6);
  // Page-locked only where a device grants it; a machine without one gets plain memory.
  if (!ops::cuda_available()) {
    EXPECT_FALSE(t.is_pinned());
  }
  t.copy_from(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Tensor::pinned({0}, DType::kI64).numel(), 0);
  EXPECT_THROW(Tensor::pinned({-1}, DType::kF32), InvalidArgument);
  EXPECT_FALSE(Tensor::zeros({2}, DType::kF32).is_pinned());
}

}  // namespace
}  // namespace hdp::trainer
