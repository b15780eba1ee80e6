// ops/host_memory.h: after retain_freed_host_memory(), a block below kHeapBlockLimit comes from
// the heap (no mapping of its own) and stays with the process once freed (the heap is not
// trimmed), also when a thread other than the main one allocates and frees it. With glibc's
// defaults a block of this size is mapped on its own and unmapped on free; with the thresholds but
// a thread arena, the heap that held a thread's third block is unmapped: the checks fail. Each
// case runs in a child process, so the settings do not reach the other tests of this binary.
// Tensor::whole_pages: each such tensor has its pages to itself, where plain tensors of the same
// sizes share pages with each other.
#include <malloc.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hdp/config.h"
#include "ops/host_memory.h"
#include "ops/tensor.h"

namespace hdp::ops {
namespace {

constexpr std::size_t kBlock = 16u << 20;
static_assert(kBlock < kHeapBlockLimit);

// Exit codes of the child: 0 the block was kept, 2 mapped on its own, 3 trimmed on free, 6 a
// thread's block left the heap (its arena unmapped the heap it emptied).
int allocate_touch_and_free() {
  const std::size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBlock);
  if (!block) return 4;
  std::memset(block, 1, kBlock);
  const bool own_mapping = mallinfo2().hblkhd >= mapped_before + kBlock;
  std::free(block);
  if (own_mapping) return 2;
  if (mallinfo2().fordblks < kBlock) return 3;  // the freed block left the heap
  return 0;
}

// The same from another thread (the transport's and the collectives' allocate so): three blocks
// of 24 MiB, more than a thread arena's first heap holds (64 MiB), so that the third lives in a
// heap of its own, freed there, checked from the main thread (mallinfo2 sums every arena).
int on_a_thread() {
  constexpr std::size_t kEach = 24u << 20, kCount = 3;
  static_assert(kEach < kHeapBlockLimit);
  const std::size_t free_before = mallinfo2().fordblks;
  bool mapped = false;
  std::thread([&] {
    void* blocks[kCount] = {};
    const std::size_t mapped_before = mallinfo2().hblkhd;
    for (void*& b : blocks) {
      b = std::malloc(kEach);
      if (b) std::memset(b, 1, kEach);
    }
    mapped = mallinfo2().hblkhd >= mapped_before + kEach;
    for (void* b : blocks) std::free(b);
  }).join();
  if (mapped) return 2;
  // Kept: all three (72 MiB) free in the heap; with a thread arena, the heap that held the third
  // is unmapped (48 MiB kept). Half a block of margin for what else the thread left behind.
  return mallinfo2().fordblks + kEach / 2 >= free_before + kCount * kEach ? 0 : 6;
}

// A sanitizer build (HDP_SANITIZE names them) has an allocator of its own; the allocator's
// settings from the environment would change what the children start with.
bool skip(std::string* why) {
  if (sizeof(HDP_SANITIZE) > 1) {
    *why = "the sanitizers' allocator is not glibc's";
  } else if (std::getenv("GLIBC_TUNABLES") || std::getenv("MALLOC_ARENA_MAX") || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
             std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    *why = "the allocator is configured by the environment";
  }
  return !why->empty();
}

TEST(HostMemory, FreedBlocksStayWithTheProcess) {
  if (std::string why; skip(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!retain_freed_host_memory()) std::exit(5);
        std::exit(allocate_touch_and_free());
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        if (!retain_freed_host_memory()) std::exit(5);
        std::exit(on_a_thread());
      },
      testing::ExitedWithCode(0), "");
}

// The check above can fail: with glibc's defaults the block is mapped on its own.
TEST(HostMemory, WithoutItABlockOfThisSizeIsMappedOnItsOwn) {
  if (std::string why; skip(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(allocate_touch_and_free()), testing::ExitedWithCode(2), "");
  EXPECT_EXIT(std::exit(on_a_thread()), testing::ExitedWithCode(2), "");
}

// The thresholds alone do not keep a thread's blocks: the heap its arena emptied is unmapped.
TEST(HostMemory, WithoutOneArenaAThreadsBlockLeavesTheHeap) {
  if (std::string why; skip(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockLimit));
        mallopt(M_TRIM_THRESHOLD, INT_MAX);
        std::exit(on_a_thread());
      },
      testing::ExitedWithCode(6), "");
}

// The pages [first, last] a tensor's bytes touch.
struct Pages {
  std::uintptr_t first, last;
  bool overlaps(const Pages& other) const { return first <= other.last && other.first <= last; }
};
Pages pages_of(const Tensor& t, std::uintptr_t page) {
  const auto begin = reinterpret_cast<std::uintptr_t>(t.raw());
  return {begin / page, (begin + t.bytes() - 1) / page};
}

TEST(HostMemory, WholePagesTensorsShareNoPageWithOtherTensors) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<Tensor> whole, plain;
  // Sizes below, at and above a page, interleaved with plain tensors of the same sizes.
  for (int i = 0; i < 64; ++i) {
    const std::int64_t floats = 1 + (i * 331) % 3000;
    whole.push_back(Tensor::whole_pages({floats}, DType::kF32));
    plain.push_back(Tensor::empty({floats}, DType::kF32));
  }
  for (std::size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(whole[i].raw()) % page, 0u) << "tensor " << i;
    for (std::size_t j = 0; j < whole.size(); ++j) {
      if (j != i) {
        EXPECT_FALSE(pages_of(whole[i], page).overlaps(pages_of(whole[j], page))) << i << " and " << j;
      }
    }
    for (std::size_t j = 0; j < plain.size(); ++j) {
      EXPECT_FALSE(pages_of(whole[i], page).overlaps(pages_of(plain[j], page))) << i << " and plain " << j;
    }
  }
  // The check can fail: plain tensors of these sizes do share pages.
  int shared = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    for (std::size_t j = i + 1; j < plain.size(); ++j) shared += pages_of(plain[i], page).overlaps(pages_of(plain[j], page));
  }
  EXPECT_GT(shared, 0);
}

}  // namespace
}  // namespace hdp::ops
