// The choice of a data plane (mesh/comm/data_plane.h), pure: each rule and its reason, the rank
// device record and the decision record with garbage refused, and a property test over random
// assignments of ranks to hosts and devices against a brute-force statement of the rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "common/error.h"
#include "mesh/comm/data_plane.h"
#include "mesh/comm/data_plane_exchange.h"

namespace hdp::mesh {
namespace {

using ::testing::HasSubstr;
using ops::Device;

RankDevice gpu(std::string host, std::string id) { return {std::move(host), Device::kCuda, std::move(id)}; }
RankDevice cpu(std::string host = "a") { return {std::move(host), Device::kCpu, ""}; }

TEST(DataPlaneRule, EveryRankOnAGpuOfItsOwnWithNcclIsNccl) {
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("a", "1"), gpu("b", "0"), gpu("b", "1")};
  const DataPlaneChoice c = choose_data_plane(ranks, true);
  EXPECT_EQ(c.plane, DataPlane::kNccl);
  EXPECT_EQ(c.reason, "each of the 4 ranks has a GPU of its own");
}

TEST(DataPlaneRule, ASingleGpuRankIsNccl) {
  const std::vector<RankDevice> ranks{gpu("a", "0")};
  EXPECT_EQ(choose_data_plane(ranks, true).plane, DataPlane::kNccl);
}

TEST(DataPlaneRule, ARankOnTheCpuMakesItTcpAndIsNamed) {
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("a", "1"), gpu("b", "0"), cpu("b"), cpu("c")};
  const DataPlaneChoice c = choose_data_plane(ranks, true);
  EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(c.reason, "rank 3 is on the CPU");
}

TEST(DataPlaneRule, TwoRanksSharingAGpuMakeItTcpAndAreNamed) {
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("a", "1"), gpu("a", "0"), gpu("b", "0")};
  const DataPlaneChoice c = choose_data_plane(ranks, true);
  EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(c.reason, "ranks 0 and 2 share GPU 0 of host a");
}

TEST(DataPlaneRule, TheSameOrdinalOnAnotherHostIsAnotherGpu) {
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("b", "0"), gpu("ab", "0"), gpu("a", "00")};
  EXPECT_EQ(choose_data_plane(ranks, true).plane, DataPlane::kNccl);
}

TEST(DataPlaneRule, WithoutNcclItIsTcpEvenOnDistinctGpus) {
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("a", "1")};
  const DataPlaneChoice c = choose_data_plane(ranks, false);
  EXPECT_EQ(c.plane, DataPlane::kTcp);
  EXPECT_EQ(c.reason, "this build has no NCCL");
}

TEST(DataPlaneRule, TheFirstRankThatRulesNcclOutIsTheOneNamed) {
  // A shared GPU (ranks 0 and 1) comes before the CPU rank (2) in rank order.
  const std::vector<RankDevice> ranks{gpu("a", "0"), gpu("a", "0"), cpu("a")};
  EXPECT_EQ(choose_data_plane(ranks, true).reason, "ranks 0 and 1 share GPU 0 of host a");
  // Every rule applies whether NCCL is built or not; the ranks' reason wins over the build's.
  EXPECT_EQ(choose_data_plane(ranks, false).reason, "ranks 0 and 1 share GPU 0 of host a");
  const std::vector<RankDevice> all_cpu{cpu(), cpu(), cpu()};
  EXPECT_EQ(choose_data_plane(all_cpu, true).reason, "rank 0 is on the CPU");
}

TEST(DataPlaneRule, NoRanksIsTcp) { EXPECT_EQ(choose_data_plane({}, true).plane, DataPlane::kTcp); }

TEST(DataPlaneRule, StagingOnlyForACudaRankOverTcp) {
  EXPECT_TRUE(needs_staging(gpu("a", "0"), DataPlane::kTcp));
  EXPECT_FALSE(needs_staging(gpu("a", "0"), DataPlane::kNccl));
  EXPECT_FALSE(needs_staging(cpu(), DataPlane::kTcp));
  EXPECT_FALSE(needs_staging(cpu(), DataPlane::kNccl));
}

TEST(DataPlaneRecord, RoundTrips) {
  for (const RankDevice& d : {gpu("10.0.0.7", "0"), gpu("node-3.example", "GPU-5e7c3d2a-0b1f-4c1e"),
                              gpu("::1", "7"), cpu("10.0.0.7"), cpu("")}) {
    const std::string record = encode_rank_device(d);
    EXPECT_EQ(decode_rank_device(record), d) << record;
  }
  EXPECT_EQ(encode_rank_device(gpu("a", "3")), "dev1 cuda a 3");
  EXPECT_EQ(encode_rank_device(cpu("a")), "dev1 cpu a");
  EXPECT_EQ(encode_rank_device(cpu("")), "dev1 cpu");
}

std::string invalid_argument_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no InvalidArgument";
}

TEST(DataPlaneRecord, GarbageIsRefusedNamingTheValue) {
  for (const std::string& garbage : std::vector<std::string>{"", "dev1", "dev2 cuda a 0", "dev1 gpu a 0", "dev1 cuda a", "dev1 cuda a 0 extra",
                                    "dev1 cpu a b", "dev1  cuda a 0", "dev1 cuda a 0 ", "dev1 cuda  0",
                                    "dev1 cuda a\t0", std::string("dev1 cuda a \0", 13), "DEV1 cpu a"}) {
    const std::string message = invalid_argument_message([&] { decode_rank_device(garbage); });
    EXPECT_THAT(message, HasSubstr("is not one")) << "accepted: '" << garbage << "'";
  }
  EXPECT_THAT(invalid_argument_message([] { decode_rank_device("dev1 gpu a 0"); }), HasSubstr("'dev1 gpu a 0'"));
}

TEST(DataPlaneRecord, ADeviceNoRecordCanCarryIsRefused) {
  EXPECT_THAT(invalid_argument_message([] { encode_rank_device(gpu("a", "")); }), HasSubstr("device id"));
  EXPECT_THAT(invalid_argument_message([] { encode_rank_device(gpu("", "0")); }), HasSubstr("needs its host"));
  EXPECT_THAT(invalid_argument_message([] { encode_rank_device(gpu("a b", "0")); }), HasSubstr("whitespace"));
  EXPECT_THAT(invalid_argument_message([] { encode_rank_device(gpu("a", "0 1")); }), HasSubstr("whitespace"));
  EXPECT_THAT(invalid_argument_message([] { encode_rank_device({"a", Device::kCpu, "0"}); }), HasSubstr("no device id"));
}

TEST(DataPlaneRecord, ChoiceRoundTripsAndRefusesGarbage) {
  const DataPlaneChoice tcp{DataPlane::kTcp, "ranks 0 and 2 share GPU 0 of host a"};
  const DataPlaneChoice back = decode_plane_choice(encode_plane_choice(4, tcp), 4);
  EXPECT_EQ(back.plane, DataPlane::kTcp);
  EXPECT_EQ(back.reason, tcp.reason);
  EXPECT_EQ(decode_plane_choice(encode_plane_choice(1, {DataPlane::kNccl, "x"}), 1).plane, DataPlane::kNccl);
  EXPECT_THAT(invalid_argument_message([&] { decode_plane_choice(encode_plane_choice(4, tcp), 3); }),
              HasSubstr("written for 4 ranks"));
  for (const std::string& garbage : std::vector<std::string>{"", "plane1", "plane1 4", "plane1 x tcp r", "plane1 4 udp r", "plane2 4 tcp r",
                                    "plane1 4x tcp r"}) {
    EXPECT_THAT(invalid_argument_message([&] { decode_plane_choice(garbage, 4); }), HasSubstr("is not one"))
        << "accepted: '" << garbage << "'";
  }
}

// The rule, written the slow way: NCCL iff built, all CUDA, and all (host, id) pairs distinct.
bool brute_force_nccl(const std::vector<RankDevice>& ranks, bool nccl_built) {
  if (!nccl_built) return false;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].device != Device::kCuda) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (ranks[j].host == ranks[i].host && ranks[j].device_id == ranks[i].device_id) return false;
    }
  }
  return !ranks.empty();
}

// 5,000 random worlds of 1 to 24 ranks over 1 to 4 hosts of 1 to 8 GPUs, some ranks on the CPU:
// the plane is the rule's, every TCP reason names a rank (or the build) that really rules NCCL
// out, and the choice is monotone (a prefix choosing TCP means the whole world does).
TEST(DataPlaneRule, RandomWorldsFollowTheRule) {
  std::mt19937 rng(20240611);
  int nccl = 0, tcp = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 24)(rng);
    const int hosts = std::uniform_int_distribution<int>(1, 4)(rng);
    const int gpus = std::uniform_int_distribution<int>(1, 8)(rng);
    const double cpu_share = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 0.1 : 0.0;
    const bool built = std::uniform_int_distribution<int>(0, 9)(rng) != 0;
    std::vector<RankDevice> ranks;
    for (int r = 0; r < n; ++r) {
      const std::string host = "h" + std::to_string(std::uniform_int_distribution<int>(0, hosts - 1)(rng));
      if (std::uniform_real_distribution<double>(0, 1)(rng) < cpu_share) {
        ranks.push_back(cpu(host));
      } else {
        ranks.push_back(gpu(host, std::to_string(std::uniform_int_distribution<int>(0, gpus - 1)(rng))));
      }
    }
    const DataPlaneChoice c = choose_data_plane(ranks, built);
    ASSERT_EQ(c.plane == DataPlane::kNccl, brute_force_nccl(ranks, built)) << "trial " << trial << ": " << c.reason;
    (c.plane == DataPlane::kNccl ? nccl : tcp) += 1;
    if (c.plane == DataPlane::kTcp && c.reason.starts_with("rank ")) {
      const int r = std::stoi(c.reason.substr(5));
      EXPECT_EQ(ranks[static_cast<std::size_t>(r)].device, Device::kCpu) << c.reason;
    } else if (c.plane == DataPlane::kTcp && c.reason.starts_with("ranks ")) {
      int a = -1, b = -1;
      ASSERT_EQ(std::sscanf(c.reason.c_str(), "ranks %d and %d", &a, &b), 2) << c.reason;
      EXPECT_LT(a, b);
      EXPECT_EQ(ranks[static_cast<std::size_t>(a)], ranks[static_cast<std::size_t>(b)]) << c.reason;
    } else if (c.plane == DataPlane::kTcp) {
      EXPECT_FALSE(built) << c.reason;
    }
    for (int k = 1; k < n; ++k) {
      const std::span<const RankDevice> prefix(ranks.data(), static_cast<std::size_t>(k));
      if (choose_data_plane(prefix, built).plane == DataPlane::kTcp) {
        EXPECT_EQ(c.plane, DataPlane::kTcp) << "trial " << trial << ", prefix " << k;
        break;
      }
    }
  }
  // The generator reaches both outcomes often enough for the test to mean something.
  EXPECT_GT(nccl, 500);
  EXPECT_GT(tcp, 500);
}

}  // namespace
}  // namespace hdp::mesh
