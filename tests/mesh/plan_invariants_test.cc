// Plan invariants for every strategy, checked independently of verify_plan (token intervals) and
// through it (capacity, rings, slots, replay), plus proof that verify_plan can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "common/error.h"
#include "mesh/plan/plan_check.h"
#include "mesh/plan/sharding.h"
#include "tests/mesh/plan_test_support.h"

namespace hdp::mesh::test {
namespace {

constexpr Strategy kAll[] = {Strategy::kStatic, Strategy::kNaive, Strategy::kBalanced};

// Marks every token each micro-batch member runs; every token must be marked exactly once.
void expect_every_token_once(const PlanRequest& request, const Plan& plan) {
  std::vector<std::vector<int>> runs(request.lengths.size());
  for (std::size_t s = 0; s < request.lengths.size(); ++s) {
    runs[s].assign(static_cast<std::size_t>(request.lengths[s]), 0);
  }
  const auto mark = [&](std::uint32_t s, std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) ++runs[s][static_cast<std::size_t>(t)];
  };
  for (const MicroBatch& batch : plan.micro_batches) {
    const auto d = static_cast<std::int64_t>(batch.ranks.size());
    for (std::uint32_t s : batch.sequences) {
      for (std::int64_t position = 0; position < d; ++position) {
        for (std::int64_t chunk : {position, 2 * d - 1 - position}) {
          const TokenRange range = chunk_range(request.lengths[s], d, chunk);
          mark(s, range.begin, range.end);
        }
      }
    }
    for (const LocalSequence& l : batch.local) mark(l.sequence, 0, request.lengths[l.sequence]);
  }
  for (std::size_t s = 0; s < runs.size(); ++s) {
    for (std::size_t t = 0; t < runs[s].size(); ++t) {
      ASSERT_EQ(runs[s][t], 1) << "sequence " << s << " token " << t;
    }
  }
}

void expect_valid(const PlanRequest& request, Strategy strategy) {
  SCOPED_TRACE(std::string(strategy_name(strategy)));
  const Plan plan = make_plan(request, strategy);
  EXPECT_NO_THROW(verify_plan(request, plan));
  expect_every_token_once(request, plan);
  // Ring alignment, stated directly: a ring's slot is the same entry in every member's queue, and
  // slots grow along each queue.
  for (std::size_t r = 0; r < plan.rank_queues.size(); ++r) {
    for (std::size_t i = 1; i < plan.rank_queues[r].size(); ++i) {
      EXPECT_LT(plan.micro_batches[plan.rank_queues[r][i - 1]].slot, plan.micro_batches[plan.rank_queues[r][i]].slot);
    }
  }
  // Capacity, recomputed here from the chunks.
  for (const MicroBatch& batch : plan.micro_batches) {
    const auto d = static_cast<std::int64_t>(batch.ranks.size());
    for (std::int64_t position = 0; position < d; ++position) {
      std::int64_t held = 0;
      for (std::uint32_t s : batch.sequences) held += member_tokens(request.lengths[s], d, position);
      for (const LocalSequence& l : batch.local) {
        held += l.rank == batch.ranks[static_cast<std::size_t>(position)] ? request.lengths[l.sequence] : 0;
      }
      EXPECT_LE(held, request.capacity);
    }
  }
}

TEST(PlanInvariants, MixedBatchesOnEveryStrategy) {
  // 64 ranks with C = 1024 hold a 64K context; batches of 256K tokens, small enough to mark tokens.
  for (const char* dist : {"github", "byted"}) {
    for (std::uint64_t seed : {1, 2, 3}) {
      auto request = drawn_request(dist, 65536, 262144, seed, 64, 1024);
      for (Strategy strategy : kAll) expect_valid(request, strategy);
    }
  }
}

TEST(PlanInvariants, UnevenSizesAndRanksThatAreNotPowersOfTwo) {
  auto request = make_request({5000, 1, 4097, 4096, 12289, 3, 0, 777, 20000, 2048, 2049}, 7, 4096);
  request.speeds = {1.0, 0.5, 2.0, 1.0, 0.75, 1.0, 1.25};
  for (Strategy strategy : kAll) expect_valid(request, strategy);
}

TEST(PlanInvariants, OffloadedShardsHoldMoreThanCButWithinTheirLimit) {
  // 256K tokens at C = 8K need 32 ranks; with offload (r = 1 under the preset) 2 suffice, so the
  // plan is valid on 8 ranks, and some shard holds more than C.
  auto request = make_request({262144, 5000, 3000, 100}, 8);
  request.offload = true;
  for (Strategy strategy : {Strategy::kNaive, Strategy::kBalanced}) {
    SCOPED_TRACE(std::string(strategy_name(strategy)));
    const Plan plan = make_plan(request, strategy);
    EXPECT_NO_THROW(verify_plan(request, plan));
    expect_every_token_once(request, plan);
    bool offloaded = false;
    for (const MicroBatch& batch : plan.micro_batches) offloaded = offloaded || batch.offload_ratio > 0;
    EXPECT_TRUE(offloaded);
  }
  request.offload = false;
  EXPECT_THROW(make_plan(request, Strategy::kBalanced), InvalidArgument);  // 32 ranks needed, 8 live
}

TEST(PlanInvariants, StaticUsesTheWholeCpGroupForEveryMicroBatch) {
  auto request = drawn_request("github", 65536, 262144, 4, 96, 1024);
  const Plan plan = make_plan(request, Strategy::kStatic);
  // 64K / 1K = 64 ranks, the smallest divisor of 96 at least that large is 96.
  for (const MicroBatch& batch : plan.micro_batches) EXPECT_EQ(batch.ranks.size(), 96u);
}

TEST(PlanInvariants, NaiveShardsEachLongSequenceOverExactlyCeilSOverC) {
  auto request = make_request({10000, 30000, 4096, 100}, 16, 4096);
  const Plan plan = make_plan(request, Strategy::kNaive);
  std::map<std::uint32_t, std::size_t> ring_of;
  for (const MicroBatch& batch : plan.micro_batches) {
    for (std::uint32_t s : batch.sequences) ring_of[s] = batch.ranks.size();
  }
  EXPECT_EQ(ring_of[0], 3u);  // ceil(10000/4096), not rounded up to 4
  EXPECT_EQ(ring_of[1], 8u);  // ceil(30000/4096)
  EXPECT_EQ(ring_of[2], 1u);
  EXPECT_EQ(ring_of[3], 1u);
}

TEST(PlanCheck, RejectsADeadlockingOrder) {
  // Two rings over ranks {0,1}, queued in opposite orders: each rank waits for the other forever.
  auto request = make_request({8000, 8000}, 2, 4096);
  Plan plan = make_plan(request, Strategy::kNaive);
  ASSERT_EQ(plan.micro_batches.size(), 2u);
  ASSERT_EQ(plan.rank_queues[0].size(), 2u);
  std::swap(plan.rank_queues[1][0], plan.rank_queues[1][1]);
  EXPECT_THROW(verify_plan(request, plan), InvariantViolation);
}

TEST(PlanCheck, RejectsALostOrDuplicatedSequenceAndAnOverfullRank) {
  auto request = make_request({3000, 3000, 3000}, 2, 4096);
  const Plan good = make_plan(request, Strategy::kBalanced);
  ASSERT_NO_THROW(verify_plan(request, good));
  Plan lost = good;
  auto& first = lost.micro_batches.front().sequences;
  first.erase(first.begin());
  EXPECT_THROW(verify_plan(request, lost), InvariantViolation);
  Plan twice = good;
  twice.micro_batches.front().sequences.push_back(twice.micro_batches.back().sequences.front());
  EXPECT_THROW(verify_plan(request, twice), InvariantViolation);
  auto smaller = request;
  smaller.capacity = 2000;  // the same plan now overfills its ranks
  EXPECT_THROW(verify_plan(smaller, good), InvariantViolation);
}

}  // namespace
}  // namespace hdp::mesh::test
