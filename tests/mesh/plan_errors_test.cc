// Adversarial requests: each is rejected with InvalidArgument naming the input and its limit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.h"
#include "tests/mesh/plan_test_support.h"

namespace hdp::mesh::test {
namespace {

std::string error_of(const PlanRequest& request, Strategy strategy = Strategy::kBalanced) {
  try {
    make_plan(request, strategy);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlanErrors, SequenceLongerThanTheClusterNamesItsLengthAndTheLimit) {
  auto request = make_request({100, 40000}, 4, 8192);  // 4 ranks hold 32768 tokens
  const std::string message = error_of(request);
  EXPECT_NE(message.find("sequence 1"), std::string::npos) << message;
  EXPECT_NE(message.find("40000"), std::string::npos) << message;
  EXPECT_NE(message.find("32768"), std::string::npos) << message;
}

TEST(PlanErrors, EmptyBatchAndAllZeroLengths) {
  EXPECT_NE(error_of(make_request({}, 4)).find("empty"), std::string::npos);
  EXPECT_NE(error_of(make_request({0, 0}, 4)).find("no tokens"), std::string::npos);
  EXPECT_NE(error_of(make_request({5, -1}, 4)).find("sequence 1 has a negative length"), std::string::npos);
}

TEST(PlanErrors, BadSpeedsAreRejected) {
  for (double speed : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto request = make_request({100}, 3);
    request.speeds[2] = speed;
    EXPECT_NE(error_of(request).find("speed of rank 2"), std::string::npos) << speed;
  }
  auto none = make_request({100}, 0);
  EXPECT_NE(error_of(none).find("no live ranks"), std::string::npos);
}

TEST(PlanErrors, BadCapacityDeltaCostAndOffload) {
  auto request = make_request({100}, 2, 0);
  EXPECT_NE(error_of(request).find("capacity"), std::string::npos);
  request = make_request({100}, 2);
  request.delta_ms = -1;
  EXPECT_NE(error_of(request).find("delta_ms"), std::string::npos);
  request = make_request({100}, 2);
  request.cost.link_gbps = 0;
  EXPECT_NE(error_of(request).find("link_gbps"), std::string::npos);
  request = make_request({100}, 2);
  request.cost.offload.reset();
  request.offload = true;
  EXPECT_NE(error_of(request).find("offload"), std::string::npos);
}

TEST(PlanErrors, StaticMeshNeedsRanksForTheContext) {
  auto request = make_request({100}, 4, 1024);
  request.context = 8192;  // 8 CP ranks needed, 4 live
  EXPECT_NE(error_of(request, Strategy::kStatic).find("context 8192 needs 8 ranks"), std::string::npos);
  EXPECT_NO_THROW(make_plan(request, Strategy::kBalanced));  // HDP needs only the longest sequence
}

TEST(PlanErrors, UnknownStrategyName) {
  EXPECT_THROW(parse_strategy("fastest"), InvalidArgument);
  EXPECT_EQ(parse_strategy("naive"), Strategy::kNaive);
  EXPECT_EQ(strategy_name(Strategy::kStatic), "static");
}

}  // namespace
}  // namespace hdp::mesh::test
