// How the ranks agree on a data plane through the Store (mesh/comm/data_plane_exchange.h), ranks as
// threads over a MemoryStore; a "CUDA" rank here is only its record (what the factory builds from
// the choice: communicator_factory_test.cc).
//
// What the exchange costs is counted per rank with a store that records every call: ranks on the
// CPU make none; a CUDA rank writes one record and reads two keys a look; rank 0 reads every other
// rank's two keys, in one multi_get when they are all there (also at 20,000 ranks).
//
// Bounds: a wait that a newer generation ends is asserted within 1.3 s of 300 ms (one look is at
// most 100 ms apart, the rest is a loaded 2-core machine's slack); a timeout within [timeout,
// timeout + 1 s].
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "elastic/forwarding_store.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/data_plane_exchange.h"
#include "mesh/comm/wire.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using ops::Device;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Records the calls one rank makes: the keys of each multi_get, and every write and single read.
class CountingStore final : public elastic::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    {
      std::lock_guard lock(mutex_);
      multi_gets.push_back(keys.size());
    }
    return ForwardingStore::multi_get(keys);
  }
  std::mutex mutex_;
  std::vector<std::size_t> multi_gets;
  std::atomic<int> calls{0}, writes{0};

 protected:
  void around(const char* op, const std::function<void()>& call) override {
    ++calls;
    if (std::string_view(op).starts_with("set")) ++writes;
    call();
  }
};

RankDevice gpu(std::string host, std::string id) { return {std::move(host), Device::kCuda, std::move(id)}; }

struct DataPlaneExchange : ::testing::Test {
  std::shared_ptr<elastic::MemoryStore> memory = std::make_shared<elastic::MemoryStore>();
  std::vector<std::shared_ptr<CountingStore>> stores;

  PlaneExchangeOptions options(int rank, int size, RankDevice mine, std::chrono::milliseconds timeout = 5s) {
    while (std::ssize(stores) <= rank) stores.push_back(nullptr);
    auto& counted = stores[static_cast<std::size_t>(rank)];
    counted = std::make_shared<CountingStore>(std::make_shared<elastic::PrefixStore>(memory, "gen:5:boot:main/"));
    return {.rank = rank, .size = size, .mine = std::move(mine), .nccl_built = true, .store = counted,
            .timeout = timeout};
  }

  // Every rank's choice, each rank on a thread of its own.
  std::vector<DataPlaneChoice> agree_all(const std::vector<RankDevice>& devices) {
    const int n = static_cast<int>(devices.size());
    std::vector<PlaneExchangeOptions> opts;
    for (int r = 0; r < n; ++r) opts.push_back(options(r, n, devices[static_cast<std::size_t>(r)]));
    std::vector<DataPlaneChoice> choices(devices.size());
    test::on_ranks_ok(n, [&](int r) { choices[static_cast<std::size_t>(r)] = agree_data_plane(opts[static_cast<std::size_t>(r)]); });
    return choices;
  }

  // What a CPU rank's TcpCommunicator writes as its connect starts.
  void publish_address(int rank) { memory->set("gen:5:boot:main/" + wire::record_key(rank), "127.0.0.1:1"); }
};

TEST_F(DataPlaneExchange, RanksOnTheCpuDecideAloneAndTouchNothing) {
  const auto choices = agree_all({RankDevice{}, RankDevice{}, RankDevice{}});
  for (std::size_t r = 0; r < choices.size(); ++r) {
    EXPECT_EQ(choices[r].plane, DataPlane::kTcp);
    EXPECT_EQ(choices[r].reason, "rank " + std::to_string(r) + " is on the CPU");
    EXPECT_EQ(stores[r]->calls, 0) << "rank " << r;
  }
  EXPECT_TRUE(memory->keys("").empty());
}

// Ranks 1..5 write their records first; then rank 0 reads all ten keys in one multi_get.
TEST_F(DataPlaneExchange, DistinctGpusChooseNcclOnEveryRankAtLinearCost) {
  const int n = 6;
  std::vector<PlaneExchangeOptions> opts;
  for (int r = 0; r < n; ++r) opts.push_back(options(r, n, gpu(r < 3 ? "a" : "b", std::to_string(r % 3))));
  std::vector<std::future<DataPlaneChoice>> followers;
  for (int r = 1; r < n; ++r) {
    followers.push_back(std::async(std::launch::async, [&, r] { return agree_data_plane(opts[static_cast<std::size_t>(r)]); }));
  }
  const auto deadline = Clock::now() + 5s;
  while (memory->keys("gen:5:boot:main/plane/dev/").size() < n - 1u && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  const DataPlaneChoice mine = agree_data_plane(opts[0]);
  EXPECT_EQ(mine.plane, DataPlane::kNccl);
  EXPECT_EQ(mine.reason, "each of the 6 ranks has a GPU of its own");
  for (auto& f : followers) {
    const DataPlaneChoice c = f.get();
    EXPECT_EQ(c.plane, DataPlane::kNccl);
    EXPECT_EQ(c.reason, mine.reason);  // rank 0's, from the record
  }
  EXPECT_EQ(stores[0]->multi_gets, std::vector<std::size_t>{2 * (n - 1)});
  EXPECT_EQ(stores[0]->writes, 1);  // plane/choice
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(stores[static_cast<std::size_t>(r)]->writes, 1) << "rank " << r;  // its record
    for (std::size_t k : stores[static_cast<std::size_t>(r)]->multi_gets) EXPECT_EQ(k, 2u) << "rank " << r;
  }
}

// 20,000 ranks: their records are written as they would be, then rank 0 and the last rank agree.
TEST_F(DataPlaneExchange, TwentyThousandRanksCostRankZeroOneReadAndTheOthersTwoKeys) {
  const int n = 20000;
  auto prefixed = std::make_shared<elastic::PrefixStore>(memory, "gen:5:boot:main/");
  for (int r = 1; r < n; ++r) prefixed->set(plane_device_key(r), encode_rank_device(gpu("h" + std::to_string(r / 8), std::to_string(r % 8))));
  const DataPlaneChoice zero = agree_data_plane(options(0, n, gpu("h0", "0")));
  EXPECT_EQ(zero.plane, DataPlane::kNccl) << zero.reason;
  EXPECT_EQ(stores[0]->multi_gets, std::vector<std::size_t>{2 * (n - 1)});
  const DataPlaneChoice last = agree_data_plane(options(n - 1, n, gpu("h2499", "7")));
  EXPECT_EQ(last.plane, DataPlane::kNccl);
  EXPECT_EQ(stores[n - 1]->multi_gets, std::vector<std::size_t>{2});
}

TEST_F(DataPlaneExchange, ACpuRankAmongGpusMakesEveryRankTakeTcp) {
  publish_address(3);
  std::vector<RankDevice> devices{gpu("a", "0"), gpu("a", "1"), gpu("b", "0"), RankDevice{}, gpu("b", "1")};
  const auto choices = agree_all(devices);
  for (const auto& c : choices) EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(choices[0].reason, "rank 3 is on the CPU");
  EXPECT_EQ(choices[1].reason, "rank 3 is on the CPU");
}

TEST_F(DataPlaneExchange, RankZeroOnTheCpuIsSeenByItsAddressAndWritesNoChoice) {
  publish_address(0);
  const auto choices = agree_all({RankDevice{}, gpu("a", "0"), gpu("a", "1")});
  for (const auto& c : choices) EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(choices[1].reason, "rank 0 is on the CPU");
  EXPECT_FALSE(memory->get("gen:5:boot:main/plane/choice").has_value());
}

TEST_F(DataPlaneExchange, ASharedGpuMakesItTcpWithRankZerosReasonEverywhere) {
  const auto choices = agree_all({gpu("a", "0"), gpu("a", "1"), gpu("a", "1"), gpu("b", "0")});
  for (const auto& c : choices) {
    EXPECT_EQ(c.plane, DataPlane::kTcp);
    EXPECT_EQ(c.reason, "ranks 1 and 2 share GPU 1 of host a");
  }
}

TEST_F(DataPlaneExchange, RankZeroStopsReadingOnceACpuRankRulesNcclOut) {
  publish_address(1);  // rank 1 on the CPU; ranks 2 and 3 never come
  const auto t0 = Clock::now();
  const DataPlaneChoice c = agree_data_plane(options(0, 4, gpu("a", "0"), 5s));
  EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(c.reason, "rank 1 is on the CPU");
  EXPECT_LT(seconds_since(t0), 1.0);  // not the 5 s timeout
}

TEST_F(DataPlaneExchange, WithoutNcclRankZeroDecidesWithoutReading) {
  auto o = options(0, 3, gpu("a", "0"));
  o.nccl_built = false;
  EXPECT_EQ(agree_data_plane(o).reason, "this build has no NCCL");
  EXPECT_TRUE(stores[0]->multi_gets.empty());
}

TEST_F(DataPlaneExchange, ANewerGenerationEndsTheWaitWithPeerLost) {
  auto o = options(1, 2, gpu("a", "1"), 20s);  // rank 0 never comes
  const auto t0 = Clock::now();
  o.superseded = [t0] { return Clock::now() - t0 > 300ms; };
  EXPECT_THROW(agree_data_plane(o), PeerLost);
  EXPECT_GE(seconds_since(t0), 0.3);
  EXPECT_LT(seconds_since(t0), 1.3);
}

TEST_F(DataPlaneExchange, ARankThatNeverComesIsATimeoutNamingIt) {
  const auto prefixed = std::make_shared<elastic::PrefixStore>(memory, "gen:5:boot:main/");
  prefixed->set(plane_device_key(1), encode_rank_device(gpu("a", "1")));
  const auto t0 = Clock::now();
  try {
    agree_data_plane(options(0, 3, gpu("a", "0"), 400ms));
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("from rank 2 within 400 ms"));
  }
  EXPECT_GE(seconds_since(t0), 0.4);
  EXPECT_LT(seconds_since(t0), 1.4);
}

TEST_F(DataPlaneExchange, GarbageRecordsAreRefusedNamingTheKey) {
  const auto prefixed = std::make_shared<elastic::PrefixStore>(memory, "gen:5:boot:main/");
  prefixed->set(plane_device_key(1), "dev1 quantum a 0");
  try {
    agree_data_plane(options(0, 2, gpu("a", "0")));
    FAIL() << "garbage accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("plane/dev/1"));
    EXPECT_THAT(e.what(), HasSubstr("dev1 quantum a 0"));
  }
  prefixed->set(std::string(kPlaneChoiceKey), "plane1 2 carrier-pigeon because");
  try {
    agree_data_plane(options(1, 2, gpu("a", "1")));
    FAIL() << "garbage accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("plane/choice"));
  }
}

// A store whose first three reads fail as an unreachable one does: the exchange retries them.
class FlakyReads final : public elastic::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<int> failures{3};
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    if (failures.fetch_sub(1) > 0) throw StoreUnavailable("test: the store is away");
    return ForwardingStore::multi_get(keys);
  }
};

TEST_F(DataPlaneExchange, AStoreBrieflyAwayIsRetried) {
  const auto prefixed = std::make_shared<elastic::PrefixStore>(memory, "gen:5:boot:main/");
  prefixed->set(std::string(kPlaneChoiceKey), encode_plane_choice(2, {DataPlane::kNccl, "test"}));
  auto o = options(1, 2, gpu("a", "1"));
  auto flaky = std::make_shared<FlakyReads>(prefixed);
  o.store = flaky;
  EXPECT_EQ(agree_data_plane(o).plane, DataPlane::kNccl);
  EXPECT_LE(flaky->failures, 0);  // the three failures were met, and retried
}

}  // namespace
}  // namespace hdp::mesh
