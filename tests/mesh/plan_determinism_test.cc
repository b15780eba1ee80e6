// The same inputs give the same plan: twice in one process, and from a copied request (across
// processes: tests/cli/plan_cli_test.cc runs `hdp plan --json` twice).
#include <gtest/gtest.h>

#include "mesh/plan/plan_summary.h"
#include "tests/mesh/plan_test_support.h"

namespace hdp::mesh::test {
namespace {

TEST(PlanDeterminism, SameInputsSamePlan) {
  auto request = drawn_request("byted", 262144, 4 << 20, 9, 128);
  request.speeds[3] = 0.7;
  for (Strategy strategy : {Strategy::kStatic, Strategy::kNaive, Strategy::kBalanced}) {
    const PlanRequest copy = request;
    const Plan a = make_plan(request, strategy);
    const Plan b = make_plan(copy, strategy);
    EXPECT_EQ(plan_digest(a), plan_digest(b));
    ASSERT_EQ(a.micro_batches.size(), b.micro_batches.size());
    for (std::size_t i = 0; i < a.micro_batches.size(); ++i) {
      EXPECT_EQ(a.micro_batches[i].ranks, b.micro_batches[i].ranks);
      EXPECT_EQ(a.micro_batches[i].sequences, b.micro_batches[i].sequences);
      EXPECT_EQ(a.micro_batches[i].slot, b.micro_batches[i].slot);
    }
    EXPECT_EQ(a.rank_queues, b.rank_queues);
  }
}

TEST(PlanDeterminism, DigestSeesADifferentPlan) {
  auto request = drawn_request("github", 65536, 1 << 20, 5, 32);
  const auto before = plan_digest(make_plan(request, Strategy::kBalanced));
  request.speeds[0] = 0.5;
  EXPECT_NE(before, plan_digest(make_plan(request, Strategy::kBalanced)));
}

// Pinned digests: a change to the planners that is meant to leave plans alone (a faster index, a
// different sort) must leave these alone; a change that is meant to alter plans updates them here,
// visibly. Same build only (docs/scheduler.md): the digests hash simulated times in doubles.
// Re-pinned once when the digest's hash became xxh3-64 (it was a hand-written FNV-1a); the plans
// did not change.
TEST(PlanDeterminism, PinnedPlansStayTheSame) {
  struct Pinned {
    const char* dist;
    std::int64_t context;
    std::uint64_t seed;
    std::size_t ranks;
    std::uint64_t digest[3];  // static, naive, balanced
  };
  const Pinned pinned[] = {
      {"byted", 2 << 20, 7, 1024, {0x57ff5133ae68e713, 0x065df7f67630a964, 0x0b5edef1c86bc95a}},
      {"github", 262144, 3, 96, {0x1c1f6015d9457261, 0x27439783107e8931, 0x8c9b3ba30e95a67d}},
  };
  for (const Pinned& p : pinned) {
    auto request = drawn_request(p.dist, p.context, 32 << 20, p.seed, p.ranks);
    request.speeds[1] = 0.6;
    int k = 0;
    for (Strategy strategy : {Strategy::kStatic, Strategy::kNaive, Strategy::kBalanced}) {
      EXPECT_EQ(plan_digest(make_plan(request, strategy)), p.digest[k++])
          << p.dist << " seed " << p.seed << ", " << strategy_name(strategy);
    }
  }
}

}  // namespace
}  // namespace hdp::mesh::test
