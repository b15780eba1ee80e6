#include "elastic/backoff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "common/error.h"

namespace hdp::elastic {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, WithoutJitterDoublesUntilTheCap) {
  Backoff backoff({.initial = milliseconds(50), .max = milliseconds(500), .multiplier = 2.0, .jitter = 0.0});
  std::vector<long> seen;
  for (int i = 0; i < 7; ++i) seen.push_back(backoff.next().count());
  EXPECT_EQ(seen, (std::vector<long>{50, 100, 200, 400, 500, 500, 500}));
  EXPECT_EQ(backoff.attempts(), 7);
}

TEST(Backoff, ResetStartsOver) {
  Backoff backoff({.initial = milliseconds(10), .max = milliseconds(1000), .multiplier = 3.0, .jitter = 0.0});
  backoff.next();
  backoff.next();
  backoff.reset();
  EXPECT_EQ(backoff.next(), milliseconds(10));
}

TEST(Backoff, JitterStaysWithinItsBandAndNeverPassesTheCap) {
  Backoff backoff({.initial = milliseconds(100), .max = milliseconds(1000), .multiplier = 2.0, .jitter = 0.5}, 7);
  double nominal = 100;
  std::set<long> distinct;
  for (int i = 0; i < 200; ++i) {
    const long got = backoff.next().count();
    const double expected = std::min(nominal, 1000.0);
    EXPECT_GE(got, std::floor(expected * 0.5)) << "attempt " << i;
    EXPECT_LE(got, 1000) << "attempt " << i;
    EXPECT_LE(got, std::ceil(expected * 1.5)) << "attempt " << i;
    distinct.insert(got);
    nominal *= 2;
  }
  // Jitter actually spreads the capped intervals (it is what keeps 1,000 agents from reconnecting in lockstep).
  EXPECT_GT(distinct.size(), 50u);
}

TEST(Backoff, SameSeedSameSequence) {
  BackoffOptions options{.initial = milliseconds(20), .max = milliseconds(5000), .multiplier = 1.5, .jitter = 0.3};
  Backoff a(options, 99), b(options, 99);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.next(), b.next());
}

TEST(Backoff, HugeAttemptCountsDoNotOverflow) {
  Backoff backoff({.initial = milliseconds(1), .max = milliseconds(2000), .multiplier = 10.0, .jitter = 0.0});
  for (int i = 0; i < 2000; ++i) backoff.next();
  EXPECT_EQ(backoff.next(), milliseconds(2000));
}

TEST(Backoff, RejectsBadOptions) {
  EXPECT_THROW(Backoff({.initial = milliseconds(0)}), InvalidArgument);
  EXPECT_THROW(Backoff({.initial = milliseconds(100), .max = milliseconds(50)}), InvalidArgument);
  EXPECT_THROW(Backoff({.multiplier = 0.5}), InvalidArgument);
  EXPECT_THROW(Backoff({.jitter = 1.5}), InvalidArgument);
  EXPECT_THROW(Backoff({.jitter = std::nan("")}), InvalidArgument);
}

}  // namespace
}  // namespace hdp::elastic
