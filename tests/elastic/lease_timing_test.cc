// The agent's timing values (elastic/lease_timing.h): derived from the lease in one place and
// checked once, so that no store call can block the agent's thread past a heartbeat interval.
#include "elastic/lease_timing.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace hdp::elastic {
namespace {

using std::chrono::milliseconds;

TEST(AgentTimingTest, DerivesEverythingFromTheDefaultLease) {
  LeaseTiming t = derive_lease_timing(milliseconds(5000), std::nullopt);
  EXPECT_EQ(t.lease, milliseconds(5000));
  EXPECT_EQ(t.heartbeat, milliseconds(1666));
  EXPECT_EQ(t.leader_lease, milliseconds(2500));
  EXPECT_EQ(t.leader_tick, milliseconds(200));
  EXPECT_EQ(t.registration_wait, milliseconds(10000));
  // The default Redis budget is half a heartbeat, not the 5 s it used to be.
  EXPECT_EQ(t.store.retry_timeout, milliseconds(833));
  EXPECT_EQ(t.store.command_timeout, milliseconds(833));
  EXPECT_LE(t.store.connect_timeout, milliseconds(833));
  EXPECT_EQ(t.store_call_limit, milliseconds(1666));
}

TEST(AgentTimingTest, ShortLeaseHasAFasterTick) {
  LeaseTiming t = derive_lease_timing(milliseconds(300), std::nullopt);
  EXPECT_EQ(t.heartbeat, milliseconds(100));
  EXPECT_EQ(t.leader_lease, milliseconds(150));
  EXPECT_EQ(t.leader_tick, milliseconds(30));
  EXPECT_EQ(t.store.retry_timeout, milliseconds(50));
}

// For every lease, with the derived Redis timeout or any explicit one that is accepted, one store
// call (at most 2 x the retry budget) fits in a heartbeat interval, and the leader lease outlives
// two heartbeats' worth of failed calls less than a heartbeat.
TEST(AgentTimingTest, StoreCallsAlwaysFitInAHeartbeat) {
  for (int lease = 300; lease <= 600000; lease += lease < 10000 ? 7 : 997) {
    LeaseTiming t = derive_lease_timing(milliseconds(lease), std::nullopt);
    ASSERT_LE(t.store_call_limit, t.heartbeat) << lease;
    ASSERT_LE(2 * t.store.retry_timeout, t.heartbeat) << lease;
    ASSERT_LE(t.store.command_timeout, t.store.retry_timeout) << lease;
    ASSERT_LE(t.store.connect_timeout, t.store.retry_timeout) << lease;
    ASSERT_GE(t.store.retry_timeout, milliseconds(1)) << lease;
    ASSERT_LT(t.heartbeat, t.leader_lease) << lease;
    for (int timeout : {1, 100, 1000, 5000, 60000}) {
      try {
        LeaseTiming given = derive_lease_timing(milliseconds(lease), milliseconds(timeout));
        ASSERT_LE(given.store_call_limit, given.heartbeat) << lease << " " << timeout;
        ASSERT_EQ(given.store.retry_timeout, milliseconds(timeout));
      } catch (const InvalidArgument&) {
        ASSERT_GT(2 * timeout, lease / 3) << lease << " " << timeout;
      }
    }
  }
}

TEST(AgentTimingTest, RefusesARedisTimeoutThatDoesNotFitInAHeartbeat) {
  // The old defaults: --redis-timeout 5000 with --lease-ms 5000.
  try {
    derive_lease_timing(milliseconds(5000), milliseconds(5000));
    FAIL() << "accepted --redis-timeout 5000 with --lease-ms 5000";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--redis-timeout 5000"), std::string::npos) << message;
    EXPECT_NE(message.find("--lease-ms 5000"), std::string::npos) << message;
    EXPECT_NE(message.find("at most 833"), std::string::npos) << message;
    EXPECT_NE(message.find("--lease-ms at least 30000"), std::string::npos) << message;
  }
  EXPECT_THROW(derive_lease_timing(milliseconds(5000), milliseconds(834)), InvalidArgument);
  LeaseTiming fits = derive_lease_timing(milliseconds(5000), milliseconds(833));
  EXPECT_EQ(fits.store.retry_timeout, milliseconds(833));
  EXPECT_EQ(fits.store.command_timeout, milliseconds(833));
  // The suggested lease is accepted.
  EXPECT_NO_THROW(derive_lease_timing(milliseconds(30000), milliseconds(5000)));
}

TEST(AgentTimingTest, RefusesALeaseOutOfRange) {
  for (int lease : {0, 299, 600001}) {
    try {
      derive_lease_timing(milliseconds(lease), std::nullopt);
      FAIL() << "accepted --lease-ms " << lease;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--lease-ms " + std::to_string(lease)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hdp::elastic
