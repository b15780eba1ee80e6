// The pinned host pool (kernels/cuda/pinned_pool.cc) and the staged host-to-device copy
// (kernels/cuda/memory.cc): a freed block is reused, but never while a copy queued before its free
// may still touch it; a copy from pageable memory leaves the source free to overwrite at once and
// lands whole. Label gpu: without a CUDA device every case is skipped with a message.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/memory.h"
#include "ops/linear.h"
#include "ops/tensor.h"

namespace hdp::kernels::cuda {
namespace {

class CudaMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: the pinned pool not checked";
  }
};

// The other tests of this binary leave idle blocks of the small classes behind, so the case works in
// size classes of its own (38 and 40 MiB: large requests go by 2 MiB) and reads the pool's total.
TEST_F(CudaMemory, AFreedPinnedBlockIsHandedOutAgainForTheSameSizeClass) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  device_synchronize();
  const std::size_t held_before = host_pinned_held_bytes();
  void* a = host_alloc_pinned(37 * kMiB + 1);  // served as 38 MiB
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(host_pinned_held_bytes(), held_before + 38 * kMiB);
  host_free_pinned(a);
  device_synchronize();  // the free's event has completed
  void* b = host_alloc_pinned(38 * kMiB);  // the same class: a's block, nothing new pinned
  EXPECT_EQ(b, a);
  EXPECT_EQ(host_pinned_held_bytes(), held_before + 38 * kMiB);
  void* c = host_alloc_pinned(38 * kMiB + 1);  // the next class: a block of its own
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c, a);
  EXPECT_EQ(host_pinned_held_bytes(), held_before + 78 * kMiB);
  host_free_pinned(b);
  host_free_pinned(c);
}

// A staged copy's block goes back to the pool behind the copy: while the device is still busy with
// work queued before it, asking for the same size must give another block.
TEST_F(CudaMemory, AStagingBlockIsNotReusedBeforeItsCopyHasRun) {
  using ops::Device;
  using ops::DType;
  using ops::Tensor;
  // Work to keep the device busy for a while: a 4096^3 f32 product, a few ms on any current GPU.
  const Tensor x = Tensor::zeros({4096, 4096}, DType::kF32, Device::kCuda);
  const Tensor w = Tensor::zeros({4096, 4096}, DType::kF32, Device::kCuda);
  const std::size_t bytes = std::size_t{1} << 20;
  std::vector<std::uint8_t> host(bytes, 7);
  void* dst = device_alloc(bytes);
  device_synchronize();
  bool checked = false;
  for (int attempt = 0; attempt < 5 && !checked; ++attempt) {
    for (int i = 0; i < 4; ++i) (void)ops::linear_forward(x, w);
    copy_host_to_device(dst, host.data(), bytes);  // staged: its block is freed, guarded by an event
    void* fresh = host_alloc_pinned(bytes);
    ASSERT_NE(fresh, nullptr);
    if (cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady) {  // the copy may not have run yet
      checked = true;
      std::memset(fresh, 0xAB, bytes);  // were it the staging block, the copy would read this
    }
    cudaGetLastError();
    host_free_pinned(fresh);
    device_synchronize();
  }
  ASSERT_TRUE(checked) << "the device finished the products before the host asked again: nothing was shown";
  std::vector<std::uint8_t> back(bytes);
  copy_device_to_host(back.data(), dst, bytes);
  EXPECT_EQ(back, host);
  device_free(dst);
}

// The source of a copy from pageable memory may be overwritten as soon as the call returns: a hundred
// copies from one buffer, rewritten after each, queued behind products that keep the device busy
// (so that they are still queued when the host rewrites the buffer), land with their own values.
TEST_F(CudaMemory, ACopyFromPageableMemoryTakesItsBytesBeforeReturning) {
  using ops::Device;
  using ops::DType;
  using ops::Tensor;
  constexpr int kCopies = 100;
  constexpr std::size_t kCount = 10'000;
  const Tensor x = Tensor::zeros({4096, 4096}, DType::kF32, Device::kCuda);
  const Tensor w = Tensor::zeros({4096, 4096}, DType::kF32, Device::kCuda);
  std::vector<std::int32_t> source(kCount);
  std::vector<void*> device(kCopies);
  for (int c = 0; c < kCopies; ++c) device[static_cast<std::size_t>(c)] = device_alloc(kCount * sizeof(std::int32_t));
  device_synchronize();
  for (int i = 0; i < 8; ++i) (void)ops::linear_forward(x, w);
  for (int c = 0; c < kCopies; ++c) {
    for (std::size_t i = 0; i < kCount; ++i) source[i] = static_cast<std::int32_t>(c * 1'000'003 + i);
    copy_host_to_device(device[static_cast<std::size_t>(c)], source.data(), kCount * sizeof(std::int32_t));
  }
  std::fill(source.begin(), source.end(), -1);
  // Queued, not done: the copies did not wait for the device (staged), and their sources were
  // rewritten while they waited.
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady)
      << "the device finished the products before the copies were queued: the case shows less than it says";
  cudaGetLastError();
  for (int c = 0; c < kCopies; ++c) {
    std::vector<std::int32_t> back(kCount);
    copy_device_to_host(back.data(), device[static_cast<std::size_t>(c)], kCount * sizeof(std::int32_t));
    for (std::size_t i = 0; i < kCount; i += 997) ASSERT_EQ(back[i], static_cast<std::int32_t>(c * 1'000'003 + i)) << c;
    device_free(device[static_cast<std::size_t>(c)]);
  }
}

}  // namespace
}  // namespace hdp::kernels::cuda
