// Recovery from memory (mesh/step/reshard.h) with real ZeRO-1 steps over TCP on loopback (ranks as
// threads):
//   - the commit rule and the plan, as a pure function: a shard whose copies are all lost makes
//     the plan impossible and says which; the newest complete layout wins; the pieces cut every new
//     shard exactly once along the old ones, each from a rank that holds it at the chosen step;
//     a property check over 200 seeded random worlds, failures and joiners;
//   - bitwise equivalence: 4 ranks on 2 nodes train S steps with copies and kept triples; in step
//     S + 1 the second node's two ranks die at a phase (before the step, before the reduce-scatter,
//     after their own update, before the all-gather, or after the step completed); the survivors
//     (with a joiner that holds nothing, or without) agree on a step T, rebuild the new world's
//     shards and parameters from memory, and train to step S + 4. The reference trains T steps on
//     4 ranks, cuts the full state (gathered from the owners) into the new world's shards directly,
//     and trains to the same step. Parameters and both moments must be equal bit for bit (the same
//     float operations on the same inputs: resharding only copies), T must be S or S + 1 as the
//     phase allows, and no step a survivor completed is lost (T >= every survivor's step).
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <random>
#include <thread>

#include "common/error.h"
#include "mesh/step/buddies.h"
#include "mesh/comm/communicator_factory.h"
#include "tests/support/ranks.h"
#include "mesh/step/reshard.h"
#include "mesh/step/zero.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::Tensor;

constexpr std::int64_t kN = 211;  // uneven shards for 2, 3 and 4 ranks

using test::pattern;  // tests/support/ranks.h

// The gradient rank r of a world of w contributes at a step.
Tensor grads_for(std::int64_t step, int rank, int world) {
  return Tensor::from_vector<float>(pattern(kN, static_cast<std::uint32_t>(1000 * step + 10 * world + rank)), {kN});
}

const std::vector<ZeroOptimizer::Range> kExempt{{10, 30}, {100, 104}};
const ops::AdamWParams kAdamW{.lr = 0.01f, .weight_decay = 0.1f};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

HeldState state(std::int64_t layout, int world, int old_rank, std::int64_t completed,
                std::vector<HeldState::Held> held) {
  HeldState s;
  s.layout = layout;
  s.old_world = world;
  s.old_rank = old_rank;
  s.completed = completed;
  s.params_step = completed;
  s.positions[0] = {completed, 0, static_cast<std::uint64_t>(completed)};
  s.positions[2] = {completed + 1, 0, static_cast<std::uint64_t>(completed + 1)};
  s.held = std::move(held);
  return s;
}

TEST(ReshardPlan, RollsForwardWhenEveryShardWasUpdatedAndBackOtherwise) {
  // Old world of 4 on nodes a (0, 1) and b (2, 3), copies 0->2, 1->3, 2->0, 3->1; b died.
  // Rank 0 updated its shard (step 6, keeps 5) and its copy of 2; rank 1 updated its own only.
  std::vector<HeldState> ranks = {state(7, 4, 0, 5, {{0, 6}, {0, 5}, {2, 6}, {2, 5}}),
                                  state(7, 4, 1, 5, {{1, 6}, {1, 5}, {3, 5}})};
  ReshardPlan plan = plan_reshard(ranks, kN);
  ASSERT_TRUE(plan.possible) << plan.why;
  EXPECT_EQ(plan.step, 5) << "shard 3 exists only at step 5: roll back";
  EXPECT_EQ(plan.source, (std::vector<int>{0, 1, 0, 1}));
  ranks[1].held.push_back({3, 6});
  plan = plan_reshard(ranks, kN);
  EXPECT_EQ(plan.step, 6) << "every shard at step 6: roll forward";
  EXPECT_EQ(plan.position.sample, 6u);
}

TEST(ReshardPlan, AShardWithEveryCopyLostIsNamedAndAnOlderCompleteLayoutWins) {
  std::vector<HeldState> ranks = {state(9, 4, 0, 5, {{0, 5}, {2, 5}}), state(9, 4, 1, 5, {{1, 5}})};
  ReshardPlan plan = plan_reshard(ranks, kN);
  EXPECT_FALSE(plan.possible);
  EXPECT_NE(plan.why.find("rank 3's optimizer shard"), std::string::npos) << plan.why;
  EXPECT_NE(plan.why.find("every copy of it was lost"), std::string::npos) << plan.why;
  // A third rank still in an older layout of 1 rank holding everything at step 3.
  ranks.push_back(state(4, 1, 0, 3, {{0, 3}}));
  plan = plan_reshard(ranks, kN);
  ASSERT_TRUE(plan.possible);
  EXPECT_EQ(plan.layout, 4);
  EXPECT_EQ(plan.step, 3);
  EXPECT_EQ(plan.furthest, 5);
  EXPECT_EQ(plan.receives_params, (std::vector<bool>{true, true, false}));
  // Nobody with a state.
  EXPECT_FALSE(plan_reshard({HeldState{}, HeldState{}}, kN).possible);
  // A state that cannot be.
  EXPECT_THROW(plan_reshard({state(1, 2, 0, 1, {{5, 1}})}, kN), InvalidArgument);
}

TEST(ReshardPlan, RandomWorldsCutEveryNewShardOnceFromARankThatHoldsIt) {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 200; ++trial) {
    const int old_world = 2 + static_cast<int>(rng() % 7);
    const std::int64_t n = static_cast<std::int64_t>(rng() % 300);
    std::vector<std::string> nodes;
    for (int r = 0; r < old_world; ++r) nodes.push_back("n" + std::to_string(r % (2 + static_cast<int>(rng() % 2))));
    const BuddyPlan buddies = plan_buddies(nodes);
    const std::string dead = nodes[rng() % nodes.size()];
    std::vector<HeldState> ranks;
    for (int r = 0; r < old_world; ++r) {
      if (nodes[static_cast<std::size_t>(r)] == dead) continue;
      std::vector<HeldState::Held> held = {{r, 8}};
      for (int owner : buddies.held[static_cast<std::size_t>(r)]) held.push_back({owner, 8});
      ranks.push_back(state(3, old_world, r, 8, held));
    }
    const int joiners = static_cast<int>(rng() % 3);
    for (int j = 0; j < joiners; ++j) ranks.push_back(HeldState{});
    std::shuffle(ranks.begin(), ranks.end(), rng);
    const ReshardPlan plan = plan_reshard(ranks, n);
    ASSERT_TRUE(plan.possible) << "trial " << trial << ": " << plan.why;
    const int world = static_cast<int>(ranks.size());
    const auto counts = shard_counts(n, world), old_counts = shard_counts(n, old_world);
    std::int64_t offset = 0;
    for (int j = 0; j < world; ++j) {
      std::int64_t covered = offset;
      for (const auto& p : plan.pieces) {
        if (p.to != j) continue;
        EXPECT_EQ(p.begin, covered) << "trial " << trial << ": new rank " << j << "'s pieces in order, no gap";
        covered = p.end;
        const HeldState& from = ranks[static_cast<std::size_t>(p.from)];
        EXPECT_TRUE(std::any_of(from.held.begin(), from.held.end(),
                                [&](const auto& h) { return h.owner == p.shard && h.step == plan.step; }));
        std::int64_t old_begin = 0;
        for (int k = 0; k < p.shard; ++k) old_begin += old_counts[static_cast<std::size_t>(k)];
        EXPECT_GE(p.begin, old_begin);
        EXPECT_LE(p.end, old_begin + old_counts[static_cast<std::size_t>(p.shard)]);
      }
      offset += counts[static_cast<std::size_t>(j)];
      EXPECT_EQ(covered, offset) << "trial " << trial << ": new rank " << j << "'s shard fully covered";
    }
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(plan.receives_params[static_cast<std::size_t>(r)], ranks[static_cast<std::size_t>(r)].layout < 0);
    }
  }
}

// Where the second node dies in step S + 1 (nullopt: after the step completed, before S + 2).
struct Scenario {
  std::optional<StepPhase> phase;
  bool joiner = false;
};

void PrintTo(const Scenario& s, std::ostream* os) {
  *os << (s.phase ? phase_name(*s.phase) : "after the step") << (s.joiner ? ", with a joiner" : "");
}

struct Full {
  std::vector<float> params, m, v;
  std::int64_t step = 0;
};

// Gathers the owners' shards into full buffers.
Full gather(const std::vector<std::unique_ptr<ZeroOptimizer>>& zeros, const std::vector<float>& params) {
  Full f;
  f.params = params;
  for (const auto& z : zeros) {
    const auto m = z->exp_avg().to_vector<float>(), v = z->exp_avg_sq().to_vector<float>();
    f.m.insert(f.m.end(), m.begin(), m.end());
    f.v.insert(f.v.end(), v.begin(), v.end());
    f.step = z->steps_taken();
  }
  return f;
}

struct Killed {};

constexpr std::int64_t kS = 3, kFinal = kS + 4;

// Trains `zeros` (one per rank, in place) from their step to `until` on a fresh local world.
void train(std::vector<std::unique_ptr<ZeroOptimizer>>& zeros, std::vector<Tensor>& params, std::int64_t until) {
  const int world = static_cast<int>(zeros.size());
  auto comms = connect_local(world, 10s);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto& z = *zeros[static_cast<std::size_t>(r)];
      while (z.steps_taken() < until) {
        z.step(params[static_cast<std::size_t>(r)], grads_for(z.steps_taken() + 1, r, world), *comms[static_cast<std::size_t>(r)],
               kAdamW, 1.0);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// The reference: T steps on 4 ranks, the full state cut straight into `world` shards, on to kFinal.
Full reference(std::int64_t t, int world) {
  std::vector<std::unique_ptr<ZeroOptimizer>> zeros;
  std::vector<Tensor> params;
  for (int r = 0; r < 4; ++r) {
    zeros.push_back(std::make_unique<ZeroOptimizer>(kN, r, 4));
    zeros.back()->set_no_decay(kExempt);
    params.push_back(Tensor::from_vector<float>(pattern(kN, 7), {kN}));
  }
  train(zeros, params, t);
  const Full at_t = gather(zeros, params[0].to_vector<float>());
  std::vector<std::unique_ptr<ZeroOptimizer>> next;
  std::vector<Tensor> next_params;
  for (int r = 0; r < world; ++r) {
    auto z = std::make_unique<ZeroOptimizer>(kN, r, world);
    z->set_no_decay(kExempt);
    z->set_steps_taken(t);
    std::memcpy(z->exp_avg().data<float>(), at_t.m.data() + z->offset(), static_cast<std::size_t>(z->count()) * sizeof(float));
    std::memcpy(z->exp_avg_sq().data<float>(), at_t.v.data() + z->offset(), static_cast<std::size_t>(z->count()) * sizeof(float));
    next.push_back(std::move(z));
    next_params.push_back(Tensor::from_vector<float>(at_t.params, {kN}));
  }
  train(next, next_params, kFinal);
  return gather(next, next_params[0].to_vector<float>());
}

// The run with the failure; returns the final state and T.
Full with_failure(const Scenario& sc, std::int64_t* chosen) {
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  const BuddyPlan buddies = plan_buddies(nodes);
  std::vector<std::unique_ptr<ZeroOptimizer>> zeros;
  std::vector<Tensor> params;
  std::vector<std::int64_t> completed(4, 0);
  for (int r = 0; r < 4; ++r) {
    auto z = std::make_unique<ZeroOptimizer>(kN, r, 4);
    z->set_no_decay(kExempt);
    z->set_replicas(buddies);
    z->set_keep_previous(true);
    params.push_back(Tensor::from_vector<float>(pattern(kN, 7), {kN}));
    const auto counts = z->counts();
    for (int owner : z->replica_owners()) {
      std::int64_t off = 0;
      for (int k = 0; k < owner; ++k) off += counts[static_cast<std::size_t>(k)];
      z->set_replica_state(owner, params.back().view(off, {counts[static_cast<std::size_t>(owner)]}), 0);
    }
    zeros.push_back(std::move(z));
  }
  {
    auto comms = connect_local(4, 3s);
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        auto& z = *zeros[static_cast<std::size_t>(r)];
        auto& comm = *comms[static_cast<std::size_t>(r)];
        const bool victim = nodes[static_cast<std::size_t>(r)] == "b";
        try {
          for (std::int64_t step = 1; step <= kS + 2; ++step) {
            const bool fatal = victim && ((sc.phase && step == kS + 1) || (!sc.phase && step == kS + 2));
            PhaseHook hook = [&](StepPhase p) {
              if (fatal && (!sc.phase || p == *sc.phase)) throw Killed{};
            };
            hook(StepPhase::kForward);
            z.step(params[static_cast<std::size_t>(r)], grads_for(step, r, 4), comm, kAdamW, 1.0, 0ms, hook);
            completed[static_cast<std::size_t>(r)] = step;
          }
          ADD_FAILURE() << "rank " << r << " never met the failure";
        } catch (const Killed&) {
          comm.abort("killed");  // the node is gone: its connections close
        } catch (const PeerLost&) {
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  // The survivors (ranks 0, 1 of node a) and the joiner agree and rebuild.
  const int world = sc.joiner ? 3 : 2;
  std::vector<HeldState> states(static_cast<std::size_t>(world));
  for (int r = 0; r < 2; ++r) {
    const auto& z = *zeros[static_cast<std::size_t>(r)];
    HeldState& s = states[static_cast<std::size_t>(r)];
    s = state(1, 4, r, completed[static_cast<std::size_t>(r)], {});
    s.params_step = z.own_step() == s.completed ? s.completed : -1;
    for (const auto& v : z.versions(params[static_cast<std::size_t>(r)])) s.held.push_back({v.owner, v.step});
  }
  Tensor joiner_params = Tensor::zeros({kN}, ops::DType::kF32);
  if (sc.joiner) params[2] = joiner_params;
  std::vector<std::unique_ptr<ZeroOptimizer>> next(static_cast<std::size_t>(world));
  ReshardPlan agreed;
  {
    auto comms = connect_local(world, 5s);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto& comm = *comms[static_cast<std::size_t>(r)];
        const auto all = exchange_states(states[static_cast<std::size_t>(r)], comm, 5s);
        const ReshardPlan plan = plan_reshard(all, kN);
        if (r == 0) agreed = plan;
        auto z = std::make_unique<ZeroOptimizer>(kN, r, world);
        z->set_no_decay(kExempt);
        const auto mine = r < 2 ? zeros[static_cast<std::size_t>(r)]->versions(params[static_cast<std::size_t>(r)])
                                : std::vector<ZeroOptimizer::Version>{};
        execute_reshard(plan, comm, mine, params[static_cast<std::size_t>(r)], *z, 5s);
        next[static_cast<std::size_t>(r)] = std::move(z);
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_TRUE(agreed.possible) << agreed.why;
  *chosen = agreed.step;
  std::vector<Tensor> next_params(params.begin(), params.begin() + world);
  train(next, next_params, kFinal);
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(bitwise_equal(next_params[static_cast<std::size_t>(r)].to_vector<float>(), next_params[0].to_vector<float>()));
  }
  // No completed step lost.
  EXPECT_GE(agreed.step, std::max(completed[0], completed[1]));
  return gather(next, next_params[0].to_vector<float>());
}

// The caller's job digests (HeldState::job) come back as sent, by rank, all 64 bits of each.
TEST(ExchangeStates, CarriesEachRanksJobDigestsWhole) {
  constexpr int kWorld = 3;
  auto comms = connect_local(kWorld, 5s);
  std::vector<std::vector<HeldState>> seen(kWorld);
  std::vector<std::thread> threads;
  auto digests_of = [](int r) {
    return std::array<std::uint64_t, 4>{0xffffffffffffffffULL - static_cast<std::uint64_t>(r), 0x8000000000000000ULL,
                                        static_cast<std::uint64_t>(r), 0x0123456789abcdefULL * static_cast<std::uint64_t>(r + 1)};
  };
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      HeldState mine;
      mine.job = digests_of(r);
      mine.held = {{r, 7}};
      seen[static_cast<std::size_t>(r)] = exchange_states(mine, *comms[static_cast<std::size_t>(r)], 5s);
    });
  }
  for (auto& t : threads) t.join();
  for (int me = 0; me < kWorld; ++me) {
    ASSERT_EQ(seen[static_cast<std::size_t>(me)].size(), static_cast<std::size_t>(kWorld));
    for (int r = 0; r < kWorld; ++r) {
      const HeldState& s = seen[static_cast<std::size_t>(me)][static_cast<std::size_t>(r)];
      EXPECT_EQ(s.job, digests_of(r)) << "rank " << me << " reading rank " << r;
      ASSERT_EQ(s.held.size(), 1u);
      EXPECT_EQ(s.held[0].owner, r);
    }
  }
}

class ReshardEquivalence : public ::testing::TestWithParam<Scenario> {};

TEST_P(ReshardEquivalence, RecoveredRunEqualsTheFaultFreeRunOnTheNewWorldBitwise) {
  const Scenario sc = GetParam();
  std::int64_t t = -1;
  const Full got = with_failure(sc, &t);
  // Before the reduce-scatter nothing changed: roll back. After the update of every rank and
  // copy (the victims die before the all-gather, or after the step): roll forward.
  if (!sc.phase) {
    EXPECT_EQ(t, kS + 1);
  } else if (*sc.phase == StepPhase::kForward || *sc.phase == StepPhase::kReduceScatter) {
    EXPECT_EQ(t, kS);
  } else if (*sc.phase == StepPhase::kAllGather) {
    EXPECT_EQ(t, kS + 1) << "every shard's update reached a survivor";
  } else {
    EXPECT_TRUE(t == kS || t == kS + 1) << t;
  }
  const Full want = reference(t, sc.joiner ? 3 : 2);
  EXPECT_EQ(got.step, kFinal);
  EXPECT_EQ(want.step, kFinal);
  EXPECT_TRUE(bitwise_equal(got.params, want.params)) << "parameters";
  EXPECT_TRUE(bitwise_equal(got.m, want.m)) << "exp_avg";
  EXPECT_TRUE(bitwise_equal(got.v, want.v)) << "exp_avg_sq";
  // Not trivially equal: training moved the state after the recovery.
  EXPECT_FALSE(bitwise_equal(got.params, pattern(kN, 7)));
}

std::string name_of(const ::testing::TestParamInfo<Scenario>& info) {
  std::string name = info.param.phase ? phase_name(*info.param.phase) : "after";
  for (auto& c : name) {
    if (c == '-') c = '_';
  }
  return name + (info.param.joiner ? "_with_joiner" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Phases, ReshardEquivalence,
    ::testing::Values(Scenario{StepPhase::kForward, false}, Scenario{StepPhase::kReduceScatter, false},
                      Scenario{StepPhase::kOptimizer, false}, Scenario{StepPhase::kAllGather, false},
                      Scenario{std::nullopt, false}, Scenario{StepPhase::kForward, true},
                      Scenario{StepPhase::kOptimizer, true}, Scenario{StepPhase::kAllGather, true}),
    name_of);

}  // namespace
}  // namespace hdp::mesh
