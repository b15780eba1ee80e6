// File: kernels/cuda/pinned_pool.cc
//
// Page-locked host memory for the whole process, kept for reuse (host_alloc_pinned, memory.h).
// cudaMallocHost pins pages one by one and cudaFreeHost waits for the whole device, so a step that
// pinned and freed its buffers anew (the offloaded activations, the staged host-to-device copies)
// spent seconds in the driver. Here a freed block goes back to a list by size class, with an event
// recorded on the legacy default stream; it is handed out again only once that event has completed,
// that is once every copy queued before the free (on that stream or any blocking stream, which the
// legacy stream waits for) has read or written it. The blocks are never given back to the driver:
// the sizes a job asks for repeat from step to step, and a job's pinned total is what its largest
// step held at once.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"

namespace hdp::kernels::cuda {

namespace {

constexpr std::size_t kSmallest = 512;
constexpr std::size_t kPowerOfTwoUpTo = std::size_t{1} << 20;  // above: multiples of 2 MiB
constexpr std::size_t kLargeGrain = std::size_t{2} << 20;

// The size a request is served with: small ones by powers of two, large ones by 2 MiB, so that the
// same shapes find the same blocks and a block wastes at most 2 MiB (or half of a small one).
std::size_t size_class(std::size_t bytes) {
  if (bytes > kPowerOfTwoUpTo) return (bytes + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
  std::size_t size = kSmallest;
  while (size < bytes) size *= 2;
  return size;
}

struct Block {
  std::size_t size = 0;
  cudaEvent_t freed = nullptr;  // recorded at each free; created with the block
};

class PinnedPool {
 public:
  void* allocate(std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    {
      const std::lock_guard lock(mu_);
      for (auto [it, end] = idle_.equal_range(size); it != end; ++it) {
        const cudaError_t state = cudaEventQuery(blocks_.at(it->second).freed);
        if (state == cudaErrorNotReady) continue;  // a copy queued before its free still uses it
        cudaGetLastError();
        void* ptr = it->second;
        idle_.erase(it);
        return ptr;
      }
    }
    void* ptr = nullptr;
    if (cudaMallocHost(&ptr, size) != cudaSuccess) {
      cudaGetLastError();  // refused (no device, a locked-memory limit): the caller uses plain memory
      return nullptr;
    }
    cudaEvent_t freed = nullptr;
    if (cudaEventCreateWithFlags(&freed, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeHost(ptr);
      return nullptr;
    }
    const std::lock_guard lock(mu_);
    blocks_.emplace(ptr, Block{size, freed});
    return ptr;
  }

  void release(void* ptr) noexcept {
    const std::lock_guard lock(mu_);
    const auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;  // not one of the pool's: nothing to keep
    if (cudaEventRecord(it->second.freed, cudaStreamLegacy) != cudaSuccess) {
      // The context is gone (a fatal CUDA error): nothing will copy into the block again, and the
      // event cannot say so; keep it out of the list rather than hand it out unguarded.
      cudaGetLastError();
      return;
    }
    idle_.emplace(it->second.size, ptr);
  }

  std::size_t held_bytes() {
    const std::lock_guard lock(mu_);
    std::size_t total = 0;
    for (const auto& [ptr, block] : blocks_) total += block.size;
    return total;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;  // every block the pool made, idle or handed out
  std::multimap<std::size_t, void*> idle_;   // freed blocks by size class
};

// Never destroyed: a block may be freed by a static object's destructor after main returns, and the
// CUDA runtime may be torn down before a pool destructor could run.
PinnedPool& pool() {
  static auto* const p = new PinnedPool();
  return *p;
}

}  // namespace

void* host_alloc_pinned(std::size_t bytes) noexcept {
  if (bytes == 0) return nullptr;
  try {
    return pool().allocate(bytes);
  } catch (...) {  // out of host memory for the pool's own bookkeeping
    return nullptr;
  }
}

void host_free_pinned(void* ptr) noexcept {
  if (ptr) pool().release(ptr);
}

std::size_t host_pinned_held_bytes() { return pool().held_bytes(); }

}  // namespace hdp::kernels::cuda
