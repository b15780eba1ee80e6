// NcclCommunicator on real NCCL and one GPU (label gpu; skipped without a device):
//  - a world of one moves data through every call (allreduce, broadcast, reduce-scatter,
//    allgather, a message to itself, barrier);
//  - a second rank that never joins: the init is aborted by the watchdog within timeout + 1 s,
//    and a new communicator works;
//  - a generation change while the init waits: aborted within a second;
//  - a stuck operation (a message to itself that no recv matches): aborted within timeout + 1 s
//    (or refused by NCCL at once), and a new communicator works.
// Each prints what it measured ("nccl-figure ...") for docs/performance.md.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/nccl_communicator.h"
#include "ops/tensor.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine: NCCL not checked";
    backend = nccl::make_cuda_backend(0);
  }
  NcclConnectOptions options(int rank, int size, std::chrono::milliseconds timeout) {
    NcclConnectOptions o;
    o.rank = rank;
    o.size = size;
    o.store = std::make_shared<elastic::PrefixStore>(store, "job/gen/" + std::to_string(++generation) + "/main/");
    o.timeout = timeout;
    return o;
  }
  // A fresh communicator of one rank works: an allreduce of 1..n returns 1..n.
  void expect_a_new_communicator_works() {
    auto comm = NcclCommunicator::connect(options(0, 1, 10000ms), backend);
    auto x = ops::Tensor::from_vector<float>({1, 2, 3, 4}, {4}).to(ops::Device::kCuda);
    comm->allreduce(x, ReduceOp::kSum);
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_FALSE(comm->dead());
  }

  std::shared_ptr<elastic::MemoryStore> store = std::make_shared<elastic::MemoryStore>();
  std::shared_ptr<nccl::Backend> backend;
  int generation = 0;
};

TEST_F(NcclGpu, AWorldOfOneMovesData) {
  const auto t0 = Clock::now();
  auto comm = NcclCommunicator::connect(options(0, 1, 30000ms), backend);
  std::printf("nccl-figure init_world_1_s %.3f\n", seconds_since(t0));
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 7.0f, 0.0f, -1.0f};
  auto x = ops::Tensor::from_vector<float>(values, {6}).to(ops::Device::kCuda);
  comm->allreduce(x, ReduceOp::kSum);
  EXPECT_EQ(x.to_vector<float>(), values);
  auto i = ops::Tensor::from_vector<std::int64_t>({5, -9}, {2}).to(ops::Device::kCuda);
  comm->allreduce(i, ReduceOp::kMax);
  EXPECT_EQ(i.to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, -9}));
  comm->broadcast(x, 0);
  EXPECT_EQ(x.to_vector<float>(), values);

  auto out = ops::Tensor::zeros({6}, ops::DType::kF32, ops::Device::kCuda);
  const std::vector<std::int64_t> counts{6};
  comm->reduce_scatter(x, out, counts, ReduceOp::kSum);
  EXPECT_EQ(out.to_vector<float>(), values);
  auto gathered = ops::Tensor::zeros({6}, ops::DType::kF32, ops::Device::kCuda);
  comm->allgather(out, gathered, counts);
  EXPECT_EQ(gathered.to_vector<float>(), values);

  auto received = ops::Tensor::zeros({6}, ops::DType::kF32, ops::Device::kCuda);
  auto recv = comm->irecv(received, 0, 3);
  auto send = comm->isend(x, 0, 3);
  recv->wait(10000ms);
  send->wait(10000ms);
  EXPECT_EQ(received.to_vector<float>(), values);
  comm->barrier();

  // Eleven 64 MiB allreduces queued back to back, then waited for: groups launched while earlier
  // ones are still being enqueued (nccl_backend_cuda.cc's queue). No timing: NCCL does nothing for
  // an in-place allreduce of one rank, so a duration would measure only the host's round trip.
  auto big = ops::Tensor::zeros({16 << 20}, ops::DType::kF32, ops::Device::kCuda);
  std::vector<std::unique_ptr<Work>> works;
  for (int k = 0; k < 11; ++k) works.push_back(comm->iallreduce(big, ReduceOp::kSum));
  for (auto& w : works) w->wait(10000ms);
  EXPECT_FALSE(comm->dead());
}

TEST_F(NcclGpu, ASecondRankThatNeverJoinsIsAbortedWithinTimeoutPlusOneSecond) {
  const auto t0 = Clock::now();
  EXPECT_THROW(NcclCommunicator::connect(options(0, 2, 3000ms), backend), TimeoutError);
  const double took = seconds_since(t0);
  std::printf("nccl-figure never_joins_timeout_3s_aborted_after_s %.3f\n", took);
  EXPECT_GE(took, 3.0);
  EXPECT_LT(took, 4.0);
  expect_a_new_communicator_works();
}

TEST_F(NcclGpu, AGenerationChangeStopsAnInitThatWaits) {
  const auto t0 = Clock::now();
  auto o = options(0, 2, 60000ms);
  o.superseded = [t0] { return Clock::now() - t0 > 500ms; };
  EXPECT_THROW(NcclCommunicator::connect(o, backend), PeerLost);
  const double took = seconds_since(t0);
  std::printf("nccl-figure superseded_at_0.5s_aborted_after_s %.3f\n", took);
  EXPECT_LT(took, 1.5);
  expect_a_new_communicator_works();
}

TEST_F(NcclGpu, AStuckOperationIsAbortedWithinTimeoutPlusOneSecond) {
  auto comm = NcclCommunicator::connect(options(0, 1, 2000ms), backend);
  auto x = ops::Tensor::zeros({1024}, ops::DType::kF32, ops::Device::kCuda);
  const auto t0 = Clock::now();
  bool timed_out = false;
  try {
    comm->isend(x, 0, 1)->wait(30000ms);  // no recv matches it
    ADD_FAILURE() << "an unmatched send completed";
  } catch (const TimeoutError& e) {
    timed_out = true;
    std::printf("nccl-figure unmatched_send: %s\n", e.what());
  } catch (const PeerLost& e) {
    std::printf("nccl-figure unmatched_send refused by NCCL: %s\n", e.what());
  }
  const double took = seconds_since(t0);
  std::printf("nccl-figure stuck_timeout_2s_%s_after_s %.3f\n", timed_out ? "aborted" : "refused", took);
  if (timed_out) {
    EXPECT_GE(took, 2.0);
  }
  EXPECT_LT(took, 3.0);
  EXPECT_TRUE(comm->dead());
  comm.reset();
  expect_a_new_communicator_works();
}

}  // namespace
}  // namespace hdp::mesh
