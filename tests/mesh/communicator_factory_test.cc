// What connect_communicator builds for a generation from its ranks' devices, ranks as threads
// over a MemoryStore with real TCP on loopback: TcpCommunicator when every rank is on the CPU (at
// exactly the bootstrap cost it always had), StagingCommunicator over it on a "CUDA" rank of a TCP
// plane, NcclCommunicator when every rank has a GPU of its own (through the fake NCCL of
// tests/mesh/nccl: this machine has no GPU, so a "CUDA" rank here is only its record and moves
// CPU tensors, which the staging communicator passes straight to TCP).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

#include "common/error.h"
#include "elastic/forwarding_store.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/comm/data_plane_exchange.h"
#include "mesh/comm/nccl_communicator.h"
#include "mesh/comm/staging_communicator.h"
#include "mesh/comm/tcp_communicator.h"
#include "tests/mesh/nccl/nccl_fake_backend.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ops::Device;

constexpr auto kTimeout = 10s;

// The keys every call of one store touches, and which calls were made.
class RecordingStore final : public elastic::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    ++multi_gets;
    return ForwardingStore::multi_get(keys);
  }
  std::atomic<int> multi_gets{0};
};

RankDevice gpu(std::string id, std::string host = "127.0.0.1") { return {std::move(host), Device::kCuda, std::move(id)}; }

struct DataPlaneFactory : ::testing::Test {
  std::shared_ptr<elastic::MemoryStore> memory = std::make_shared<elastic::MemoryStore>();
  std::shared_ptr<RecordingStore> recorded = std::make_shared<RecordingStore>(memory);

  elastic::Bootstrap boot(int rank, int size) const {
    return {.generation = 5, .rank = rank, .world_size = size, .advertise_address = "127.0.0.1",
            .store = std::make_shared<elastic::PrefixStore>(recorded, "gen:5:boot:"), .group = "job/gen:5:boot:",
            .superseded = {}};
  }

  // Every rank's communicator on "main", each connected on a thread of its own.
  std::vector<std::unique_ptr<Communicator>> connect_all(const std::vector<RankDevice>& devices,
                                                         const DataPlaneHooks& hooks = {}) {
    const int n = static_cast<int>(devices.size());
    std::vector<std::unique_ptr<Communicator>> comms(devices.size());
    test::on_ranks_ok(n, [&](int r) {
      comms[static_cast<std::size_t>(r)] =
          connect_communicator(boot(r, n), "main", kTimeout, Connect::kRingNow, devices[static_cast<std::size_t>(r)], hooks);
    });
    return comms;
  }

  // An allreduce across all: the communicators really connect each other.
  static void expect_allreduce(const std::vector<std::unique_ptr<Communicator>>& comms) {
    const int n = static_cast<int>(comms.size());
    test::on_ranks_ok(n, [&](int r) {
      EXPECT_EQ(comms[static_cast<std::size_t>(r)]->allreduce_sum(std::int64_t{r + 1}), n * (n + 1) / 2);
    });
  }
};

TEST_F(DataPlaneFactory, RanksOnTheCpuGetTcpAtTheBootstrapCostTheyAlwaysHad) {
  const auto comms = connect_all({RankDevice{}, RankDevice{}, RankDevice{}, RankDevice{}});
  for (const auto& c : comms) EXPECT_NE(dynamic_cast<TcpCommunicator*>(c.get()), nullptr);
  expect_allreduce(comms);
  // The store holds the four address records and nothing else; no rank read many keys at once.
  const std::vector<std::string> keys = memory->keys("");
  EXPECT_EQ(keys, (std::vector<std::string>{"gen:5:boot:main/addr/0", "gen:5:boot:main/addr/1",
                                            "gen:5:boot:main/addr/2", "gen:5:boot:main/addr/3"}));
  EXPECT_EQ(recorded->multi_gets, 0);
}

TEST_F(DataPlaneFactory, CudaRanksBesideCpuRanksStageOverTcp) {
  const auto comms = connect_all({RankDevice{}, gpu("0"), RankDevice{}, gpu("1")});
  for (int r : {0, 2}) EXPECT_NE(dynamic_cast<TcpCommunicator*>(comms[static_cast<std::size_t>(r)].get()), nullptr) << r;
  for (int r : {1, 3}) {
    auto* staging = dynamic_cast<StagingCommunicator*>(comms[static_cast<std::size_t>(r)].get());
    ASSERT_NE(staging, nullptr) << r;
    EXPECT_NE(dynamic_cast<TcpCommunicator*>(&staging->inner()), nullptr);
  }
  expect_allreduce(comms);
  // Rank 0 is on the CPU: the CUDA ranks learnt TCP from its address; nobody wrote a choice.
  EXPECT_FALSE(memory->get("gen:5:boot:main/plane/choice").has_value());
}

TEST_F(DataPlaneFactory, RanksSharingAGpuStageOverTcp) {
  // As if NCCL were built (a build without it would give that reason first).
  const auto comms = connect_all({gpu("0"), gpu("1"), gpu("0")}, {.nccl_built = true});
  for (const auto& c : comms) EXPECT_NE(dynamic_cast<StagingCommunicator*>(c.get()), nullptr);
  expect_allreduce(comms);
  const auto record = memory->get("gen:5:boot:main/plane/choice");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(decode_plane_choice(*record, 3).reason, "ranks 0 and 2 share GPU 0 of host 127.0.0.1");
}

TEST_F(DataPlaneFactory, AnEmptyHostIsTheAdvertisedAddress) {
  // Two ranks on "GPU 0" with no host given: both are 127.0.0.1's, so they share it.
  const auto comms = connect_all({gpu("0", ""), gpu("0", "")}, {.nccl_built = true});
  for (const auto& c : comms) EXPECT_NE(dynamic_cast<StagingCommunicator*>(c.get()), nullptr);
}

TEST_F(DataPlaneFactory, DistinctGpusWithNcclGetTheNcclCommunicator) {
  auto fake = std::make_shared<testing::FakeNccl>();
  std::mutex mutex;
  std::set<std::string> asked;  // the device ids the backend was made for
  DataPlaneHooks hooks{.nccl_built = true, .nccl_backend = [&](const RankDevice& d) -> std::shared_ptr<nccl::Backend> {
                         std::lock_guard lock(mutex);
                         asked.insert(d.device_id);
                         return fake;
                       }};
  const auto comms = connect_all({gpu("0"), gpu("1"), gpu("2"), gpu("3")}, hooks);
  for (const auto& c : comms) EXPECT_NE(dynamic_cast<NcclCommunicator*>(c.get()), nullptr);
  EXPECT_EQ(asked, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(fake->inits().size(), 4u);
  // NCCL's id and the choice live in the channel's namespace; no address record was written.
  EXPECT_TRUE(memory->get("gen:5:boot:main/" + std::string(kNcclIdKey)).has_value());
  EXPECT_EQ(decode_plane_choice(*memory->get("gen:5:boot:main/plane/choice"), 4).plane, DataPlane::kNccl);
  EXPECT_TRUE(memory->keys("gen:5:boot:main/addr/").empty());
}

TEST_F(DataPlaneFactory, DistinctGpusWithoutNcclStageOverTcp) {
  const auto comms = connect_all({gpu("0"), gpu("1")}, {.nccl_built = false});
  for (const auto& c : comms) EXPECT_NE(dynamic_cast<StagingCommunicator*>(c.get()), nullptr);
  expect_allreduce(comms);
}

TEST_F(DataPlaneFactory, TheDefaultNcclBackendNeedsAnOrdinal) {
  try {
    connect_communicator(boot(0, 1), "main", kTimeout, Connect::kRingNow, gpu("GPU-5e7c"), {.nccl_built = true});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'GPU-5e7c' is not a CUDA ordinal"));
  }
}

TEST_F(DataPlaneFactory, StageAllWrapsCpuRanksToo) {
  const auto comms = connect_all({RankDevice{}, RankDevice{}}, {.stage_all = true});
  for (const auto& c : comms) ASSERT_NE(dynamic_cast<StagingCommunicator*>(c.get()), nullptr);
  expect_allreduce(comms);
  EXPECT_GT(dynamic_cast<StagingCommunicator&>(*comms[0]).staged_bytes(), 0);
}

}  // namespace
}  // namespace hdp::mesh
