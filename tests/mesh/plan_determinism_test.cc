// The same inputs give the same plan: twice in one process, and from a copied request (across
// processes: tests/cli/plan_cli_test.cc runs `hdp plan --json` twice).
#include <gtest/gtest.h>

#include "mesh/plan_summary.h"
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

}  // namespace
}  // namespace hdp::mesh::test
