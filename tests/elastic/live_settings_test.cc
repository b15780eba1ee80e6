// elastic/live_settings.h: the one table of live settings, and everything that reads it: the
// `settings` key's encoding and checks, `hdp config set`'s assignments, the values in force
// (flags with overrides), their description and the step boundary's row.
#include "elastic/live_settings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace hdp::elastic {
namespace {

TEST(LiveSettings, TheValuesInForceAreDescribedInTheTablesOrder) {
  EXPECT_EQ(describe(LiveValues{}),
            "straggler_threshold=0.35, straggler_strikes=5, evict_stragglers=true, evict_cooldown_s=60, "
            "checkpoint_every=50, log_every=1");
  EXPECT_EQ(setting_names(), (std::vector<std::string>{"straggler_threshold", "straggler_strikes", "evict_stragglers",
                                                       "evict_cooldown_s", "checkpoint_every", "log_every"}));
}

TEST(LiveSettings, AssignmentsAreCheckedAgainstTheirKindAndRange) {
  LiveSettings s;
  assign_setting(s, "straggler_threshold=0.5");
  assign_setting(s, "evict_stragglers=off");
  assign_setting(s, "log_every=10");
  EXPECT_EQ(s.describe(), "straggler_threshold=0.5, evict_stragglers=false, log_every=10");
  EXPECT_THROW(assign_setting(s, "straggler_threshold=1"), InvalidArgument);  // (0, 1) is open
  EXPECT_THROW(assign_setting(s, "straggler_strikes=1.5"), InvalidArgument);  // an integer
  EXPECT_THROW(assign_setting(s, "evict_stragglers=maybe"), InvalidArgument);
  EXPECT_THROW(assign_setting(s, "log_every=0"), InvalidArgument);
  try {
    assign_setting(s, "no_such=1");
    FAIL() << "an unknown name was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("straggler_threshold, straggler_strikes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.describe(), "straggler_threshold=0.5, evict_stragglers=false, log_every=10");  // refused: unchanged
}

TEST(LiveSettings, TheKeyRoundTripsAndGarbageIsRefusedNamingTheField) {
  LiveSettings s;
  assign_setting(s, "evict_cooldown_s=2.5");
  assign_setting(s, "checkpoint_every=7");
  const std::string text = encode(s);
  EXPECT_EQ(text, R"({"checkpoint_every":7,"evict_cooldown_s":2.5})");
  EXPECT_EQ(decode_settings(text, "settings").values, s.values);
  EXPECT_EQ(encode(LiveSettings{}), "");
  for (const char* bad : {R"({"log_every":1.5})", R"({"log_every":0})", R"({"evict_stragglers":1})", R"({"x":1})",
                          R"([1])", "not json"}) {
    EXPECT_THROW(decode_settings(bad, "settings"), InvalidArgument) << bad;
  }
}

TEST(LiveSettings, OverridesApplyToTheFlagsAndTheRowGivesTheSameValuesOnEveryRank) {
  LiveValues flags;
  flags.cooldown = {.base_ms = 10'000, .max_ms = 20'000};
  LiveSettings s;
  assign_setting(s, "evict_cooldown_s=30");
  assign_setting(s, "straggler_strikes=9");
  const LiveValues in = in_force(flags, s);
  EXPECT_EQ(in.cooldown.base_ms, 30'000);
  EXPECT_EQ(in.cooldown.max_ms, 30'000);  // raised to the cool-down
  EXPECT_EQ(in.straggler_strikes, 9);
  EXPECT_EQ(in.log_every, flags.log_every);
  // Rank 0 sends its values; a rank that holds other values in force (it joined later) gets the same.
  const std::vector<std::int64_t> row = to_row(in);
  EXPECT_EQ(row.size(), live_settings().size());
  EXPECT_EQ(from_row(flags, row), in);
  EXPECT_EQ(from_row(flags, to_row(flags)), flags);
  EXPECT_THROW(from_row(flags, std::vector<std::int64_t>(row.size() + 1)), InvariantViolation);
}

// A setting is a row of the table: with one more row (a test-only setting, its value kept beside
// the test), the key's checks, `hdp config set`, the values in force, their description and the
// boundary's row take it with no other change.
double test_knob = 4;
TEST(LiveSettings, ATestOnlySettingIsOneRowOfTheTable) {
  std::vector<LiveSetting> table(live_settings().begin(), live_settings().end());
  table.push_back({"test_knob", SettingKind::kInteger, 1, 16, false, "--test-knob",
                   [](const LiveValues&) { return test_knob; }, [](LiveValues&, double v) { test_knob = v; }});
  EXPECT_EQ(setting_names(table).back(), "test_knob");
  LiveSettings s;
  assign_setting(s, "test_knob=12", table);
  EXPECT_THROW(assign_setting(s, "test_knob=17", table), InvalidArgument);
  EXPECT_THROW(assign_setting(s, "test_knob=12"), InvalidArgument);  // not a setting of the real table
  EXPECT_EQ(encode(s, table), R"({"test_knob":12})");
  EXPECT_EQ(decode_settings(encode(s, table), "settings", table).values, s.values);
  EXPECT_THROW(decode_settings(encode(s, table), "settings"), InvalidArgument);
  const LiveValues flags;
  const LiveValues in = in_force(flags, s, table);
  EXPECT_EQ(test_knob, 12);
  EXPECT_NE(describe(in, table).find(", test_knob=12"), std::string::npos) << describe(in, table);
  const std::vector<std::int64_t> row = to_row(in, table);
  EXPECT_EQ(row.size(), live_settings().size() + 1);
  test_knob = 4;
  from_row(flags, row, table);
  EXPECT_EQ(test_knob, 12);  // the row carried it
}

}  // namespace
}  // namespace hdp::elastic
