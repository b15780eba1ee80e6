// The agent's generation watch (agents/generation_watcher.h) over a MemoryStore, driven the way the
// agent drives it: each read's outcome comes back on the Asio thread, which grants again until
// its next heartbeat. Bounds: an append 100 ms into a 2 s grant is read within 1 s (a notice on a
// loaded 2-core machine); a grant that has run out is not read again before a new grant.
#include "agents/generation_watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "elastic/transaction.h"

namespace hdp::agents {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void append(elastic::Store& store, const std::string& value) {
  store.commit(elastic::Transaction{}.add(elastic::Write::stream_append(
      elastic::keys::kGenerationLog, {{"gen", value}}, elastic::keys::kGenerationLogLength)));
}

// The agent between two heartbeats: every read's outcome is followed by a grant up to the same
// point (shortly before the next heartbeat), as Agent::on_watch does. Once that point has passed,
// the watch must wait for the next heartbeat's grant; it used to answer each late grant at once
// with "nothing", and the Asio thread granted again, a busy loop between the two threads until
// the heartbeat (about a tenth of every heartbeat interval, in every following agent).
TEST(GenerationWatcher, AGrantThatHasRunOutIsNotAnsweredAgainAndAgain) {
  auto store = std::make_shared<elastic::MemoryStore>();
  append(*store, "1");
  boost::asio::io_context io;
  const auto until = Clock::now() + 100ms;
  std::atomic<int> reads = 0;
  std::optional<GenerationWatcher> watcher;
  watcher.emplace(store, std::make_shared<elastic::GenerationRecords>(), io, [&](std::optional<std::int64_t>) {
    ++reads;
    watcher->allow_until(until);
  });
  watcher->allow_until(until);
  auto work = boost::asio::make_work_guard(io);
  io.run_for(600ms);
  // One read that waited out its grant; at most one more for a grant that came in just before
  // the point (a read shorter than the watch's minimum).
  EXPECT_GE(reads.load(), 1);
  EXPECT_LE(reads.load(), 2) << "the watch answered a grant that had run out " << reads.load() << " times in 0.5 s";
  watcher.reset();
}

// A grant made while a read is under way (the heartbeat's, the read having run into it) is
// dropped: the read's outcome is answered by a grant of its own. Kept, it started a second read as
// soon as the first ended, with no grant from the Asio thread, holding the connection that the
// thread's next store call needed (the leader check after a break waited up to a heartbeat). Here
// the handler grants nothing: after the read that saw generation 2, generation 3 must not be read
// within 400 ms (before, a read was under way for it at once).
TEST(GenerationWatcher, AGrantMadeDuringAReadDoesNotStartAnotherAfterIt) {
  auto store = std::make_shared<elastic::MemoryStore>();
  append(*store, "1");
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::atomic<int> reads = 0;
  std::atomic<std::int64_t> last = 0;
  GenerationWatcher watcher(store, std::make_shared<elastic::GenerationRecords>(), io,
                            [&](std::optional<std::int64_t> g) {
                              ++reads;
                              if (g) last = *g;
                            });
  std::thread runner([&] { io.run(); });
  watcher.allow_until(Clock::now() + 3s);
  std::this_thread::sleep_for(100ms);  // the read is under way
  EXPECT_TRUE(watcher.allow_until(Clock::now() + 3s));
  append(*store, "2");
  const auto deadline = Clock::now() + 1500ms;
  while (last.load() != 2 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(last.load(), 2);
  append(*store, "3");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(reads.load(), 1) << "a read started without a grant after the first one";
  EXPECT_EQ(last.load(), 2);
  watcher.stop();
  work.reset();
  io.stop();
  runner.join();
}

// A generation appended during a grant is read at once, not when the grant runs out.
TEST(GenerationWatcher, AGenerationAppendedDuringAGrantIsReadAtOnce) {
  auto store = std::make_shared<elastic::MemoryStore>();
  append(*store, "1");
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::atomic<std::int64_t> seen = 0;
  std::atomic<Clock::rep> seen_at = 0;
  GenerationWatcher watcher(store, std::make_shared<elastic::GenerationRecords>(), io,
                            [&](std::optional<std::int64_t> g) {
                              if (g && seen.load() == 0) {
                                seen = *g;
                                seen_at = Clock::now().time_since_epoch().count();
                              }
                            });
  std::thread runner([&] { io.run(); });
  watcher.allow_until(Clock::now() + 2s);
  std::this_thread::sleep_for(100ms);
  const auto appended = Clock::now();
  append(*store, "2");
  const auto deadline = appended + 1500ms;
  while (seen.load() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(seen.load(), 2);
  if (seen.load() == 2) {
    EXPECT_LT(Clock::time_point(Clock::duration(seen_at.load())) - appended, 1s);
  }
  watcher.stop();
  work.reset();
  io.stop();
  runner.join();
}

}  // namespace
}  // namespace hdp::agents
