// StagingCommunicator (mesh/comm/staging_communicator.h) over TcpCommunicator, ranks as threads
// over loopback (connect_local). This machine has no GPU, so the staged tests set stage_all: CPU
// tensors go through the host buffers as a GPU's would (copied in when a call starts, copied back
// when its Work is waited). Every result is compared bit for bit with the plain TCP communicator
// run on the same inputs: staging must change where bytes wait, never what arrives.
//
// Failure bounds are communicator_test.cc's, for the same reasons: an abort unblocks a wait
// within 100 ms (measured ~10 ms: one network-loop tick, then the copy back is skipped), a
// peer that closes fails the others within 2 s (measured 1-45 ms), a timed-out wait ends within
// its timeout + 1 s. A test with a real GPU (staged CUDA tensors, page-locked buffers) runs only
// where there is one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "common/error.h"
#include "kernels/cpu/bf16.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/comm/staging_buffers.h"
#include "mesh/comm/staging_communicator.h"
#include "mesh/comm/tcp_communicator.h"
#include "tests/support/error_message.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;
using test::on_ranks_ok;
using test::invalid_argument_message;

constexpr auto kTimeout = 20s;
using Comms = std::vector<std::unique_ptr<Communicator>>;

// n ranks, each a StagingCommunicator over its TcpCommunicator.
std::vector<std::unique_ptr<StagingCommunicator>> staged_ranks(int n, StagingOptions options = {.device = ops::Device::kCpu,
                                                                                                  .stage_all = true}) {
  std::vector<std::unique_ptr<StagingCommunicator>> out;
  for (auto& c : connect_local(n, kTimeout)) out.push_back(std::make_unique<StagingCommunicator>(std::move(c), options));
  return out;
}

// Rank r's input: normal draws (f32/f64 sums then depend on the order of additions, so equal
// bits mean the same algorithm ran), rounded for bf16, small integers for i64.
Tensor input(DType dtype, std::int64_t n, int r) {
  const std::vector<float> v = test::pattern(n, 1000u + static_cast<std::uint32_t>(r));
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = v[static_cast<std::size_t>(i)];
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = x; break;
      case DType::kF64: t.data<double>()[i] = static_cast<double>(x) / 3.0; break;
      case DType::kI32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(x * 100); break;
      case DType::kI64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(x * 1000); break;
      case DType::kBF16: t.data<std::uint16_t>()[i] = kernels::cpu::f32_to_bf16(x); break;
    }
  }
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// Runs `call(rank, communicator)` on fresh plain TCP ranks and on the staged ones, and expects
// the same bits from both on every rank (what `call` returns), and bytes through every staged
// rank's host buffers (the copy path ran).
void expect_same_as_tcp(int n, const std::vector<std::unique_ptr<StagingCommunicator>>& staged,
                        const std::function<Tensor(int, Communicator&)>& call) {
  Comms plain = connect_local(n, kTimeout);
  std::vector<Tensor> want(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
  std::vector<std::int64_t> staged_before;
  for (const auto& s : staged) staged_before.push_back(s->staged_bytes());
  on_ranks_ok(n, [&](int r) { want[static_cast<std::size_t>(r)] = call(r, *plain[static_cast<std::size_t>(r)]); });
  on_ranks_ok(n, [&](int r) { got[static_cast<std::size_t>(r)] = call(r, *staged[static_cast<std::size_t>(r)]); });
  for (std::size_t r = 0; r < staged.size(); ++r) {
    EXPECT_TRUE(same_bits(want[r], got[r])) << "rank " << r;
    EXPECT_GT(staged[r]->staged_bytes(), staged_before[r]) << "rank " << r;
  }
}

std::vector<std::int64_t> uneven_counts(int n) {  // 0, 5, 1, 0, 3, ... and 2 more on the last
  std::vector<std::int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back((r * 5) % 7 * (r % 3 == 0 ? 0 : 1) + (r == n - 1 ? 2 : 0));
  return counts;
}

std::int64_t sum(const std::vector<std::int64_t>& counts) {
  std::int64_t s = 0;
  for (auto c : counts) s += c;
  return s;
}

class StagingTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

TEST_P(StagingTest, SendRecvRingAndToItself) {
  auto staged = staged_ranks(n());
  expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
    const Tensor mine = input(DType::kBF16, 1000, r);
    const Tensor got = Tensor::zeros({2000}, DType::kBF16);
    auto from_left = c.irecv(got.view(0, {1000}), (r + n() - 1) % n(), 3);
    auto self = c.irecv(got.view(1000, {1000}), r, 4);
    auto to_right = c.isend(mine, (r + 1) % n(), 3);
    auto to_self = c.isend(mine, r, 4);
    for (auto* w : {from_left.get(), self.get(), to_right.get(), to_self.get()}) w->wait(kTimeout);
    return got;
  });
}

TEST_P(StagingTest, AllreduceEveryDtype) {
  auto staged = staged_ranks(n());
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
        const Tensor t = input(dtype, 4099, r);
        c.allreduce(t, op);
        return t;
      });
    }
  }
}

TEST_P(StagingTest, ReduceScatterUnevenCountsAndInPlace) {
  auto staged = staged_ranks(n());
  const auto counts = uneven_counts(n());
  expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
    const Tensor out = Tensor::zeros({counts[static_cast<std::size_t>(r)]}, DType::kF32);
    c.reduce_scatter(input(DType::kF32, sum(counts), r), out, counts, ReduceOp::kSum);
    return out;
  });
  // In place: the output is this rank's own block of the input.
  expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
    const Tensor in = input(DType::kF64, sum(counts), r);
    std::int64_t offset = 0;
    for (int k = 0; k < r; ++k) offset += counts[static_cast<std::size_t>(k)];
    const Tensor own = in.view(offset, {counts[static_cast<std::size_t>(r)]});
    c.reduce_scatter(in, own, counts, ReduceOp::kSum);
    return own.clone();
  });
}

TEST_P(StagingTest, AllgatherUnevenCountsAndInPlace) {
  auto staged = staged_ranks(n());
  const auto counts = uneven_counts(n());
  expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
    const Tensor out = Tensor::zeros({sum(counts)}, DType::kI64);
    c.allgather(input(DType::kI64, counts[static_cast<std::size_t>(r)], r), out, counts);
    return out;
  });
  expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
    std::int64_t offset = 0;
    for (int k = 0; k < r; ++k) offset += counts[static_cast<std::size_t>(k)];
    const Tensor whole = Tensor::zeros({sum(counts)}, DType::kF32);
    whole.view(offset, {counts[static_cast<std::size_t>(r)]}).copy_from(input(DType::kF32, counts[static_cast<std::size_t>(r)], r));
    c.allgather(whole.view(offset, {counts[static_cast<std::size_t>(r)]}), whole, counts);
    return whole;
  });
}

TEST_P(StagingTest, BroadcastFromEveryRoot) {
  auto staged = staged_ranks(n());
  for (int root = 0; root < n(); ++root) {
    expect_same_as_tcp(n(), staged, [&](int r, Communicator& c) {
      const Tensor t = input(DType::kF32, 777, r);
      c.broadcast(t, root);
      return t;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, StagingTest, ::testing::Values(1, 2, 3, 5),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(Staging, BuffersAreReusedAcrossCalls) {
  auto staged = staged_ranks(2);
  auto step = [&] {
    on_ranks_ok(2, [&](int r) {
      const Tensor grads = input(DType::kF32, 1 << 16, r);
      staged[static_cast<std::size_t>(r)]->allreduce(grads, ReduceOp::kSum);
      staged[static_cast<std::size_t>(r)]->allreduce(Tensor::zeros({1}, DType::kF64), ReduceOp::kSum);
    });
  };
  step();
  const std::int64_t after_one = staged[0]->buffers_allocated();
  EXPECT_EQ(after_one, 2);  // one per size
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(staged[0]->buffers_allocated(), after_one);
  EXPECT_EQ(staged[0]->buffers_pinned(), 0);  // host tensors: nothing to lock for
}

// The pool's buffers are whole-page tensors (their pages their own, so that page-locking one in
// place never meets a page another locked buffer holds: tests/ops/host_memory_test.cc checks
// that), which shows in where each starts: on a page, where a plain tensor of these sizes need not.
TEST(Staging, PoolBuffersStartOnAPage) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto pool = std::make_shared<staging::HostBuffers>(/*pin=*/false);
  std::vector<staging::HostBuffers::Lease> leases;
  for (std::int64_t n : {1, 7, 100, 1000, 1025, 5000}) leases.push_back(pool->take(DType::kF32, {n}));
  for (const auto& lease : leases) {
    const auto begin = reinterpret_cast<std::uintptr_t>(lease.tensor().raw());
    EXPECT_EQ(begin % page, 0u) << lease.tensor().describe();
  }
}

TEST(Staging, HostTensorsPassStraightThroughWithoutStageAll) {
  auto staged = staged_ranks(2, {.device = ops::Device::kCuda, .stage_all = false});
  on_ranks_ok(2, [&](int r) { EXPECT_EQ(staged[static_cast<std::size_t>(r)]->allreduce_sum(std::int64_t{r + 1}), 3); });
  for (const auto& s : staged) {
    EXPECT_EQ(s->staged_bytes(), 0);
    EXPECT_EQ(s->buffers_allocated(), 0);
  }
}

TEST(Staging, BadArgumentsAreRefusedBeforeAnythingIsCopiedOrSent) {
  auto staged = staged_ranks(2);
  StagingCommunicator& c = *staged[0];
  const Tensor f4 = Tensor::zeros({4}, DType::kF32);
  const std::vector<std::int64_t> counts{2, 2}, three{1, 1, 2}, negative{6, -2};
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, 2, 0); }), HasSubstr("rank 2 is not in [0, 2)"));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(f4, -1, 0); }), HasSubstr("rank -1"));
  EXPECT_THAT(invalid_argument_message([&] { c.isend(f4, 1, kMaxTag); }), HasSubstr(std::to_string(kMaxTag)));
  EXPECT_THAT(invalid_argument_message([&] { c.irecv(Tensor(), 1, 0); }), HasSubstr("undefined"));
  EXPECT_THAT(invalid_argument_message([&] { c.iallreduce(Tensor(), ReduceOp::kSum); }), HasSubstr("undefined"));
  EXPECT_THAT(invalid_argument_message([&] { c.ibroadcast(f4, 5); }), HasSubstr("root 5"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, Tensor::zeros({1}, DType::kF32), three, ReduceOp::kSum); }),
              HasSubstr("3 entries"));
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(f4, Tensor::zeros({4}, DType::kF32), negative); }),
              HasSubstr("counts[1] is -2"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, Tensor::zeros({3}, DType::kF32), counts, ReduceOp::kSum); }),
              HasSubstr("output has 3 elements"));
  EXPECT_THAT(invalid_argument_message([&] { c.iallgather(Tensor::zeros({2}, DType::kF32), Tensor::zeros({4}, DType::kF64), counts); }),
              HasSubstr("f64"));
  EXPECT_THAT(invalid_argument_message([&] { c.ireduce_scatter(f4, f4.view(1, {2}), counts, ReduceOp::kSum); }),
              HasSubstr("overlaps"));
  // Nothing was copied, nothing was sent, and the communicator still works.
  EXPECT_EQ(c.staged_bytes(), 0);
  EXPECT_EQ(c.buffers_allocated(), 0);
  EXPECT_EQ(dynamic_cast<TcpCommunicator&>(c.inner()).bytes_sent(), 0);
  EXPECT_FALSE(c.dead());
  on_ranks_ok(2, [&](int r) { EXPECT_EQ(staged[static_cast<std::size_t>(r)]->allreduce_sum(std::int64_t{1}), 2); });
}

template <typename E, typename F>
Clock::duration time_throw(F&& f) {
  const auto start = Clock::now();
  EXPECT_THROW(f(), E);
  return Clock::now() - start;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

TEST(StagingFailure, AbortUnblocksAStagedRecvWithin100ms) {
  auto staged = staged_ranks(3);
  std::promise<Clock::time_point> aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);  // rank 0 is inside its recv by then
    const auto now = Clock::now();
    staged[0]->abort("test says stop");
    aborted_at.set_value(now);
  });
  const Tensor t = Tensor::zeros({1 << 16}, DType::kF32);
  std::string message;
  try {
    staged[0]->recv(t, 1, 5);
  } catch (const PeerLost& e) {
    message = e.what();
  }
  const auto returned = Clock::now();
  aborter.join();
  const auto latency = returned - aborted_at.get_future().get();
  EXPECT_THAT(message, HasSubstr("test says stop"));
  EXPECT_LT(latency, 100ms) << ms(latency) << " ms";
  EXPECT_TRUE(staged[0]->dead());
  EXPECT_LT(time_throw<PeerLost>([&] { staged[0]->send(t, 2, 1); }), 50ms);
  EXPECT_LT(time_throw<PeerLost>([&] { staged[0]->allreduce(t, ReduceOp::kSum); }), 50ms);
  // Its peers see their connections to rank 0 closed.
  EXPECT_LT(time_throw<PeerLost>([&] { staged[1]->recv(t, 0, 5); }), 2s);
}

// A peer's communicator that goes away (its process dying closes its connections the same way)
// fails the others' staged recv and staged collective with PeerLost, within 2 s.
TEST(StagingFailure, APeerThatGoesAwayFailsTheOthersWithPeerLost) {
  auto staged = staged_ranks(3);
  const Tensor t = Tensor::zeros({1 << 16}, DType::kF32);
  auto recv = staged[0]->irecv(t, 1, 9);
  auto collective = staged[2]->iallreduce(t.clone(), ReduceOp::kSum);
  std::this_thread::sleep_for(100ms);
  const auto gone = Clock::now();
  staged[1].reset();  // closes its connections, as its process's end would
  EXPECT_THROW(recv->wait(kTimeout), PeerLost);
  EXPECT_LT(Clock::now() - gone, 2s) << ms(Clock::now() - gone) << " ms";
  EXPECT_THROW(collective->wait(kTimeout), PeerLost);
  EXPECT_LT(Clock::now() - gone, 2s) << ms(Clock::now() - gone) << " ms";
  EXPECT_TRUE(staged[0]->dead());
}

TEST(StagingFailure, ATimedOutStagedRecvThrowsTimeoutErrorAndKillsTheCommunicator) {
  auto staged = staged_ranks(2);
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  const auto took = time_throw<TimeoutError>([&] { staged[0]->recv(t, 1, 3, 300ms); });
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1300ms);
  EXPECT_TRUE(staged[0]->dead());
  EXPECT_LT(time_throw<PeerLost>([&] { staged[1]->recv(t, 0, 3); }), 2s);
}

TEST(StagingFailure, DestroyingWithStagedOperationsInFlightIsBounded) {
  auto staged = staged_ranks(2);
  const Tensor t = Tensor::zeros({1024}, DType::kF32);
  auto recv = staged[0]->irecv(t, 1, 9);                               // never sent
  auto collective = staged[0]->iallreduce(t.clone(), ReduceOp::kSum);  // rank 1 never joins
  auto dropped = staged[0]->irecv(t.clone(), 1, 10);
  dropped.reset();  // its buffer is set aside, not reused while the recv may still land
  const auto start = Clock::now();
  staged[0].reset();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_THROW(recv->wait(1s), PeerLost);
  EXPECT_THROW(collective->wait(1s), PeerLost);
  EXPECT_LT(time_throw<PeerLost>([&] { staged[1]->recv(t, 0, 9); }), 2s);
}

// On a machine with a GPU: CUDA tensors through page-locked host buffers, against the same
// values on the host.
TEST(StagingGpu, CudaTensorsGoThroughPinnedBuffers) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA device in this build or on this machine";
  auto staged = staged_ranks(2, {.device = ops::Device::kCuda, .stage_all = false});
  auto plain = staged_ranks(2, {.device = ops::Device::kCpu, .stage_all = false});
  std::vector<Tensor> want(2), got(2);
  on_ranks_ok(2, [&](int r) {
    const Tensor host = input(DType::kF32, 100003, r);
    plain[static_cast<std::size_t>(r)]->allreduce(host, ReduceOp::kSum);
    want[static_cast<std::size_t>(r)] = host;
    const Tensor gpu = input(DType::kF32, 100003, r).to(ops::Device::kCuda);
    staged[static_cast<std::size_t>(r)]->allreduce(gpu, ReduceOp::kSum);
    const Tensor from = input(DType::kF32, 1000, r).to(ops::Device::kCuda);
    const Tensor into = Tensor::zeros({1000}, DType::kF32, ops::Device::kCuda);
    auto recv = staged[static_cast<std::size_t>(r)]->irecv(into, 1 - r, 1);
    staged[static_cast<std::size_t>(r)]->send(from, 1 - r, 1);
    recv->wait(kTimeout);
    EXPECT_TRUE(same_bits(into.to(ops::Device::kCpu), input(DType::kF32, 1000, 1 - r)));
    got[static_cast<std::size_t>(r)] = gpu.to(ops::Device::kCpu);
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(same_bits(want[static_cast<std::size_t>(r)], got[static_cast<std::size_t>(r)]));
  EXPECT_GT(staged[0]->buffers_pinned(), 0);
}

}  // namespace
}  // namespace hdp::mesh
