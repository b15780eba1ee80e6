// A bootstrap stuck in Gloo's pair connect gives up as soon as its generation is superseded.
//
// Rank 1 is a forked process. Gloo's bootstrap on each rank publishes its host (rank_<r>), waits
// for the others', publishes its pairs' addresses (<r>), then reads the peers' and connects. Rank
// 0's store holds back its own addresses until rank 1 has published its own and is waiting for
// rank 0's (a store wait), and stops rank 1 (SIGSTOP) right there: rank 0 then reads a valid
// address, its TCP connect is accepted by the stopped process's kernel, and Gloo's handshake
// waits for a peer that never answers. That wait is
// Gloo's own (a fifth of the timeout per pair, 4 s here), not a store wait. The test supersedes
// rank 0's generation 500 ms into its bootstrap: it must throw PeerLost within 500 ms + one check
// interval (100 ms) + scheduling, bound 1.5 s, instead of sitting out Gloo's connect.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "elastic/forwarding_store.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "mesh/comm/gloo_communicator.h"
#include "tests/support/redis_server.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Rank 0's store: a PrefixStore whose write of rank 0's addresses first waits for rank 1's and
// stops rank 1.
class StopPeerBeforeAddresses final : public elastic::ForwardingStore {
 public:
  StopPeerBeforeAddresses(std::shared_ptr<elastic::Store> inner, pid_t peer)
      : ForwardingStore(inner), inner_(std::move(inner)), peer_(peer) {}
  void set(std::string_view key, std::string_view value) override {
    before_write(key);
    ForwardingStore::set(key, value);
  }
  void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) override {
    before_write(key);
    ForwardingStore::set_with_ttl(key, value, ttl);
  }

  bool stopped() const { return stopped_; }

 private:
  void before_write(std::string_view key) {
    if (key != "0") return;
    inner_->wait({"1"}, std::chrono::seconds(10));  // rank 1 published; it now waits for "0"
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ...inside its store wait
    ::kill(peer_, SIGSTOP);
    stopped_ = true;
  }
  std::shared_ptr<elastic::Store> inner_;
  pid_t peer_;
  std::atomic<bool> stopped_{false};
};

// One attempt: fork rank 1, bootstrap rank 0 with its generation superseded 500 ms in. Returns
// how long rank 0's connect took and how it ended.
struct Attempt {
  bool peer_lost = false;
  bool stopped = false;
  std::string error;  // another recoverable error (without the fix: Gloo's connect timeout)
  Clock::duration took{};
};

Attempt attempt(const std::string& url, const std::string& prefix) {
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    try {
      auto store = std::make_shared<elastic::PrefixStore>(
          std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url)), prefix);
      GlooCommunicator::connect({.rank = 1, .size = 2, .store = store, .timeout = 20s});
    } catch (...) {
    }
    ::_exit(0);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  auto store = std::make_shared<StopPeerBeforeAddresses>(
      std::make_shared<elastic::PrefixStore>(std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url)),
                                             prefix),
      child);
  Attempt result;
  const auto start = Clock::now();
  std::atomic<bool> superseded{false};
  std::thread leader([&] {
    std::this_thread::sleep_for(500ms);
    superseded = true;
  });
  try {
    GlooCommunicator::connect(
        {.rank = 0, .size = 2, .store = store, .superseded = [&] { return superseded.load(); }, .timeout = 20s});
  } catch (const PeerLost&) {
    result.peer_lost = true;
  } catch (const RecoverableError& e) {
    result.error = e.what();
  }
  result.took = Clock::now() - start;
  leader.join();
  result.stopped = store->stopped();
  return result;
}

// Which rank of a pair waits for the other's TCP connect depends on how their addresses compare
// (the ports the kernel gave them). When rank 0 connects actively to the stopped process, the
// kernel completes the connect and rank 0's bootstrap ends without waiting: that attempt shows
// nothing, and the test tries again (up to 12 times; each side is about as likely).
TEST(Bootstrap, AConnectStuckOnAStoppedPeerGivesUpWhenTheGenerationIsSuperseded) {
  test::RedisServer redis;
  for (int i = 0; i < 12; ++i) {
    const Attempt a = attempt(redis.url(), "boot-stuck-" + std::to_string(i) + "/");
    ASSERT_TRUE(a.stopped) << "rank 1 was not stopped before rank 0 connected";
    std::printf("attempt %d: %s after %lld ms\n", i, a.peer_lost ? "PeerLost" : a.error.empty() ? "connected" : a.error.c_str(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(a.took).count()));
    if (!a.peer_lost && a.error.empty() && a.took < 500ms) continue;  // rank 0 connected actively
    EXPECT_TRUE(a.peer_lost) << "attempt " << i << ": " << a.error;
    EXPECT_GE(a.took, 500ms);
    EXPECT_LT(a.took, 1500ms) << std::chrono::duration_cast<std::chrono::milliseconds>(a.took).count() << " ms";
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  // Under the sanitizers' timing rank 0 has been seen to connect actively in all 12 attempts; the
  // supersession check itself still runs here (elastic_context_test's superseded bootstrap).
  GTEST_SKIP() << "in 12 attempts rank 0 never waited for the stopped peer's connect (sanitizer timing)";
#else
  FAIL() << "in 12 attempts rank 0 never waited for the stopped peer's connect";
#endif
}

}  // namespace
}  // namespace hdp::mesh
