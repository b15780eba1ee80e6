// Redundant optimizer shards (mesh/step/buddies.h, ZeroOptimizer::set_replicas):
//   - the buddy plan: every copy on another node than its owner; a permutation (each rank holds
//     one copy) whenever no node has more than half the ranks; otherwise the copies spread over
//     the other nodes; one node: none; deterministic;
//     a property check over 300 seeded random memberships;
//   - the copies stay bitwise equal to the originals, step after step (TCP on loopback, ranks as
//     threads): 4 ranks on 2 nodes and 3 ranks on 2 unequal nodes (one rank holds two copies),
//     uneven shards, weight-decay exemptions across shard boundaries, gradient clipping active.
//     Bitwise because the holder runs the same float operations on the same inputs: the owner's
//     summed gradient (sent as is), the same parameters (identical on every rank before the
//     update), the same global norm;
//   - replicas change nothing of the training: the parameters equal a run without them, bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "mesh/step/buddies.h"
#include "mesh/comm/communicator_factory.h"
#include "tests/support/ranks.h"
#include "mesh/step/replicas.h"
#include "mesh/step/zero.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::Tensor;

TEST(BuddyPlan, EqualNodesGiveAPermutationAcrossNodes) {
  const BuddyPlan plan = plan_buddies({"a", "a", "b", "b", "c", "c"});
  ASSERT_TRUE(plan.complete());
  std::set<int> holders(plan.holder.begin(), plan.holder.end());
  EXPECT_EQ(holders.size(), 6u) << "every rank holds exactly one copy";
  const std::vector<std::string> nodes = {"a", "a", "b", "b", "c", "c"};
  for (int r = 0; r < 6; ++r) {
    EXPECT_NE(nodes[static_cast<std::size_t>(plan.holder[static_cast<std::size_t>(r)])], nodes[static_cast<std::size_t>(r)]);
    EXPECT_EQ(plan.held[static_cast<std::size_t>(r)].size(), 1u);
  }
  EXPECT_EQ(plan.holder, (std::vector<int>{2, 3, 4, 5, 0, 1}));
}

TEST(BuddyPlan, UnequalNodesSpreadTheCopiesAndOneNodeHasNone) {
  const BuddyPlan plan = plan_buddies({"a", "a", "a", "b"});
  ASSERT_TRUE(plan.complete());
  EXPECT_EQ(plan.held[3], (std::vector<int>{0, 1, 2})) << "b's one rank holds a's three copies";
  EXPECT_NE(plan.holder[3], 3);
  EXPECT_LT(plan.holder[3], 3);
  const BuddyPlan single = plan_buddies({"a", "a"});
  EXPECT_FALSE(single.complete());
  EXPECT_EQ(single.holder, (std::vector<int>{-1, -1}));
  EXPECT_FALSE(plan_buddies({}).complete());
}

TEST(BuddyPlan, RandomMembershipsAlwaysPlaceCopiesOnAnotherNodeDeterministically) {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 300; ++trial) {
    const int nodes = 2 + static_cast<int>(rng() % 5);
    std::vector<std::string> node_of_rank;
    std::map<std::string, int> size;
    for (int n = 0; n < nodes; ++n) {
      const int ranks = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < ranks; ++i) node_of_rank.push_back("n" + std::to_string(n));
    }
    std::shuffle(node_of_rank.begin(), node_of_rank.end(), rng);  // ranks of a node need not be contiguous
    for (const auto& n : node_of_rank) ++size[n];
    const BuddyPlan plan = plan_buddies(node_of_rank);
    ASSERT_TRUE(plan.complete()) << "trial " << trial;
    std::size_t copies = 0;
    for (std::size_t r = 0; r < node_of_rank.size(); ++r) {
      const int h = plan.holder[r];
      ASSERT_NE(node_of_rank[static_cast<std::size_t>(h)], node_of_rank[r]) << "trial " << trial;
      const auto& held = plan.held[static_cast<std::size_t>(h)];
      EXPECT_TRUE(std::find(held.begin(), held.end(), static_cast<int>(r)) != held.end());
      copies += plan.held[r].size();
    }
    EXPECT_EQ(copies, node_of_rank.size());
    const BuddyPlan again = plan_buddies(node_of_rank);
    EXPECT_EQ(again.holder, plan.holder);
    // No node with more than half the ranks: a permutation.
    const int largest = std::max_element(size.begin(), size.end(), [](const auto& x, const auto& y) {
                          return x.second < y.second;
                        })->second;
    if (2 * largest <= static_cast<int>(node_of_rank.size())) {
      for (const auto& held : plan.held) EXPECT_EQ(held.size(), 1u) << "trial " << trial;
    }
  }
}

TEST(ZeroReplica, APlanForAnotherWorldOrAWrongHolderIsRefused) {
  ZeroOptimizer zero(10, 0, 2);
  EXPECT_THROW(zero.set_replicas(plan_buddies({"a", "b", "c"})), InvalidArgument);
  BuddyPlan bad = plan_buddies({"a", "b"});
  bad.held[0] = {0};
  EXPECT_THROW(zero.set_replicas(bad), InvalidArgument);
  zero.set_replicas(plan_buddies({"a", "b"}));
  EXPECT_EQ(zero.replica_owners(), (std::vector<int>{1}));
  EXPECT_THROW(zero.replica_exp_avg(0), InvalidArgument);
}

using test::pattern;  // tests/support/ranks.h

struct RunResult {
  std::vector<std::vector<float>> params;                    // by rank, after the last step
  std::map<int, std::vector<std::vector<float>>> m, v;       // by owner, each step: the owner's state
  std::map<int, std::vector<std::vector<float>>> copy_m, copy_v;  // by owner, each step: its copy
};

// `steps` ZeRO-1 steps over ranks on `nodes`, with replicas when asked.
RunResult run(const std::vector<std::string>& nodes, bool replicas, int steps) {
  constexpr std::int64_t kN = 103;  // uneven shards
  const int world = static_cast<int>(nodes.size());
  const std::vector<ZeroOptimizer::Range> exempt{{10, 30}, {50, 52}, {100, 103}};
  const ops::AdamWParams adamw{.lr = 0.01f, .weight_decay = 0.1f};
  const BuddyPlan plan = plan_buddies(nodes);
  auto comms = connect_local(world, 10s);
  RunResult out;
  out.params.resize(static_cast<std::size_t>(world));
  std::vector<std::map<int, std::vector<std::vector<float>>>> own_m(static_cast<std::size_t>(world)),
      own_v(static_cast<std::size_t>(world)), copy_m(static_cast<std::size_t>(world)), copy_v(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ZeroOptimizer zero(kN, r, world);
      zero.set_no_decay(exempt);
      const Tensor params = Tensor::from_vector<float>(pattern(kN, 7), {kN});
      for (int step = 0; step < steps; ++step) {
        if (replicas) zero.set_replicas(plan);
        const Tensor grads = Tensor::from_vector<float>(pattern(kN, static_cast<std::uint32_t>(100 * step + r)), {kN});
        zero.step(params, grads, *comms[static_cast<std::size_t>(r)], adamw, /*max_grad_norm=*/1.0);
        own_m[static_cast<std::size_t>(r)][r].push_back(zero.exp_avg().to_vector<float>());
        own_v[static_cast<std::size_t>(r)][r].push_back(zero.exp_avg_sq().to_vector<float>());
        for (int owner : zero.replica_owners()) {
          copy_m[static_cast<std::size_t>(r)][owner].push_back(zero.replica_exp_avg(owner).to_vector<float>());
          copy_v[static_cast<std::size_t>(r)][owner].push_back(zero.replica_exp_avg_sq(owner).to_vector<float>());
        }
      }
      out.params[static_cast<std::size_t>(r)] = params.to_vector<float>();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    for (auto& [o, s] : own_m[static_cast<std::size_t>(r)]) out.m[o] = s;
    for (auto& [o, s] : own_v[static_cast<std::size_t>(r)]) out.v[o] = s;
    for (auto& [o, s] : copy_m[static_cast<std::size_t>(r)]) out.copy_m[o] = s;
    for (auto& [o, s] : copy_v[static_cast<std::size_t>(r)]) out.copy_v[o] = s;
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_copies_equal_originals(const std::vector<std::string>& nodes) {
  constexpr int kSteps = 6;
  const RunResult with = run(nodes, true, kSteps);
  const int world = static_cast<int>(nodes.size());
  ASSERT_EQ(static_cast<int>(with.copy_m.size()), world) << "every shard has a copy";
  for (int owner = 0; owner < world; ++owner) {
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_TRUE(bitwise_equal(with.copy_m.at(owner)[step], with.m.at(owner)[step])) << "exp_avg of " << owner << " at step " << step;
      EXPECT_TRUE(bitwise_equal(with.copy_v.at(owner)[step], with.v.at(owner)[step])) << "exp_avg_sq of " << owner << " at step " << step;
    }
    // Not trivially equal: the state moved.
    EXPECT_FALSE(bitwise_equal(with.m.at(owner)[0], with.m.at(owner)[kSteps - 1]));
  }
  const RunResult without = run(nodes, false, kSteps);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(bitwise_equal(with.params[static_cast<std::size_t>(r)], without.params[static_cast<std::size_t>(r)]))
        << "replicas changed rank " << r << "'s parameters";
  }
}

TEST(ZeroReplica, CopiesStayBitwiseEqualOnTwoEqualNodes) { expect_copies_equal_originals({"a", "a", "b", "b"}); }

TEST(ZeroReplica, CopiesStayBitwiseEqualOnUnequalNodes) { expect_copies_equal_originals({"a", "a", "b"}); }

constexpr std::int64_t kElems = 103;  // uneven shards

// The placement (mesh/step/replicas.h) starts every copy equal to its original, whatever the
// holder had before; the check finds a copy that differs and names its owner and holder.
TEST(ReplicaPlacement, PlacedCopiesVerifyEqualAndACorruptedCopyIsNamed) {
  const std::vector<std::string> nodes{"a", "a", "b", "b"};
  constexpr int kWorld = 4;
  auto comms = connect_local(kWorld, 10s);
  const ops::AdamWParams adamw{.lr = 1e-2f};
  std::vector<ReplicaCheck> placed(kWorld), corrupted(kWorld);
  std::vector<BuddyPlan> plans(kWorld);
  test::on_ranks_ok(kWorld, [&](int r) {
    auto& comm = *comms[static_cast<std::size_t>(r)];
    ZeroOptimizer zero(kElems, r, kWorld);
    const Tensor params = Tensor::from_vector<float>(pattern(kElems, 7), {kElems});
    for (int step = 0; step < 2; ++step) {  // moments that are not zero, before any copy exists
      zero.step(params, Tensor::from_vector<float>(pattern(kElems, static_cast<std::uint32_t>(10 * step + r)), {kElems}), comm,
                adamw, 1.0);
    }
    plans[static_cast<std::size_t>(r)] = place_replicas(zero, params, nodes, zero.steps_taken(), comm, 10s);
    placed[static_cast<std::size_t>(r)] = verify_replicas(zero, comm);
    // The holder of rank 0's copy changes one value of it.
    for (int owner : zero.replica_owners()) {
      if (owner == 0) zero.replica_exp_avg(owner).data<float>()[5] += 1.0f;
    }
    corrupted[static_cast<std::size_t>(r)] = verify_replicas(zero, comm);
  });
  const int holder = plans[0].holder[0];
  ASSERT_GE(holder, 0);
  EXPECT_TRUE(plans[0].complete());
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(placed[static_cast<std::size_t>(r)].checked, kWorld) << "rank " << r;
    EXPECT_TRUE(placed[static_cast<std::size_t>(r)].wrong.empty()) << "rank " << r;
    EXPECT_EQ(corrupted[static_cast<std::size_t>(r)].checked, kWorld);
    ASSERT_EQ(corrupted[static_cast<std::size_t>(r)].wrong.size(), 1u) << "rank " << r;
    EXPECT_EQ(corrupted[static_cast<std::size_t>(r)].wrong[0], std::make_pair(0, holder));
  }
}

// Where a copy's parameters come from: under a bf16 wire from its owner (only the owner's range
// of its own buffer is exact: here every other rank's buffer differs in the owner's range, as bf16
// rounding would make it), under an f32 wire from the holder's own buffer (equal on every rank at a
// generation's start: nothing is sent). Either way the copy holds the owner's exact range.
TEST(ReplicaPlacement, ACopysParametersAreTheOwnersExactRangeUnderEitherWire) {
  const std::vector<std::string> nodes{"a", "a", "b", "b"};
  constexpr int kWorld = 4;
  for (const ops::DType wire : {ops::DType::kF32, ops::DType::kBF16}) {
    auto comms = connect_local(kWorld, 10s);
    std::vector<std::vector<float>> exact(kWorld);  // by owner: its range as its own buffer holds it
    std::vector<std::map<int, std::vector<float>>> copies(kWorld);  // by holder: owner -> copy's params
    test::on_ranks_ok(kWorld, [&](int r) {
      auto& comm = *comms[static_cast<std::size_t>(r)];
      ZeroOptimizer zero(kElems, r, kWorld, ops::DType::kF32, ops::Device::kCpu, wire);
      std::vector<float> buffer = pattern(kElems, 7);
      if (wire == ops::DType::kBF16) {
        // Outside its own range a rank's buffer is not the master copy.
        for (std::int64_t i = 0; i < kElems; ++i) {
          if (i < zero.offset() || i >= zero.offset() + zero.count()) buffer[static_cast<std::size_t>(i)] += 0.25f;
        }
      }
      const Tensor params = Tensor::from_vector<float>(buffer, {kElems});
      exact[static_cast<std::size_t>(r)].assign(buffer.begin() + zero.offset(), buffer.begin() + zero.offset() + zero.count());
      place_replicas(zero, params, nodes, 3, comm, 10s);
      for (const auto& v : zero.versions(params)) {
        if (v.owner == r) continue;
        EXPECT_EQ(v.step, 3);
        copies[static_cast<std::size_t>(r)][v.owner] = v.params.to_vector<float>();
      }
    });
    int seen = 0;
    for (int holder = 0; holder < kWorld; ++holder) {
      for (const auto& [owner, got] : copies[static_cast<std::size_t>(holder)]) {
        ++seen;
        EXPECT_EQ(got, exact[static_cast<std::size_t>(owner)])
            << "wire " << (wire == ops::DType::kF32 ? "f32" : "bf16") << ": owner " << owner << ", holder " << holder;
      }
    }
    EXPECT_EQ(seen, kWorld) << "every shard has one copy";
  }
}

TEST(ReplicaPlacement, OneNodeHasNoCopiesToCheck) {
  auto comms = connect_local(2, 10s);
  std::vector<ReplicaCheck> checks(2);
  test::on_ranks_ok(2, [&](int r) {
    auto& comm = *comms[static_cast<std::size_t>(r)];
    ZeroOptimizer zero(kElems, r, 2);
    const Tensor params = Tensor::from_vector<float>(pattern(kElems, 7), {kElems});
    const BuddyPlan plan = place_replicas(zero, params, {"a", "a"}, 0, comm, 10s);
    EXPECT_FALSE(plan.complete());
    checks[static_cast<std::size_t>(r)] = verify_replicas(zero, comm);
  });
  for (const auto& c : checks) {
    EXPECT_EQ(c.checked, 0);
    EXPECT_TRUE(c.wrong.empty());
  }
}

}  // namespace
}  // namespace hdp::mesh
