// The Communicator contract (mesh/comm/communicator.h), one suite over every implementation, ranks
// as threads of this process:
//  - tcp: TcpCommunicator over TCP on loopback (connect_local);
//  - staging: StagingCommunicator over TcpCommunicator, staging CPU tensors through its host
//    buffers as it does a GPU's (stage_all);
//  - nccl: NcclCommunicator over the loopback NCCL of tests/mesh/nccl (its id exchanged through a
//    MemoryStore), which moves host memory as NCCL moves a GPU's.
// Each case runs on every backend and world size: point to point in posting order, every
// collective with uneven and zero counts, in place and non-blocking, bad arguments refused before
// anything is sent, abort() from another thread, a wait that times out, and every call after
// either. What only some backends do is tested where they do it: messages matched by tag
// (TcpCommunicator, and staging over it; NCCL matches in posting order only), sizes that differ
// across ranks caught by the descriptor exchange, peers told of an abort (communicator_test.cc);
// NCCL's watchdog (tests/mesh/nccl). The loopback NCCL reduces no bf16 (a limit of the test
// double; NCCL's own bf16 runs in nccl_gpu_test on a GPU), so bf16 reductions run on the others.
//
// Bounds: an abort unblocks a wait within 100 ms (TCP measured ~10 ms: one network-loop tick); a
// wait given 300 ms throws TimeoutError after at least 300 ms and within 1.3 s; a call on a dead
// communicator throws PeerLost within 50 ms. Every case passed inside them in three runs beside a
// build on both cores (the suite itself takes about 5 s).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <ostream>
#include <string>
#include <thread>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/comm/nccl_communicator.h"
#include "mesh/comm/staging_communicator.h"
#include "tests/mesh/communicator_values.h"
#include "tests/mesh/nccl/nccl_loopback_backend.h"
#include "tests/support/error_message.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;
using namespace test;
using hdp::test::invalid_argument_message;
using hdp::test::on_ranks_ok;

constexpr auto kTimeout = 20s;  // default of every call; the cases that time out pass their own
using Comms = std::vector<std::unique_ptr<Communicator>>;

// ---- the backends -------------------------------------------------------------------------------

struct Backend {
  const char* name;
  Comms (*connect)(int n, std::chrono::milliseconds timeout);
  bool reduces_bf16;  // false: the loopback NCCL (see the top of this file)
  bool matches_tags;  // a recv takes the first message of its tag, not the first message
};

Comms tcp(int n, std::chrono::milliseconds timeout) { return connect_local(n, timeout); }

Comms staging(int n, std::chrono::milliseconds timeout) {
  Comms out;
  for (auto& c : connect_local(n, timeout)) {
    out.push_back(std::make_unique<StagingCommunicator>(
        std::move(c), StagingOptions{.device = ops::Device::kCpu, .stage_all = true}));
  }
  return out;
}

// Every rank connects on a thread of its own: an NCCL init returns once all have joined.
Comms nccl(int n, std::chrono::milliseconds timeout) {
  auto store = std::make_shared<elastic::MemoryStore>();
  auto backend = std::make_shared<testing::LoopbackNccl>();
  std::vector<std::future<std::unique_ptr<NcclCommunicator>>> futures;
  for (int r = 0; r < n; ++r) {
    futures.push_back(std::async(std::launch::async, [=] {
      NcclConnectOptions o;
      o.rank = r;
      o.size = n;
      o.store = std::make_shared<elastic::PrefixStore>(store, "job/gen/1/main/");
      o.timeout = timeout;
      o.watchdog_tick = 20ms;
      return NcclCommunicator::connect(o, backend);
    }));
  }
  Comms out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

const Backend kTcp{"tcp", tcp, true, true};
const Backend kStaging{"staging", staging, true, true};
const Backend kNccl{"nccl", nccl, false, false};

struct Case {
  const Backend* backend;
  int n;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.backend->name << ", " << c.n << " rank(s)"; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.backend->name) + "_" + std::to_string(info.param.n) + "ranks";
}

std::vector<Case> cases(std::initializer_list<const Backend*> backends, std::initializer_list<int> sizes) {
  std::vector<Case> out;
  for (const Backend* b : backends) {
    for (int n : sizes) out.push_back({b, n});
  }
  return out;
}

class Conformance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { comms_ = backend().connect(n(), kTimeout); }
  const Backend& backend() const { return *GetParam().backend; }
  int n() const { return GetParam().n; }
  Communicator& comm(int r) { return *comms_[static_cast<std::size_t>(r)]; }

  Comms comms_;
};

// ---- what every communicator does ---------------------------------------------------------------

TEST_P(Conformance, RanksAndSize) {
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(comm(r).rank(), r);
    EXPECT_EQ(comm(r).size(), n());
    EXPECT_FALSE(comm(r).dead());
  }
}

// Every rank sends three messages to every rank (itself included) and receives them in the order
// they were posted, both sides posting to each other in the same order.
TEST_P(Conformance, PointToPointInPostingOrder) {
  constexpr int kMessages = 3;
  on_ranks_ok(n(), [&](int r) {
    Communicator& c = comm(r);
    std::vector<std::unique_ptr<Work>> works;
    std::vector<Tensor> sent, received;
    for (int d = 0; d < n(); ++d) {
      for (int k = 0; k < kMessages; ++k) {
        sent.push_back(Tensor::from_vector<std::int64_t>({r, d, k}, {3}));
        works.push_back(c.isend(sent.back(), d, 7));
      }
    }
    for (int s = 0; s < n(); ++s) {
      for (int k = 0; k < kMessages; ++k) {
        received.push_back(Tensor::zeros({3}, DType::kI64));
        works.push_back(c.irecv(received.back(), s, 7));
      }
    }
    for (auto& w : works) w->wait(kTimeout);
    std::size_t i = 0;
    for (int s = 0; s < n(); ++s) {
      for (int k = 0; k < kMessages; ++k) {
        EXPECT_EQ(received[i++].to_vector<std::int64_t>(), (std::vector<std::int64_t>{s, r, k}))
            << "rank " << r << " from " << s << " #" << k;
      }
    }
  });
}

// A ring exchange, the header's example: with one rank it is a message to itself.
TEST_P(Conformance, RingExchange) {
  on_ranks_ok(n(), [&](int r) {
    Communicator& c = comm(r);
    const Tensor mine = Tensor::from_vector<float>({static_cast<float>(r), 0.5f}, {2});
    const Tensor from_left = Tensor::zeros({2}, DType::kF32);
    auto recv = c.irecv(from_left, (r + n() - 1) % n(), 1);
    auto send = c.isend(mine, (r + 1) % n(), 1);
    recv->wait(kTimeout);
    send->wait(kTimeout);
    recv->wait(kTimeout);  // a second wait is a no-op
    EXPECT_EQ(from_left.to_vector<float>(), (std::vector<float>{static_cast<float>((r + n() - 1) % n()), 0.5f}));
  });
}

TEST_P(Conformance, AllreduceEveryDtypeAndOp) {
  std::vector<DType> dtypes = {DType::kF32, DType::kF64, DType::kI32, DType::kI64};
  // bf16: the values and their sums over these ranks are integers below 256, exact in bf16.
  if (backend().reduces_bf16) dtypes.push_back(DType::kBF16);
  // 37 elements split unevenly; 3 elements leave some ranks with nothing once n > 3.
  for (std::int64_t elements : {std::int64_t{37}, std::int64_t{3}, std::int64_t{0}}) {
    for (DType dtype : dtypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        on_ranks_ok(n(), [&](int r) {
          const Tensor t = filled(dtype, elements, [&](std::int64_t i) { return value(r, i); });
          comm(r).allreduce(t, op);
          for (std::int64_t i = 0; i < elements; ++i) {
            EXPECT_EQ(at(t, i), reduce(op, n(), i)) << ops::dtype_name(dtype) << " op " << static_cast<int>(op)
                                                    << " rank " << r << " index " << i;
          }
        });
      }
    }
  }
}

TEST_P(Conformance, ScalarConveniences) {
  on_ranks_ok(n(), [&](int r) {
    EXPECT_EQ(comm(r).allreduce_sum(std::int64_t{r + 1}), n() * (n() + 1) / 2);
    EXPECT_EQ(comm(r).allreduce_max(std::int64_t{10 - r}), 10);
    EXPECT_DOUBLE_EQ(comm(r).allreduce_sum(0.5 * r), 0.25 * n() * (n() - 1));
  });
}

TEST_P(Conformance, ReduceScatterUnevenCountsWithZeros) {
  const auto counts = uneven_counts(n());
  const std::int64_t total = total_of(counts);
  for (DType dtype : {DType::kF32, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin}) {
      on_ranks_ok(n(), [&](int r) {
        const Tensor input = filled(dtype, total, [&](std::int64_t i) { return value(r, i); });
        const Tensor before = input.clone();
        const std::int64_t mine = counts[static_cast<std::size_t>(r)], off = offset_of(counts, r);
        const Tensor output = Tensor::zeros({mine}, dtype);
        comm(r).reduce_scatter(input, output, counts, op);
        for (std::int64_t i = 0; i < mine; ++i) EXPECT_EQ(at(output, i), reduce(op, n(), off + i)) << "rank " << r;
        for (std::int64_t i = 0; i < total; ++i) ASSERT_EQ(at(input, i), at(before, i)) << "input was modified";
        // In place: the output is this rank's block of the input.
        const Tensor again = filled(dtype, total, [&](std::int64_t i) { return value(r, i); });
        comm(r).reduce_scatter(again, again.view(off, {mine}), counts, op);
        for (std::int64_t i = 0; i < mine; ++i) EXPECT_EQ(at(again, off + i), reduce(op, n(), off + i)) << "rank " << r;
      });
    }
  }
}

TEST_P(Conformance, AllgatherUnevenCountsWithZeros) {
  const auto counts = uneven_counts(n());
  const std::int64_t total = total_of(counts);
  auto expected = [&](std::int64_t i) {
    int owner = 0;
    while (offset_of(counts, owner + 1) <= i) ++owner;
    return value(owner, i);
  };
  on_ranks_ok(n(), [&](int r) {
    const std::int64_t mine = counts[static_cast<std::size_t>(r)], off = offset_of(counts, r);
    const Tensor input = filled(DType::kF64, mine, [&](std::int64_t i) { return value(r, off + i); });
    const Tensor output = Tensor::zeros({total}, DType::kF64);
    comm(r).allgather(input, output, counts);
    for (std::int64_t i = 0; i < total; ++i) EXPECT_EQ(at(output, i), expected(i)) << "rank " << r << " index " << i;
    // In place: this rank's block already sits in the output.
    const Tensor in_place = Tensor::zeros({total}, DType::kF64);
    in_place.view(off, {mine}).copy_from(input);
    comm(r).allgather(in_place.view(off, {mine}), in_place, counts);
    for (std::int64_t i = 0; i < total; ++i) EXPECT_EQ(at(in_place, i), expected(i)) << "rank " << r;
  });
}

// Equal counts too: NCCL takes its own reduce-scatter and all-gather for them (uneven counts are
// groups of reduces and broadcasts).
TEST_P(Conformance, EqualCountsReduceScatterThenAllgather) {
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(n()), 6);
  const std::int64_t total = 6 * n();
  on_ranks_ok(n(), [&](int r) {
    const Tensor input = filled(DType::kF32, total, [&](std::int64_t i) { return value(r, i); });
    const Tensor whole = Tensor::zeros({total}, DType::kF32);
    comm(r).reduce_scatter(input, whole.view(6 * r, {6}), counts, ReduceOp::kSum);
    comm(r).allgather(whole.view(6 * r, {6}), whole, counts);
    for (std::int64_t i = 0; i < total; ++i) EXPECT_EQ(at(whole, i), reduce(ReduceOp::kSum, n(), i)) << "rank " << r;
  });
}

TEST_P(Conformance, BroadcastFromEveryRoot) {
  for (int root = 0; root < n(); ++root) {
    on_ranks_ok(n(), [&](int r) {
      const Tensor t = filled(DType::kI32, 1000, [&](std::int64_t i) { return r == root ? value(root, i) : -1; });
      comm(r).broadcast(t, root);
      for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(at(t, i), value(root, i)) << "root " << root << " rank " << r;
    });
  }
}

TEST_P(Conformance, BarrierHoldsEveryoneUntilAllArrive) {
  std::atomic<int> arrived{0};
  on_ranks_ok(n(), [&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));  // arrive one after another
    arrived.fetch_add(1);
    comm(r).barrier();
    EXPECT_EQ(arrived.load(), n()) << "rank " << r << " left the barrier early";
  });
}

TEST_P(Conformance, NonBlockingFormsStartedTogetherThenWaited) {
  const auto counts = uneven_counts(n());
  const std::int64_t total = total_of(counts);
  on_ranks_ok(n(), [&](int r) {
    Communicator& c = comm(r);
    const std::int64_t mine = counts[static_cast<std::size_t>(r)], off = offset_of(counts, r);
    const Tensor a = filled(DType::kF32, 100, [&](std::int64_t i) { return value(r, i); });
    const Tensor rs_in = filled(DType::kI32, total, [&](std::int64_t i) { return value(r, i); });
    const Tensor rs_out = Tensor::zeros({mine}, DType::kI32);
    const Tensor ag_in = filled(DType::kF64, mine, [&](std::int64_t i) { return value(r, off + i); });
    const Tensor ag_out = Tensor::zeros({total}, DType::kF64);
    const Tensor b = filled(DType::kI64, 10, [&](std::int64_t i) { return r == n() - 1 ? value(r, i) : 0; });
    std::vector<std::unique_ptr<Work>> works;
    works.push_back(c.iallreduce(a, ReduceOp::kMax));
    works.push_back(c.ireduce_scatter(rs_in, rs_out, counts, ReduceOp::kSum));
    works.push_back(c.iallgather(ag_in, ag_out, counts));
    works.push_back(c.ibroadcast(b, n() - 1));
    works.push_back(c.ibarrier());
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait(kTimeout);  // any order
    for (std::int64_t i = 0; i < 100; ++i) EXPECT_EQ(at(a, i), reduce(ReduceOp::kMax, n(), i));
    for (std::int64_t i = 0; i < mine; ++i) EXPECT_EQ(at(rs_out, i), reduce(ReduceOp::kSum, n(), off + i));
    for (int owner = 0; owner < n(); ++owner) {
      for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(owner)]; ++i) {
        const std::int64_t g = offset_of(counts, owner) + i;
        EXPECT_EQ(at(ag_out, g), value(owner, g));
      }
    }
    for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(at(b, i), value(n() - 1, i));
  });
}

// Refused on the caller's thread, naming the value, with nothing sent: the communicator goes on.
TEST_P(Conformance, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  Communicator& c = comm(0);
  const Tensor f4 = Tensor::zeros({4}, DType::kF32);
  const std::vector<std::int64_t> fours(static_cast<std::size_t>(n()), 4);
  const std::string beyond = std::to_string(n());
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, n(), 0); }), HasSubstr("rank " + beyond));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(f4, -1, 0); }), HasSubstr("rank -1"));
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, 0, kMaxTag); }), HasSubstr(std::to_string(kMaxTag)));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(Tensor(), 0, 0); }), HasSubstr("undefined"));
  EXPECT_THAT(invalid_argument_message([&] { c.ibroadcast(f4, n() + 3); }), HasSubstr("root " + std::to_string(n() + 3)));
  std::vector<std::int64_t> one_more = fours;
  one_more.push_back(1);
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, f4, one_more, ReduceOp::kSum); }),
              HasSubstr(std::to_string(n() + 1) + " entries"));
  std::vector<std::int64_t> negative = fours;
  negative.back() = -2;
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(f4, f4, negative); }),
              HasSubstr("counts[" + std::to_string(n() - 1) + "] is -2"));
  const Tensor whole = Tensor::zeros({4 * n()}, DType::kF32);
  EXPECT_THAT(invalid_argument_message([&] {
                c.ireduce_scatter(Tensor::zeros({4 * n() + 1}, DType::kF32), f4, fours, ReduceOp::kSum);
              }),
              HasSubstr("input has " + std::to_string(4 * n() + 1) + " elements"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(whole, Tensor::zeros({3}, DType::kF32), fours, ReduceOp::kSum); }),
              HasSubstr("output has 3 elements"));
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(f4, Tensor::zeros({4 * n()}, DType::kF64), fours); }),
              HasSubstr("f64"));
  if (n() > 1) {  // this rank's block is [0, 4): an output that starts inside it and is not it
    EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(whole, whole.view(1, {4}), fours, ReduceOp::kSum); }),
                HasSubstr("overlaps"));
  }
  EXPECT_FALSE(c.dead());
  on_ranks_ok(n(), [&](int r) { EXPECT_EQ(comm(r).allreduce_sum(std::int64_t{1}), n()); });
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::ValuesIn([] {
                           std::vector<Case> all = cases({&kTcp}, {1, 2, 3, 4, 5, 8});
                           for (const Case& c : cases({&kStaging, &kNccl}, {1, 2, 3, 4})) all.push_back(c);
                           return all;
                         }()),
                         case_name);

// ---- abort and deadlines: two ranks, rank 0's calls ---------------------------------------------

class ConformanceFailure : public Conformance {};

template <typename E, typename F>
Clock::duration time_throw(F&& f) {
  const auto start = Clock::now();
  EXPECT_THROW(f(), E);
  return Clock::now() - start;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// After it died, every call of a communicator throws PeerLost at once.
void expect_dead(Communicator& c) {
  EXPECT_TRUE(c.dead());
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  EXPECT_LT(time_throw<PeerLost>([&] { c.send(t, 1, 3); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { c.allreduce(t, ReduceOp::kSum); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { c.barrier(); }), 50ms);
}

TEST_P(ConformanceFailure, AbortFromAnotherThreadUnblocksARecvWithin100ms) {
  std::promise<Clock::time_point> aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);  // rank 0 is inside its recv by then
    const auto now = Clock::now();
    comm(0).abort("test says stop");
    aborted_at.set_value(now);
  });
  std::string message;
  try {
    comm(0).recv(Tensor::zeros({4}, DType::kF32), 1, 5);  // rank 1 never sends
  } catch (const PeerLost& e) {
    message = e.what();
  }
  const auto returned = Clock::now();
  aborter.join();
  const auto latency = returned - aborted_at.get_future().get();
  EXPECT_THAT(message, HasSubstr("test says stop"));
  EXPECT_LT(latency, 100ms) << ms(latency) << " ms";
  expect_dead(comm(0));
}

TEST_P(ConformanceFailure, AbortUnblocksACollectiveWithin100ms) {
  std::promise<Clock::time_point> aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    const auto now = Clock::now();
    comm(0).abort("stop the allreduce");
    aborted_at.set_value(now);
  });
  // Rank 1 never joins.
  EXPECT_THROW(comm(0).allreduce(Tensor::zeros({1 << 16}, DType::kF32), ReduceOp::kSum), PeerLost);
  const auto returned = Clock::now();
  aborter.join();
  const auto latency = returned - aborted_at.get_future().get();
  EXPECT_LT(latency, 100ms) << ms(latency) << " ms";
  expect_dead(comm(0));
}

TEST_P(ConformanceFailure, ARecvThatTimesOutThrowsTimeoutErrorAndKillsTheCommunicator) {
  const auto took = time_throw<TimeoutError>([&] { comm(0).recv(Tensor::zeros({4}, DType::kF32), 1, 3, 300ms); });
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1300ms) << ms(took) << " ms";
  expect_dead(comm(0));
}

TEST_P(ConformanceFailure, ACollectiveWaitThatTimesOutKillsTheCommunicator) {
  auto work = comm(0).iallreduce(Tensor::zeros({4}, DType::kF64), ReduceOp::kSum);  // rank 1 never joins
  const auto took = time_throw<TimeoutError>([&] { work->wait(300ms); });
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1300ms) << ms(took) << " ms";
  expect_dead(comm(0));
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceFailure, ::testing::ValuesIn(cases({&kTcp, &kStaging, &kNccl}, {2})),
                         case_name);

// ---- matched by tag: the backends that can --------------------------------------------------------

class ConformanceTags : public Conformance {};

// Every rank sends three messages on each of two tags to every rank (itself included), the tags
// interleaved; receivers post all of tag B before tag A. Per (peer, tag) order must hold.
TEST_P(ConformanceTags, PointToPointKeepsOrderPerTag) {
  ASSERT_TRUE(backend().matches_tags);
  constexpr int kPerTag = 3;
  const Tag tags[2] = {7, kMaxTag - 1};
  on_ranks_ok(n(), [&](int r) {
    Communicator& c = comm(r);
    std::vector<std::unique_ptr<Work>> works;
    std::vector<Tensor> sent, received;
    for (int d = 0; d < n(); ++d) {
      for (int k = 0; k < kPerTag; ++k) {
        for (int t = 0; t < 2; ++t) {
          sent.push_back(Tensor::from_vector<std::int64_t>({r, d, t, k}, {4}));
          works.push_back(c.isend(sent.back(), d, tags[t]));
        }
      }
    }
    for (int s = 0; s < n(); ++s) {
      for (int t = 1; t >= 0; --t) {
        for (int k = 0; k < kPerTag; ++k) {
          received.push_back(Tensor::zeros({4}, DType::kI64));
          works.push_back(c.irecv(received.back(), s, tags[t]));
        }
      }
    }
    for (auto& w : works) w->wait(kTimeout);
    std::size_t i = 0;
    for (int s = 0; s < n(); ++s) {
      for (int t = 1; t >= 0; --t) {
        for (int k = 0; k < kPerTag; ++k) {
          EXPECT_EQ(received[i++].to_vector<std::int64_t>(), (std::vector<std::int64_t>{s, r, t, k}))
              << "rank " << r << " from " << s << " tag " << tags[t] << " #" << k;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTags, ::testing::ValuesIn(cases({&kTcp, &kStaging}, {1, 2, 3, 5})),
                         case_name);

}  // namespace
}  // namespace hdp::mesh
