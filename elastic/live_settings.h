// File: elastic/live_settings.h
//
// The settings `hdp config set` may change while a job trains (docs/operations.md), as one table:
// each row is a setting's name, kind and range, the `hdp train` flag it overrides, and where its
// value lives (a field of LiveValues, which the trainer's configuration is made of). Everything
// that handles live settings reads the table and nothing else: the `settings` key's encoding and
// its checks (`hdp config set`, the job state, the dashboard), the trainer's step boundary (the
// values in force travel as one row, a field per setting) and the line every rank logs.
// Adding a setting is a row in kLiveSettings (live_settings.cc) and, where it is new, its field in
// LiveValues; then its use.
//
// The `settings` key holds overrides: a JSON object of the values set, by name. The values in
// force are the job's flags with each override applied (in_force), computed from the flags every
// time, so that every rank, whenever it joined, holds the same values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/membership.h"

namespace hdp::elastic {

// The values in force of the live settings (the trainer's configuration inherits them; its flags
// set them: --straggler-threshold ...). Defaults are the flags' defaults.
struct LiveValues {
  double straggler_threshold = 0.35;  // a rank slower than this fraction of the median is a straggler
  int straggler_strikes = 5;          // for this many consecutive steps
  bool evict_stragglers = true;       // the leader evicts it (false: the plans only work around it)
  Cooldown cooldown;                  // an evicted node/slot waits this long before it is admitted again
  std::int64_t checkpoint_every = 50; // steps between checkpoints
  int log_every = 1;                  // rank 0 prints one line per this many steps

  bool operator==(const LiveValues&) const = default;
};

enum class SettingKind { kReal, kInteger, kBoolean };

struct LiveSetting {
  std::string_view name;  // as `hdp config set` takes it and the `settings` key holds it
  SettingKind kind;
  double low, high;       // its range, closed unless `open` (booleans: 0 and 1)
  bool open;
  std::string_view flag;  // the `hdp train` flag it overrides
  // Where it lives: its value in `values` as a number, and setting one (already checked).
  double (*get)(const LiveValues& values);
  void (*set)(LiveValues& values, double value);
};

using LiveTable = std::span<const LiveSetting>;

// The table (live_settings.cc).
LiveTable live_settings();

// The overrides in the `settings` key: the values set, by name (each a number of its kind: a
// boolean is 0 or 1).
struct LiveSettings {
  std::map<std::string, double, std::less<>> values;

  bool empty() const { return values.empty(); }
  std::optional<double> value(std::string_view name) const;
  // "name=value, ..." of the values present, in the table's order.
  std::string describe(LiveTable table = live_settings()) const;
};

// The names `hdp config set` takes, in the table's order.
std::vector<std::string> setting_names(LiveTable table = live_settings());
std::string encode(const LiveSettings& settings, LiveTable table = live_settings());
// Throws InvalidArgument naming `what` and the field (an unknown name, a value of the wrong kind
// or out of its range).
LiveSettings decode_settings(std::string_view text, std::string_view what, LiveTable table = live_settings());
// Sets one value from `name=value` (booleans: true/false/on/off/1/0); InvalidArgument naming the
// name and its range, or the names there are.
void assign_setting(LiveSettings& settings, std::string_view assignment, LiveTable table = live_settings());

// `flags` with every override of `settings` applied.
LiveValues in_force(LiveValues flags, const LiveSettings& settings, LiveTable table = live_settings());
// Every setting's value in force, "name=value, ..." in the table's order:
// "straggler_threshold=0.35, straggler_strikes=5, evict_stragglers=true, evict_cooldown_s=60,
// checkpoint_every=50, log_every=1".
std::string describe(const LiveValues& values, LiveTable table = live_settings());

// The values in force as integers (a field per row: the number's bits), and back: `flags` with
// each row's value set. A row made on one rank gives the same values on every rank.
std::vector<std::int64_t> to_row(const LiveValues& values, LiveTable table = live_settings());
LiveValues from_row(LiveValues flags, std::span<const std::int64_t> row, LiveTable table = live_settings());

}  // namespace hdp::elastic
