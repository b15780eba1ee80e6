// NcclCommunicator's logic on the CPU, through the fake NCCL (nccl_fake_backend.h): the id
// exchange through the Store under the generation's namespace, the bootstrap's deadlines, the
// watchdog (a stuck group, a generation change, NCCL's asynchronous error, abort()), grouping of
// point-to-point messages, the shape of the collectives' NCCL calls, argument checks, teardown.
//
// Bounds: the watchdog looks every 20 ms here; an abort it decides is asserted within its
// deadline + 1 s (the bound), which leaves 980 ms for a loaded 2-core machine.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/nccl_communicator.h"
#include "tests/mesh/nccl/nccl_fake_backend.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::FakeNccl;
using Kind = nccl::Op::Kind;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Fixture : ::testing::Test {
  std::shared_ptr<elastic::MemoryStore> store = std::make_shared<elastic::MemoryStore>();
  std::shared_ptr<FakeNccl> fake = std::make_shared<FakeNccl>();

  NcclConnectOptions options(int rank, int size, int generation = 5, std::chrono::milliseconds timeout = 2000ms) {
    NcclConnectOptions o;
    o.rank = rank;
    o.size = size;
    o.store = std::make_shared<elastic::PrefixStore>(store, "job/gen/" + std::to_string(generation) + "/main/");
    o.timeout = timeout;
    o.watchdog_tick = 20ms;
    return o;
  }

  // `size` ranks connected on threads of their own (an init finishes once all have joined).
  std::vector<std::unique_ptr<NcclCommunicator>> connect_all(int size, std::chrono::milliseconds timeout = 2000ms) {
    std::vector<std::future<std::unique_ptr<NcclCommunicator>>> futures;
    for (int r = 0; r < size; ++r) {
      futures.push_back(std::async(std::launch::async, [this, r, size, timeout] {
        return NcclCommunicator::connect(options(r, size, 5, timeout), fake);
      }));
    }
    std::vector<std::unique_ptr<NcclCommunicator>> comms;
    for (auto& f : futures) comms.push_back(f.get());
    return comms;
  }
};

ops::Tensor floats(std::int64_t n) { return ops::Tensor::zeros({n}, ops::DType::kF32); }

TEST(NcclIdRecord, RoundTripsAndRefusesGarbage) {
  nccl::UniqueId id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(i * 7);
  const std::string record = encode_nccl_id(4, id);
  EXPECT_EQ(decode_nccl_id(record, 4), id);
  EXPECT_THROW(decode_nccl_id(record, 3), InvalidArgument);  // written for another size
  EXPECT_THROW(decode_nccl_id("", 4), InvalidArgument);
  EXPECT_THROW(decode_nccl_id("nccl1 4 zz", 4), InvalidArgument);
  EXPECT_THROW(decode_nccl_id("gloo 4 " + record.substr(8), 4), InvalidArgument);
  std::string not_hex = record;
  not_hex.back() = 'g';
  EXPECT_THROW(decode_nccl_id(not_hex, 4), InvalidArgument);
  EXPECT_THROW(decode_nccl_id("nccl1 x4 " + record.substr(8), 4), InvalidArgument);
}

TEST_F(Fixture, RanksShareOneIdWrittenInTheGenerationsNamespace) {
  auto comms = connect_all(3);
  ASSERT_EQ(comms.size(), 3u);
  const auto inits = fake->inits();
  ASSERT_EQ(inits.size(), 3u);
  EXPECT_EQ(inits[0].first, inits[1].first);
  EXPECT_EQ(inits[0].first, inits[2].first);
  EXPECT_TRUE(store->get("job/gen/5/main/nccl-id").has_value());
  EXPECT_EQ(store->keys("job/").size(), 1u);
  for (auto& c : comms) EXPECT_FALSE(c->dead());
  comms.clear();
  EXPECT_EQ(fake->destroys(), 3);
  EXPECT_EQ(fake->aborts(), 0);
}

TEST_F(Fixture, AnotherGenerationsIdIsNotRead) {
  store->set("job/gen/4/main/nccl-id", encode_nccl_id(2, fake->unique_id()));
  const auto t0 = Clock::now();
  EXPECT_THROW(NcclCommunicator::connect(options(1, 2, 5, 300ms), fake), TimeoutError);
  EXPECT_GE(seconds_since(t0), 0.3);
  EXPECT_LT(seconds_since(t0), 1.3);
  EXPECT_TRUE(fake->inits().empty());
}

TEST_F(Fixture, GarbageOrAnotherSizeInTheIdRecordIsRefused) {
  store->set("job/gen/5/main/nccl-id", "nonsense");
  try {
    NcclCommunicator::connect(options(1, 2), fake);
    FAIL() << "garbage accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("nccl-id"), std::string::npos) << e.what();
  }
  store->set("job/gen/5/main/nccl-id", encode_nccl_id(3, fake->unique_id()));
  EXPECT_THROW(NcclCommunicator::connect(options(1, 2), fake), InvalidArgument);
  EXPECT_TRUE(fake->inits().empty());
}

TEST_F(Fixture, ARankThatNeverJoinsFailsTheInitWithinItsTimeoutAndAborts) {
  const auto t0 = Clock::now();
  EXPECT_THROW(NcclCommunicator::connect(options(0, 2, 5, 500ms), fake), TimeoutError);
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 1.5);  // timeout + 1 s
  EXPECT_EQ(fake->aborts(), 1);
  EXPECT_EQ(fake->destroys(), 0);
}

TEST_F(Fixture, ANewerGenerationStopsTheBootstrap) {
  const auto t0 = Clock::now();
  auto o = options(0, 2, 5, 30000ms);
  o.superseded = [t0] { return Clock::now() - t0 > 200ms; };
  EXPECT_THROW(NcclCommunicator::connect(o, fake), PeerLost);
  EXPECT_LT(seconds_since(t0), 1.2);
  EXPECT_EQ(fake->aborts(), 1);
  // A rank still waiting for the id gives up too, without starting an init.
  auto waiting = options(1, 2, 6, 30000ms);
  waiting.superseded = [t0] { return Clock::now() - t0 > 400ms; };
  EXPECT_THROW(NcclCommunicator::connect(waiting, fake), PeerLost);
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_EQ(fake->inits().size(), 1u);
}

TEST_F(Fixture, AStuckOperationIsAbortedWithinItsTimeoutPlusOneSecondAndANewCommunicatorWorks) {
  auto comm = NcclCommunicator::connect(options(0, 1, 5, 500ms), fake);
  fake->hang = true;
  auto buffer = floats(8);
  auto work = comm->iallreduce(buffer, ReduceOp::kSum);
  const auto t0 = Clock::now();
  EXPECT_THROW(work->wait(30000ms), TimeoutError);  // the watchdog's deadline, not the wait's
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 1.5);
  EXPECT_TRUE(comm->dead());
  EXPECT_EQ(comm->aborts(), 1);
  EXPECT_NE(comm->failure().find("did not finish within 500 ms"), std::string::npos) << comm->failure();
  // Every later call fails at once, as PeerLost.
  const auto t1 = Clock::now();
  EXPECT_THROW(comm->iallreduce(buffer, ReduceOp::kSum), PeerLost);
  EXPECT_THROW(comm->isend(buffer, 0, 1), PeerLost);
  EXPECT_THROW(work->wait(30000ms), TimeoutError);
  EXPECT_LT(seconds_since(t1), 0.1);
  comm.reset();
  EXPECT_EQ(fake->aborts(), 1);

  fake->hang = false;
  auto next = NcclCommunicator::connect(options(0, 1, 6, 500ms), fake);
  next->allreduce(buffer, ReduceOp::kSum);
  next->barrier();
  EXPECT_FALSE(next->dead());
}

TEST_F(Fixture, AGenerationChangeAbortsARunningOperation) {
  std::atomic<bool> newer{false};
  auto o = options(0, 1, 5, 30000ms);
  o.superseded = [&] { return newer.load(); };
  auto comm = NcclCommunicator::connect(o, fake);
  fake->hang = true;
  auto work = comm->ibroadcast(floats(4), 0);
  auto changer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);
    newer = true;
    return Clock::now();
  });
  EXPECT_THROW(work->wait(30000ms), PeerLost);
  const double after_change = std::chrono::duration<double>(Clock::now() - changer.get()).count();
  EXPECT_LT(after_change, 1.0);
  EXPECT_NE(comm->failure().find("newer generation"), std::string::npos) << comm->failure();
  EXPECT_EQ(fake->aborts(), 1);
}

TEST_F(Fixture, NcclsAsynchronousErrorKillsTheCommunicatorWithItsMessage) {
  auto comm = NcclCommunicator::connect(options(0, 1, 5, 30000ms), fake);
  fake->hang = true;
  auto work = comm->iallreduce(floats(4), ReduceOp::kMax);
  fake->fail = true;
  const auto t0 = Clock::now();
  try {
    work->wait(30000ms);
    FAIL() << "the error went unnoticed";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("remote process exited"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(fake->aborts(), 1);
}

TEST_F(Fixture, AbortFromAnotherThreadWakesTheWaiterAtOnce) {
  auto comm = NcclCommunicator::connect(options(0, 1, 5, 30000ms), fake);
  fake->hang = true;
  auto work = comm->iallgather(floats(3), floats(3), std::vector<std::int64_t>{3});
  auto aborter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    comm->abort("operator asked");
    return Clock::now();
  });
  EXPECT_THROW(work->wait(30000ms), PeerLost);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - aborter.get()).count(), 0.2);
  EXPECT_NE(comm->failure().find("operator asked"), std::string::npos);
  comm->abort("again");  // more than once is harmless
  EXPECT_EQ(comm->aborts(), 1);
}

TEST_F(Fixture, AShortWaitGivesUpAfterItsOwnLimitAndKillsTheCommunicator) {
  auto comm = NcclCommunicator::connect(options(0, 1, 5, 30000ms), fake);
  fake->hang = true;
  auto work = comm->iallreduce(floats(2), ReduceOp::kSum);
  const auto t0 = Clock::now();
  EXPECT_THROW(work->wait(150ms), TimeoutError);
  EXPECT_GE(seconds_since(t0), 0.15);
  EXPECT_LT(seconds_since(t0), 1.15);
  EXPECT_TRUE(comm->dead());
  EXPECT_EQ(fake->aborts(), 1);
}

TEST_F(Fixture, MessagesWaitForOneGroupAndACollectiveLaunchesThemFirst) {
  auto comms = connect_all(3);
  auto& c = *comms[0];
  auto a = floats(4), b = floats(4);
  auto recv = c.irecv(a, 2, 7);
  auto send = c.isend(b, 1, 7);
  EXPECT_TRUE(fake->launched().empty());  // queued until waited for
  recv->wait(1000ms);
  send->wait(1000ms);
  auto groups = fake->launched();
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].size(), 2u);
  EXPECT_EQ(groups[0][0].kind, Kind::kRecv);
  EXPECT_EQ(groups[0][0].peer, 2);
  EXPECT_EQ(groups[0][0].count, 4);
  EXPECT_EQ(groups[0][1].kind, Kind::kSend);
  EXPECT_EQ(groups[0][1].peer, 1);
  EXPECT_EQ(groups[0][1].send, b.raw());

  auto late = c.isend(b, 2, 8);
  c.allreduce(a, ReduceOp::kSum);
  groups = fake->launched();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[1][0].kind, Kind::kSend);  // the queued message went first
  EXPECT_EQ(groups[2][0].kind, Kind::kAllReduce);
  late->wait(1000ms);
  late->wait(1000ms);  // again: a no-op
  EXPECT_EQ(fake->launched().size(), 3u);
}

TEST_F(Fixture, UnevenCountsBecomeOneReduceOrBroadcastPerRank) {
  auto comms = connect_all(3);
  auto& c = *comms[0];
  const std::vector<std::int64_t> uneven{2, 0, 3}, even{2, 2, 2};
  auto input = floats(5), mine = floats(2);
  c.reduce_scatter(input, mine, uneven, ReduceOp::kSum);
  c.allgather(mine, input, uneven);
  auto whole = floats(6);
  c.reduce_scatter(whole, mine, even, ReduceOp::kMin);
  c.allgather(mine, whole, even);
  c.reduce_scatter(floats(0), floats(0), std::vector<std::int64_t>{0, 0, 0}, ReduceOp::kSum);  // nothing to launch
  const auto groups = fake->launched();
  ASSERT_EQ(groups.size(), 4u);
  ASSERT_EQ(groups[0].size(), 2u);  // ranks 0 and 2 (rank 1's block is empty)
  EXPECT_EQ(groups[0][0].kind, Kind::kReduce);
  EXPECT_EQ(groups[0][0].peer, 0);
  EXPECT_EQ(groups[0][0].recv, mine.raw());
  EXPECT_EQ(groups[0][1].peer, 2);
  EXPECT_EQ(groups[0][1].recv, nullptr);
  EXPECT_EQ(groups[0][1].send, static_cast<const std::byte*>(input.raw()) + 2 * sizeof(float));
  EXPECT_EQ(groups[0][1].count, 3);
  ASSERT_EQ(groups[1].size(), 2u);
  EXPECT_EQ(groups[1][0].kind, Kind::kBroadcast);
  EXPECT_EQ(groups[1][0].send, mine.raw());
  EXPECT_EQ(groups[1][1].send, nullptr);
  EXPECT_EQ(groups[1][1].recv, static_cast<std::byte*>(input.raw()) + 2 * sizeof(float));
  ASSERT_EQ(groups[2].size(), 1u);
  EXPECT_EQ(groups[2][0].kind, Kind::kReduceScatter);
  EXPECT_EQ(groups[2][0].count, 2);
  EXPECT_EQ(groups[2][0].op, ReduceOp::kMin);
  ASSERT_EQ(groups[3].size(), 1u);
  EXPECT_EQ(groups[3][0].kind, Kind::kAllGather);
}

TEST_F(Fixture, BadArgumentsAreRefusedBeforeAnythingIsLaunched) {
  auto comms = connect_all(2);
  auto& c = *comms[0];
  auto f = floats(4);
  EXPECT_THROW(c.isend(f, 2, 1), InvalidArgument);
  EXPECT_THROW(c.irecv(f, -1, 1), InvalidArgument);
  EXPECT_THROW(c.isend(f, 1, kMaxTag), InvalidArgument);
  EXPECT_THROW(c.isend(ops::Tensor(), 1, 1), InvalidArgument);
  EXPECT_THROW(c.ibroadcast(f, 2), InvalidArgument);
  const std::vector<std::int64_t> one{4};
  EXPECT_THROW(c.ireduce_scatter(f, floats(2), one, ReduceOp::kSum), InvalidArgument);  // 1 count for 2 ranks
  const std::vector<std::int64_t> two{2, 2};
  EXPECT_THROW(c.ireduce_scatter(f, floats(3), two, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(c.ireduce_scatter(f, ops::Tensor::zeros({2}, ops::DType::kI64), two, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(c.iallgather(floats(2), floats(5), two), InvalidArgument);
  const std::vector<std::int64_t> negative{-1, 5};
  EXPECT_THROW(c.iallgather(floats(0), f, negative), InvalidArgument);
  EXPECT_TRUE(fake->launched().empty());
  EXPECT_FALSE(c.dead());

  // A backend on another device refuses host tensors, naming both.
  auto gpu = std::make_shared<FakeNccl>(ops::Device::kCuda);
  auto g = NcclCommunicator::connect(options(0, 1, 9), gpu);
  try {
    g->iallreduce(f, ReduceOp::kSum);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST_F(Fixture, DestroyedWithAGroupInFlightItAborts) {
  auto comm = NcclCommunicator::connect(options(0, 1, 5, 30000ms), fake);
  fake->hang = true;
  auto work = comm->iallreduce(floats(2), ReduceOp::kSum);
  comm.reset();
  EXPECT_EQ(fake->aborts(), 1);
  EXPECT_EQ(fake->destroys(), 0);
  EXPECT_THROW(work->wait(1000ms), PeerLost);  // the handle outlives its communicator
}

}  // namespace
}  // namespace hdp::mesh
