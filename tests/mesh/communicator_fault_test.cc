// TcpCommunicator with ranks as real processes (fork), bootstrapped through a private
// redis-server, where one rank dies (SIGKILL) or hangs (SIGSTOP) in the middle of a call:
//   (a) while the others wait in a recv from it,
//   (a') in the middle of ring attention steps (mesh/step/ring_attention.h),
//   (b) in the middle of a 64 MiB reduce-scatter (the ranks run them back to back, and the victim
//       dies 20 ms after its first one completed, so the kill lands inside a later one),
//   (c) during a checkpoint barrier through trainer::CommunicatorGroup,
//   (d) stopped while the others are in an allreduce.
// Every survivor must raise PeerLost (a-c) within 2 s of the death, or TimeoutError/PeerLost (d)
// within the call's timeout + 1 s, and then build the next generation's communicator among the
// survivors (a fresh prefix) and allreduce over it.
//
// Times are taken inside the processes on CLOCK_MONOTONIC (steady_clock), which all processes of
// the machine share: the victim writes the moment it kills itself, each survivor the moment its
// call threw. Children report over one pipe (records of fixed size, below PIPE_BUF: atomic).
// The parent SIGKILLs every child at the end of each case (and after a hard bound), so no child
// survives a failed test. No thread runs in this process when it forks (the redis-server is a
// child process too).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "common/error.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/ring_attention.h"
#include "tests/support/redis_server.h"
#include "trainer/checkpoint_group.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;

constexpr int kRanks = 3;
constexpr int kVictim = 1;
constexpr auto kConnectTimeout = 20s;       // bootstrap, and the default of the calls that wait on a dead peer
constexpr auto kDeathBound = 2s;            // a killed peer is noticed within this
constexpr auto kStopTimeout = 1500ms;       // the call's timeout when a peer is stopped
constexpr auto kCaseBound = 60s;            // hard bound of one case

enum Outcome : std::int32_t { kVictimDied = 1, kPeerLost, kTimeout, kOtherError, kNoError };

struct Record {
  std::int32_t rank = -1;
  std::int32_t outcome = 0;
  std::int64_t at_ns = 0;       // steady_clock: when the victim killed/stopped itself, or the call threw
  std::int64_t elapsed_ns = 0;  // survivors: from the call's start to its throw
  std::int32_t iterations = 0;  // calls that completed before the failure
  std::int32_t regrouped = 0;   // 1: the next generation's allreduce gave the right sum
  char message[400] = {};
};
static_assert(sizeof(Record) < PIPE_BUF);

std::int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

void write_record(int fd, Record record, const std::string& message) {
  std::strncpy(record.message, message.c_str(), sizeof(record.message) - 1);
  [[maybe_unused]] auto n = ::write(fd, &record, sizeof record);
}

std::shared_ptr<elastic::Store> redis_store(const std::string& url) {
  return std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url));
}

// What one rank does: `survivor` runs the call that fails (it returns the outcome, throwing the
// failure); `victim` sets up its death. Both get the rank's communicator.
struct Scenario {
  std::string name;
  std::function<void(Communicator&, Record&)> survivor;  // throws when the call fails
  std::function<void(Communicator&, int report_fd)> victim;
};

// Kills itself after `delay`, from a thread of its own, after writing the moment.
void die_after(Clock::duration delay, int report_fd, int signo) {
  std::thread([=] {
    std::this_thread::sleep_for(delay);
    Record r;
    r.rank = kVictim;
    r.outcome = kVictimDied;
    r.at_ns = now_ns();
    write_record(report_fd, r, signo == SIGKILL ? "SIGKILL" : "SIGSTOP");
    ::kill(::getpid(), signo);
  }).detach();
}

// The child: connect generation 1, play its part, then (survivors) connect generation 2 among the
// survivors and allreduce. Never returns.
[[noreturn]] void run_child(const std::string& url, const std::string& job, int rank, const Scenario& scenario,
                            int report_fd) {
  Record record;
  record.rank = rank;
  std::string message;
  try {
    auto store = redis_store(url);
    auto comm = connect_rank(store, job + "/gen1/", rank, kRanks, kConnectTimeout);
    if (rank == kVictim) {
      scenario.victim(*comm, report_fd);
      std::this_thread::sleep_for(kCaseBound);  // dies or stops before this ends
      ::_exit(9);
    }
    const auto start = Clock::now();
    try {
      scenario.survivor(*comm, record);
      record.outcome = kNoError;
      message = "the call did not fail";
    } catch (const PeerLost& e) {
      record.outcome = kPeerLost;
      message = e.what();
    } catch (const TimeoutError& e) {
      record.outcome = kTimeout;
      message = e.what();
    } catch (const std::exception& e) {
      record.outcome = kOtherError;
      message = e.what();
    }
    record.at_ns = now_ns();
    record.elapsed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    comm.reset();
    // The next generation among the survivors, in the same process.
    const int new_rank = rank - (rank > kVictim ? 1 : 0);
    auto next = connect_rank(store, job + "/gen2/", new_rank, kRanks - 1, kConnectTimeout);
    const std::int64_t sum = next->allreduce_sum(std::int64_t{new_rank + 1});
    record.regrouped = sum == (kRanks - 1) * kRanks / 2 ? 1 : 0;
  } catch (const std::exception& e) {
    message += std::string(" | after: ") + e.what();
  }
  write_record(report_fd, record, message);
  ::_exit(0);
}

struct Reports {
  Record victim;
  std::map<int, Record> survivors;
};

// Forks kRanks children playing `scenario`, collects their records until every survivor reported
// (or kCaseBound passed), then SIGKILLs and reaps every child.
Reports run_case(const std::string& url, const std::string& job, const Scenario& scenario) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      run_child(url, job, r, scenario, fds[1]);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  Reports reports;
  const auto deadline = Clock::now() + kCaseBound;
  while (static_cast<int>(reports.survivors.size()) < kRanks - 1 && Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 1))) <= 0) continue;
    Record r;
    if (::read(fds[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) break;  // every child gone
    if (r.outcome == kVictimDied) {
      reports.victim = r;
    } else {
      reports.survivors[r.rank] = r;
    }
  }
  for (pid_t pid : pids) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ::close(fds[0]);
  return reports;
}

class CommunicatorFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = new test::RedisServer(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }

  Reports run(const Scenario& scenario) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return run_case(redis_->url(), std::string("job-") + info->name(), scenario);
  }

  // Every survivor threw one of `allowed` within `bound` of `since_ns` (0: of its call's start)
  // and then regrouped.
  static void expect_survivors(const Reports& reports, std::initializer_list<Outcome> allowed,
                               std::chrono::nanoseconds bound, bool since_victim) {
    std::printf("victim: outcome %d: %s\n", reports.victim.outcome, reports.victim.message);
    for (const auto& [rank, r] : reports.survivors) {
      std::printf("rank %d: outcome %d, %.1f ms after its call began, %.1f ms after the victim's end, %d calls completed "
                  "before: %s\n", rank, r.outcome, r.elapsed_ns / 1e6, (r.at_ns - reports.victim.at_ns) / 1e6,
                  r.iterations, r.message);
    }
    ASSERT_EQ(reports.survivors.size(), static_cast<std::size_t>(kRanks - 1)) << "a survivor never reported";
    if (since_victim) {
      ASSERT_EQ(reports.victim.outcome, kVictimDied) << "the victim never reported its death";
    }
    for (const auto& [rank, r] : reports.survivors) {
      EXPECT_THAT(allowed, ::testing::Contains(static_cast<Outcome>(r.outcome))) << "rank " << rank << ": " << r.message;
      const std::int64_t took = since_victim ? r.at_ns - reports.victim.at_ns : r.elapsed_ns;
      EXPECT_LT(took, bound.count()) << "rank " << rank << " took " << took / 1e6 << " ms: " << r.message;
      EXPECT_EQ(r.regrouped, 1) << "rank " << rank << " could not allreduce in the next generation: " << r.message;
    }
  }

  // Every rank runs `loop` (collective calls back to back; `done(i)` after the i-th); the survivors
  // count them in their record, and the victim kills itself 20 ms after its first one completed,
  // so that the kill lands in a later call, whatever a call costs (the sanitizer build's calls
  // take several times as long).
  using Loop = std::function<void(Communicator&, const std::function<void(int)>& done)>;
  static Scenario killed_while_looping(Loop loop) {
    Scenario s;
    s.survivor = [loop](Communicator& comm, Record& record) {
      loop(comm, [&record](int i) { record.iterations = i; });
    };
    s.victim = [loop](Communicator& comm, int fd) {
      loop(comm, [fd](int i) {
        if (i == 1) die_after(20ms, fd, SIGKILL);
      });
    };
    return s;
  }
  static void expect_killed_mid_loop(const Reports& reports) {
    expect_survivors(reports, {kPeerLost}, kDeathBound, true);
    for (const auto& [rank, r] : reports.survivors) {
      EXPECT_GE(r.iterations, 1) << "rank " << rank << " never completed one";
    }
  }

  static test::RedisServer* redis_;
};

test::RedisServer* CommunicatorFaultTest::redis_ = nullptr;

TEST_F(CommunicatorFaultTest, APeerKilledWhileOthersWaitInARecvFromIt) {
  Scenario s;
  s.survivor = [](Communicator& comm, Record&) { comm.recv(Tensor::zeros({256}, DType::kF32), kVictim, 1); };
  s.victim = [](Communicator&, int fd) { die_after(500ms, fd, SIGKILL); };
  expect_survivors(run(s), {kPeerLost}, kDeathBound, true);
}

TEST_F(CommunicatorFaultTest, APeerKilledInTheMiddleOfA64MiBReduceScatter) {
  constexpr std::int64_t kElements = 16 << 20;  // 64 MiB of f32
  const std::vector<std::int64_t> counts{kElements / 3, kElements / 3, kElements - 2 * (kElements / 3)};
  auto loop = [counts](Communicator& comm, const std::function<void(int)>& done) {
    const Tensor input = Tensor::zeros({kElements}, DType::kF32);
    const Tensor output = Tensor::zeros({counts[static_cast<std::size_t>(comm.rank())]}, DType::kF32);
    for (int i = 0; i < 1000; ++i) {
      comm.reduce_scatter(input, output, counts, ReduceOp::kSum);
      done(i + 1);
    }
  };
  expect_killed_mid_loop(run(killed_while_looping(loop)));
}

TEST_F(CommunicatorFaultTest, APeerKilledInTheMiddleOfARingAttentionStep) {
  // One sequence sharded over the three ranks, forward and backward through RingAttention again
  // and again (each layer's K/V and dK/dV blocks travel the ring); the victim dies among them.
  auto loop = [](Communicator& comm, const std::function<void(int)>& done) {
    RingLayout layout{{0, 1, 2}, comm.rank(), {3 * 512}};
    const std::int64_t rows = layout.shard_rows(comm.rank());
    const Tensor q = Tensor::zeros({rows, 4, 16}, DType::kF32), k = Tensor::zeros({rows, 2, 16}, DType::kF32);
    const Tensor v = Tensor::zeros({rows, 2, 16}, DType::kF32);
    for (int i = 0; i < 100000; ++i) {
      RingAttention attention(comm, layout, {0}, static_cast<std::uint32_t>(i % 1000), 20s);
      const ops::AttentionOutput o = attention.forward(i % 8, q, k, v);
      const Tensor dq = Tensor::zeros(q.shape(), DType::kF32), dk = Tensor::zeros(k.shape(), DType::kF32),
                   dv = Tensor::zeros(v.shape(), DType::kF32);
      attention.backward(i % 8, q, k, v, o, o.out, dq, dk, dv);
      attention.finish_backward(i % 8);
      done(i + 1);
    }
  };
  expect_killed_mid_loop(run(killed_while_looping(loop)));
}

TEST_F(CommunicatorFaultTest, APeerKilledDuringACheckpointBarrier) {
  Scenario s;
  s.survivor = [](Communicator& comm, Record&) {
    trainer::CommunicatorGroup group(comm);
    if (!group.all_true(true)) throw std::runtime_error("all_true(true) answered false");  // everyone is there
    group.barrier();  // the victim never comes to this one
  };
  s.victim = [](Communicator& comm, int fd) {
    trainer::CommunicatorGroup group(comm);
    group.all_true(true);
    die_after(500ms, fd, SIGKILL);
  };
  expect_survivors(run(s), {kPeerLost}, kDeathBound, true);
}

// Whoever times out first closes all its connections; a survivor whose connection closes
// before its own deadline sees PeerLost, so the survivors see TimeoutError or PeerLost, at least one
// TimeoutError, all within the timeout + 1 s of their call's start.
TEST_F(CommunicatorFaultTest, AStoppedPeerTimesTheCallOut) {
  Scenario s;
  s.survivor = [](Communicator& comm, Record&) {
    comm.allreduce(Tensor::zeros({1024}, DType::kF64), ReduceOp::kSum, kStopTimeout);
  };
  s.victim = [](Communicator&, int fd) { die_after(0ms, fd, SIGSTOP); };
  const Reports reports = run(s);
  expect_survivors(reports, {kTimeout, kPeerLost}, kStopTimeout + 1s, false);
  int timeouts = 0;
  for (const auto& [rank, r] : reports.survivors) timeouts += r.outcome == kTimeout ? 1 : 0;
  EXPECT_GE(timeouts, 1);
}

}  // namespace
}  // namespace hdp::mesh
