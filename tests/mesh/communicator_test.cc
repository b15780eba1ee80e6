// TcpCommunicator with ranks as threads of this process (connect_local, real TCP on loopback):
// point to point with tags, every collective with every dtype and op, uneven and zero counts,
// non-blocking forms, argument errors, collectives that differ across ranks, abort, timeouts,
// and destruction with operations in flight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <thread>

#include "common/error.h"
#include "kernels/cpu/bf16.h"
#include "mesh/comm/communicator_factory.h"
#include "tests/support/error_message.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;

constexpr auto kTimeout = 20s;  // default of every call; the tests that time out pass their own

using Comms = std::vector<std::unique_ptr<Communicator>>;

using test::on_ranks;     // tests/support/ranks.h
using test::on_ranks_ok;
using test::invalid_argument_message;  // tests/support/error_message.h

// What rank r contributes at index i: small integers, so that f32 sums are exact.
double value(int r, std::int64_t i) { return static_cast<double>((r + 1) * ((i % 7) + 1) - 3 * (i % 2)); }

Tensor filled(DType dtype, std::int64_t n, const std::function<double(std::int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = static_cast<float>(f(i)); break;
      case DType::kF64: t.data<double>()[i] = f(i); break;
      case DType::kI32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(f(i)); break;
      case DType::kI64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(f(i)); break;
      case DType::kBF16: t.data<std::uint16_t>()[i] = kernels::cpu::f32_to_bf16(static_cast<float>(f(i))); break;
    }
  }
  return t;
}

double at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF64: return t.data<double>()[i];
    case DType::kI32: return t.data<std::int32_t>()[i];
    case DType::kI64: return static_cast<double>(t.data<std::int64_t>()[i]);
    case DType::kBF16: return kernels::cpu::bf16_to_f32(t.data<std::uint16_t>()[i]);
  }
  return NAN;
}

double reduce(ReduceOp op, int n, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i);
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Uneven counts with zeros: 0, 5, 1, 0, 3, ... (rank 0 always gets nothing).
std::vector<std::int64_t> uneven_counts(int n) {
  std::vector<std::int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back((r * 5) % 7 * (r % 3 == 0 ? 0 : 1) + (r == n - 1 ? 2 : 0));
  return counts;
}

std::int64_t offset_of(const std::vector<std::int64_t>& counts, int r) {
  std::int64_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[static_cast<std::size_t>(i)];
  return off;
}

std::int64_t total_of(const std::vector<std::int64_t>& counts) { return offset_of(counts, static_cast<int>(counts.size())); }

class CommunicatorTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { comms_ = connect_local(n(), kTimeout); }
  int n() const { return GetParam(); }
  Communicator& comm(int r) { return *comms_[static_cast<std::size_t>(r)]; }

  Comms comms_;
};

TEST_P(CommunicatorTest, RanksAndSize) {
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(comm(r).rank(), r);
    EXPECT_EQ(comm(r).size(), n());
    EXPECT_FALSE(comm(r).dead());
  }
}

// Every rank sends three messages on each of two tags to every rank (itself included), the tags
// interleaved; receivers post all of tag B before tag A. Per (peer, tag) order must hold.
TEST_P(CommunicatorTest, PointToPointKeepsOrderPerTag) {
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

// A ring exchange, the header's example: with one rank it is a message to itself.
TEST_P(CommunicatorTest, RingExchange) {
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

TEST_P(CommunicatorTest, AllreduceEveryDtypeAndOp) {
  // 37 elements split unevenly; 3 elements leave some ranks with nothing once n > 3.
  for (std::int64_t elements : {std::int64_t{37}, std::int64_t{3}, std::int64_t{0}}) {
    // bf16: the values and their sums over these ranks are integers below 256, exact in bf16.
    for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBF16}) {
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

TEST_P(CommunicatorTest, ScalarConveniences) {
  on_ranks_ok(n(), [&](int r) {
    EXPECT_EQ(comm(r).allreduce_sum(std::int64_t{r + 1}), n() * (n() + 1) / 2);
    EXPECT_EQ(comm(r).allreduce_max(std::int64_t{10 - r}), 10);
    EXPECT_DOUBLE_EQ(comm(r).allreduce_sum(0.5 * r), 0.25 * n() * (n() - 1));
  });
}

TEST_P(CommunicatorTest, ReduceScatterUnevenCountsWithZeros) {
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

TEST_P(CommunicatorTest, AllgatherUnevenCountsWithZeros) {
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

TEST_P(CommunicatorTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < n(); ++root) {
    on_ranks_ok(n(), [&](int r) {
      const Tensor t = filled(DType::kI32, 1000, [&](std::int64_t i) { return r == root ? value(root, i) : -1; });
      comm(r).broadcast(t, root);
      for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(at(t, i), value(root, i)) << "root " << root << " rank " << r;
    });
  }
}

TEST_P(CommunicatorTest, BarrierHoldsEveryoneUntilAllArrive) {
  std::atomic<int> arrived{0};
  on_ranks_ok(n(), [&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));  // arrive one after another
    arrived.fetch_add(1);
    comm(r).barrier();
    EXPECT_EQ(arrived.load(), n()) << "rank " << r << " left the barrier early";
  });
}

TEST_P(CommunicatorTest, NonBlockingFormsStartedTogetherThenWaited) {
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

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorTest, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// ---- errors -------------------------------------------------------------------------------------

TEST(CommunicatorErrors, BadArgumentsAreRejectedBeforeAnythingIsSent) {
  Comms comms = connect_local(2, kTimeout);
  Communicator& c = *comms[0];
  const Tensor f4 = Tensor::zeros({4}, DType::kF32);
  const std::vector<std::int64_t> counts{2, 2};
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, 2, 0); }), HasSubstr("rank 2"));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(f4, -1, 0); }), HasSubstr("rank -1"));
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, 1, kMaxTag); }), HasSubstr(std::to_string(kMaxTag)));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(Tensor(), 1, 0); }), HasSubstr("undefined"));
  EXPECT_THAT(invalid_argument_message([&] { c.ibroadcast(f4, 5); }), HasSubstr("root 5"));
  const std::vector<std::int64_t> three{1, 1, 2};
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, Tensor::zeros({1}, DType::kF32), three, ReduceOp::kSum); }),
              HasSubstr("3 entries"));
  const std::vector<std::int64_t> negative{6, -2};
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(f4, Tensor::zeros({4}, DType::kF32), negative); }),
              HasSubstr("counts[1] is -2"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(Tensor::zeros({5}, DType::kF32), Tensor::zeros({2}, DType::kF32), counts, ReduceOp::kSum); }),
              HasSubstr("input has 5 elements"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, Tensor::zeros({3}, DType::kF32), counts, ReduceOp::kSum); }),
              HasSubstr("output has 3 elements"));
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(Tensor::zeros({2}, DType::kF32), Tensor::zeros({4}, DType::kF64), counts); }),
              HasSubstr("f64"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, f4.view(1, {2}), counts, ReduceOp::kSum); }),
              HasSubstr("overlaps"));
  // Nothing was sent: the communicator still works.
  EXPECT_FALSE(c.dead());
  on_ranks_ok(2, [&](int r) { EXPECT_EQ(comms[static_cast<std::size_t>(r)]->allreduce_sum(std::int64_t{1}), 2); });
}

TEST(CommunicatorErrors, CudaTensorsAreRejected) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA device in this build or on this machine";
  Comms comms = connect_local(1, kTimeout);
  const Tensor gpu = Tensor::zeros({4}, DType::kF32, ops::Device::kCuda);
  EXPECT_THAT(invalid_argument_message([&] { comms[0]->isend(gpu, 0, 0); }), HasSubstr("CPU tensors only"));
  EXPECT_THAT(invalid_argument_message([&] { comms[0]->iallreduce(gpu, ReduceOp::kSum); }), HasSubstr("CPU tensors only"));
}

// Sizes that differ across ranks: the descriptor exchange turns them into InvalidArgument before a
// message of the wrong size is sent, and the
// ranks that did not see the difference fail fast with PeerLost (the communicator closed).
void expect_mismatch_detected(int n, const std::function<void(int, Communicator&)>& call, const std::string& needle) {
  Comms comms = connect_local(n, kTimeout);
  const auto start = Clock::now();
  const auto errors = on_ranks(n, [&](int r) { call(r, *comms[static_cast<std::size_t>(r)]); });
  const auto took = Clock::now() - start;
  int invalid = 0;
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " did not notice";
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const InvalidArgument& e) {
      ++invalid;
      EXPECT_THAT(e.what(), HasSubstr(needle)) << "rank " << r;
    } catch (const PeerLost&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
    EXPECT_TRUE(comms[static_cast<std::size_t>(r)]->dead());
  }
  EXPECT_GE(invalid, 1);
  // Far below the 20 s timeout: nobody sat it out.
  EXPECT_LT(took, 5s);
}

TEST(CommunicatorErrors, AllreduceSizesThatDifferAcrossRanks) {
  expect_mismatch_detected(
      4,
      [](int r, Communicator& c) { c.allreduce(Tensor::zeros({r == 2 ? 16 : 8}, DType::kF32), ReduceOp::kSum); },
      "of 16 f32");
}

TEST(CommunicatorErrors, ReduceScatterCountsThatDifferAcrossRanks) {
  expect_mismatch_detected(
      3,
      [](int r, Communicator& c) {
        const std::vector<std::int64_t> counts = r == 1 ? std::vector<std::int64_t>{4, 4, 4}
                                                         : std::vector<std::int64_t>{4, 2, 6};
        c.reduce_scatter(Tensor::zeros({12}, DType::kF32), Tensor::zeros({counts[static_cast<std::size_t>(r)]}, DType::kF32),
                         counts, ReduceOp::kSum);
      },
      "counts hash");
}

TEST(CommunicatorErrors, ARankThatSkipsACollective) {
  expect_mismatch_detected(
      2,
      [](int r, Communicator& c) {
        if (r == 0) c.barrier();
        c.allreduce(Tensor::zeros({4}, DType::kI64), ReduceOp::kMax);
      },
      "started barrier");
}

// ---- failure ------------------------------------------------------------------------------------

template <typename E, typename F>
Clock::duration time_throw(F&& f) {
  const auto start = Clock::now();
  EXPECT_THROW(f(), E);
  return Clock::now() - start;
}

TEST(CommunicatorFailure, AbortFromAnotherThreadUnblocksARecvWithin100ms) {
  Comms comms = connect_local(3, kTimeout);
  std::promise<Clock::time_point> aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);  // rank 0 is inside its recv by then
    const auto now = Clock::now();
    comms[0]->abort("test says stop");
    aborted_at.set_value(now);
  });
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  std::string message;
  try {
    comms[0]->recv(t, 1, 5);
  } catch (const PeerLost& e) {
    message = e.what();
  }
  const auto returned = Clock::now();
  aborter.join();
  const auto latency = returned - aborted_at.get_future().get();
  EXPECT_THAT(message, HasSubstr("test says stop"));
  // The abort closes the connections (all at once, one network-loop tick of 10 ms) then wakes the wait.
  EXPECT_LT(latency, 100ms) << std::chrono::duration<double, std::milli>(latency).count() << " ms";
  EXPECT_TRUE(comms[0]->dead());
  // Every later call fails at once, and the peers see their connections to rank 0 closed.
  EXPECT_LT(time_throw<PeerLost>([&] { comms[0]->send(t, 2, 1); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[0]->barrier(); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[1]->recv(t, 0, 5); }), 2s);
}

TEST(CommunicatorFailure, AbortUnblocksACollectiveWithin100ms) {
  Comms comms = connect_local(2, kTimeout);
  std::promise<Clock::time_point> aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    const auto now = Clock::now();
    comms[0]->abort("stop the allreduce");
    aborted_at.set_value(now);
  });
  const auto latency_end = [&] {
    EXPECT_THROW(comms[0]->allreduce(Tensor::zeros({1 << 20}, DType::kF32), ReduceOp::kSum), PeerLost);
    return Clock::now();
  }();
  aborter.join();
  const auto latency = latency_end - aborted_at.get_future().get();
  EXPECT_LT(latency, 100ms) << std::chrono::duration<double, std::milli>(latency).count() << " ms";
}

TEST(CommunicatorFailure, ATimedOutRecvThrowsTimeoutErrorAndKillsTheCommunicator) {
  Comms comms = connect_local(2, kTimeout);
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  const auto took = time_throw<TimeoutError>([&] { comms[0]->recv(t, 1, 3, 300ms); });
  EXPECT_GE(took, 300ms);
  // The communicator closes every connection when a wait times out.
  EXPECT_LT(took, 1300ms);
  EXPECT_TRUE(comms[0]->dead());
  EXPECT_LT(time_throw<PeerLost>([&] { comms[0]->send(t, 1, 3); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[0]->allreduce(t, ReduceOp::kSum); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[0]->ibarrier(); }), 50ms);
  // Its peer's connection was closed: it fails fast instead of sitting out its own timeout.
  EXPECT_LT(time_throw<PeerLost>([&] { comms[1]->recv(t, 0, 3); }), 2s);
}

TEST(CommunicatorFailure, ACollectiveWaitThatTimesOut) {
  Comms comms = connect_local(2, kTimeout);
  auto work = comms[0]->iallreduce(Tensor::zeros({4}, DType::kF64), ReduceOp::kSum);  // rank 1 never joins
  const auto took = time_throw<TimeoutError>([&] { work->wait(300ms); });
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1300ms);
  EXPECT_TRUE(comms[0]->dead());
}

TEST(CommunicatorFailure, DestroyingWithOperationsInFlightIsBounded) {
  Comms comms = connect_local(2, kTimeout);
  const Tensor t = Tensor::zeros({1024}, DType::kF32);
  auto recv = comms[0]->irecv(t, 1, 9);                       // never sent
  auto collective = comms[0]->iallreduce(t.clone(), ReduceOp::kSum);  // rank 1 never joins
  const auto start = Clock::now();
  comms[0].reset();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_THROW(recv->wait(1s), PeerLost);
  EXPECT_THROW(collective->wait(1s), PeerLost);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[1]->recv(t, 0, 9); }), 2s);
}

// A healthy communicator closes gently (FIN, not RST): a send whose wait returned once its last
// bytes were in the kernel's socket buffer still arrives after the sender is gone.
TEST(CommunicatorFailure, DestroyingAfterTheLastSendStillDeliversIt) {
  Comms comms = connect_local(2, kTimeout);
  const std::int64_t n = 1 << 22;  // 16 MiB: more than the socket buffers hold
  const Tensor big = filled(DType::kF32, n, [](std::int64_t i) { return static_cast<double>(i % 1000); });
  const Tensor got = Tensor::zeros({n}, DType::kF32);
  auto recv = comms[1]->irecv(got, 0, 4);
  comms[0]->send(big, 1, 4);
  comms[0].reset();
  recv->wait(kTimeout);
  EXPECT_FALSE(comms[1]->dead());
  for (std::int64_t i = 0; i < n; i += 4097) ASSERT_EQ(at(got, i), static_cast<double>(i % 1000)) << i;
}

}  // namespace
}  // namespace hdp::mesh
