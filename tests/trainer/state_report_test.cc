// Rank 0's step report off the critical path (trainer/state_report.h), over an in-memory store
// that a test can hold (every call waits while it is held: a stalled Redis that accepts and does
// not answer) or fail (every call throws StoreUnavailable: a Redis that is down).
//   - post() returns at once while the store is held: 1,000 posts in well under a second (each is
//     a lock and a move; bound 1 s for a loaded machine);
//   - once the store answers again, the newest state is written (the step of the last post), and
//     the samples of the stall are kept, the newest kMaxPendingWrites of them in order;
//   - a failing store: the report is retried until it lands; reads() then carries the values of
//     `control` and `settings` with a rising serial;
//   - a report whose generation is no longer current is dropped (stale), not retried;
//   - flush() waits for the write, and gives up after its timeout while the store is held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/memory_store.h"
#include "tests/elastic/forwarding_store.h"
#include "trainer/state_report.h"

namespace hdp::trainer {
namespace {

using namespace std::chrono_literals;

class HeldStore : public elastic::ForwardingStore {
 public:
  HeldStore() : ForwardingStore(std::make_shared<elastic::MemoryStore>()) {}
  void hold(bool on) {
    {
      std::lock_guard lock(mutex_);
      held_ = on;
    }
    changed_.notify_all();
  }
  void fail(bool on) { failing_ = on; }
  int calls() const { return calls_; }

 protected:
  void before_call() override {
    ++calls_;
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !held_; });
    if (failing_) throw StoreUnavailable("redis at test: connection refused");
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  std::atomic<bool> failing_{false};
  std::atomic<int> calls_{0};
};

elastic::Fields state_of(int step) { return {{"status", "running"}, {"step", std::to_string(step)}}; }
std::vector<elastic::Write> sample_of(int step) {
  return {elastic::sample_write({{"step", std::to_string(step)}, {"loss", "1.5"}})};
}

TEST(StateReport, PostsDuringAStallCostNothingAndTheNewestStateLandsAfterIt) {
  auto store = std::make_shared<HeldStore>();
  store->set(elastic::keys::kGeneration, "3");
  StateReport report(store, {elastic::keys::kControl, elastic::keys::kSettings}, 20ms);
  store->hold(true);
  const auto began = std::chrono::steady_clock::now();
  constexpr int kPosts = 1000;
  for (int step = 1; step <= kPosts; ++step) report.post(3, state_of(step), sample_of(step));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_LT(seconds, 1.0) << "post() waited for the store";
  EXPECT_FALSE(report.flush(100ms)) << "nothing can be written while the store is held";
  store->hold(false);
  ASSERT_TRUE(report.flush(5s));
  EXPECT_EQ(store->hash_get_all(elastic::keys::kState).at("step"), std::to_string(kPosts));
  const auto samples = store->stream_tail(elastic::keys::kSamples, 2000);
  // The first report the thread took (the posts before it woke, at most the first few hundred)
  // waited in flight; every later one was merged into one pending report, trimmed to the newest
  // kMaxPendingWrites: so the stream ends with steps 489..1000 in order, after at most one
  // in-flight report's worth of earlier steps.
  ASSERT_GE(samples.size(), StateReport::kMaxPendingWrites);
  ASSERT_LE(samples.size(), 2 * StateReport::kMaxPendingWrites);
  for (std::size_t i = 0; i < StateReport::kMaxPendingWrites; ++i) {
    const auto& entry = samples[samples.size() - 1 - i];
    ASSERT_EQ(entry.fields.at(0).second, std::to_string(kPosts - static_cast<int>(i)));
  }
  EXPECT_LE(report.written(), 3u) << "the stall's reports were merged, not written one by one";
}

TEST(StateReport, AReportTheStoreRefusedIsRetriedAndItsReadsComeBack) {
  auto store = std::make_shared<HeldStore>();
  store->set(elastic::keys::kGeneration, "2");
  store->set(elastic::keys::kSettings, "{}");
  StateReport report(store, {elastic::keys::kControl, elastic::keys::kSettings}, 20ms);
  EXPECT_EQ(report.reads().serial, 0u);
  store->fail(true);
  report.post(2, state_of(7), sample_of(7));
  // Retried every 20 ms while failing: several calls within half a second.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (store->calls() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_GE(store->calls(), 4);
  EXPECT_EQ(report.written(), 0u);
  store->fail(false);
  ASSERT_TRUE(report.flush(5s));
  EXPECT_EQ(report.written(), 1u);
  const StateReport::Reads reads = report.reads();
  EXPECT_EQ(reads.serial, 1u);
  ASSERT_EQ(reads.values.size(), 2u);
  EXPECT_FALSE(reads.values[0].has_value());
  EXPECT_EQ(reads.values[1], "{}");
  report.post(2, state_of(8), sample_of(8));
  ASSERT_TRUE(report.flush(5s));
  EXPECT_EQ(report.reads().serial, 2u);
  EXPECT_EQ(store->hash_get_all(elastic::keys::kState).at("step"), "8");
}

TEST(StateReport, AReportOfAGenerationNoLongerCurrentIsDropped) {
  auto store = std::make_shared<HeldStore>();
  store->set(elastic::keys::kGeneration, "5");
  StateReport report(store, {}, 20ms);
  report.post(4, state_of(10), sample_of(10));
  ASSERT_TRUE(report.flush(5s));
  EXPECT_EQ(report.written(), 0u);
  EXPECT_EQ(report.stale(), 1u);
  EXPECT_FALSE(store->hash_get_all(elastic::keys::kState).contains("step"));
}

}  // namespace
}  // namespace hdp::trainer
