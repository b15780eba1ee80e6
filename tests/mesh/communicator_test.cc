// What TcpCommunicator does beyond the contract every communicator keeps (that one is
// communicator_conformance_test.cc), ranks as threads of this process (connect_local, real TCP on
// loopback): collectives that differ across ranks caught by its descriptor exchange, CUDA tensors
// refused, a dead rank's peers told at once (its connections closed: after an abort, after a wait
// that timed out, after it was destroyed with operations in flight), and a gentle close that
// still delivers the last send.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <thread>

#include "common/error.h"
#include "mesh/comm/communicator_factory.h"
#include "tests/mesh/communicator_values.h"
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

using hdp::test::on_ranks;  // tests/support/ranks.h
using hdp::test::invalid_argument_message;  // tests/support/error_message.h
using test::at;  // tests/mesh/communicator_values.h
using test::filled;

// ---- errors -------------------------------------------------------------------------------------

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

// An aborted rank closes its connections: a peer waiting on it fails at once instead of sitting
// out its timeout (the contract asks only that the aborted rank's own calls fail).
TEST(CommunicatorFailure, AnAbortedRanksPeersFailFast) {
  Comms comms = connect_local(3, kTimeout);
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  auto waiting = std::async(std::launch::async, [&] { return time_throw<PeerLost>([&] { comms[1]->recv(t, 0, 5); }); });
  std::this_thread::sleep_for(200ms);  // rank 1 is inside its recv by then
  comms[0]->abort("test says stop");
  EXPECT_LT(waiting.get(), 200ms + 2s);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[2]->recv(t, 0, 5); }), 2s);
}

// The same after a wait that timed out: the communicator closes every connection.
TEST(CommunicatorFailure, ATimedOutRanksPeerFailsFast) {
  Comms comms = connect_local(2, kTimeout);
  const Tensor t = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(comms[0]->recv(t, 1, 3, 300ms), TimeoutError);
  EXPECT_LT(time_throw<PeerLost>([&] { comms[1]->recv(t, 0, 3); }), 2s);
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
