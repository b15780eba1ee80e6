// MemoryStore: the conformance suite, plus what only an in-process store can promise.
#include "elastic/memory_store.h"
#include "tests/elastic/store_conformance.h"

namespace hdp::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, StoreConformance, ::testing::Values(memory_backend()), backend_name);

TEST(MemoryStore, WaitWakesOnTheWriteNotOnAPollTick) {
  elastic::MemoryStore store;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.set("k", "v");
  });
  const auto start = std::chrono::steady_clock::now();
  store.wait({"k"}, std::chrono::seconds(5));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  writer.join();
  EXPECT_LT(elapsed, std::chrono::milliseconds(50 + 40));
}

}  // namespace
}  // namespace hdp::test
