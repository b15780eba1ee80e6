#include "common/error.h"

#include <gtest/gtest.h>

#include "common/log.h"

namespace hdp {
namespace {

TEST(Errors, TiersAreDistinguishableByBaseClass) {
  EXPECT_THROW(throw StoreUnavailable("x"), RecoverableError);
  EXPECT_THROW(throw TimeoutError("x"), RecoverableError);
  EXPECT_THROW(throw PeerLost("x"), RecoverableError);
  EXPECT_THROW(throw InvalidArgument("x"), FatalError);
  EXPECT_THROW(throw AuthError("x"), FatalError);
  EXPECT_THROW(throw InvariantViolation("x"), FatalError);
  EXPECT_THROW(throw StoreUnavailable("x"), Error);
}

TEST(Errors, CheckNamesFileLineConditionAndMessage) {
  try {
    const int world = 3;
    HDP_CHECK(world % 2 == 0, "world size " + std::to_string(world) + " is odd");
    FAIL() << "HDP_CHECK did not throw";
  } catch (const InvariantViolation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("error_test.cc:"), std::string::npos) << what;
    EXPECT_NE(what.find("world % 2 == 0"), std::string::npos) << what;
    EXPECT_NE(what.find("world size 3 is odd"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(HDP_CHECK(1 + 1 == 2, ""));
}

TEST(Log, LevelIsSettableAndBadLevelsAreRejected) {
  set_log_level("debug");
  EXPECT_EQ(log()->level(), spdlog::level::debug);
  set_log_level("off");
  EXPECT_EQ(log()->level(), spdlog::level::off);
  EXPECT_THROW(set_log_level("loud"), InvalidArgument);
  set_log_level("info");
}

}  // namespace
}  // namespace hdp
