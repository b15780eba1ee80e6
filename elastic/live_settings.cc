#include "elastic/live_settings.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "common/error.h"
#include "common/text.h"
#include "elastic/json_fields.h"

namespace hdp::elastic {
namespace {

using namespace json_fields;

template <auto Field>
double get_number(const LiveValues& v) {
  return static_cast<double>(v.*Field);
}
template <auto Field>
void set_number(LiveValues& v, double value) {
  using T = std::remove_reference_t<decltype(v.*Field)>;
  v.*Field = static_cast<T>(value);
}

// The cool-down is kept in milliseconds and set in seconds; its maximum is raised to it when
// below (the flags' maximum otherwise: values in force are always the flags' with overrides).
double get_cooldown_s(const LiveValues& v) { return static_cast<double>(v.cooldown.base_ms) / 1000.0; }
void set_cooldown_s(LiveValues& v, double seconds) {
  v.cooldown.base_ms = std::max<std::int64_t>(1, std::llround(seconds * 1000));
  v.cooldown.max_ms = std::max(v.cooldown.max_ms, v.cooldown.base_ms);
}

// The one table of live settings.
constexpr LiveSetting kLiveSettings[] = {
    {"straggler_threshold", SettingKind::kReal, 0, 1, true, "--straggler-threshold",
     get_number<&LiveValues::straggler_threshold>, set_number<&LiveValues::straggler_threshold>},
    {"straggler_strikes", SettingKind::kInteger, 1, 1000, false, "--straggler-strikes",
     get_number<&LiveValues::straggler_strikes>, set_number<&LiveValues::straggler_strikes>},
    {"evict_stragglers", SettingKind::kBoolean, 0, 1, false, "--evict-stragglers",
     get_number<&LiveValues::evict_stragglers>, [](LiveValues& v, double value) { v.evict_stragglers = value != 0; }},
    {"evict_cooldown_s", SettingKind::kReal, 0.001, 3.15e7, false, "--evict-cooldown-s", get_cooldown_s, set_cooldown_s},
    {"checkpoint_every", SettingKind::kInteger, 1, 1e9, false, "--checkpoint-every",
     get_number<&LiveValues::checkpoint_every>, set_number<&LiveValues::checkpoint_every>},
    {"log_every", SettingKind::kInteger, 1, 1e9, false, "--log-every", get_number<&LiveValues::log_every>,
     set_number<&LiveValues::log_every>},
};

const LiveSetting* find(LiveTable table, std::string_view name) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const LiveSetting& s) { return s.name == name; });
  return it == table.end() ? nullptr : &*it;
}

// The range as a person reads it: "a number in (0, 1)", "an integer in [1, 1000]".
std::string range_text(const LiveSetting& s) {
  if (s.kind == SettingKind::kBoolean) return "true or false";
  char text[96];
  if (s.kind == SettingKind::kInteger) {
    std::snprintf(text, sizeof text, "an integer in [%.0f, %.0f]", s.low, s.high);
  } else {
    std::snprintf(text, sizeof text, s.open ? "a number in (%g, %g)" : "a number in [%g, %g]", s.low, s.high);
  }
  return text;
}

bool in_range(const LiveSetting& s, double value) {
  if (!std::isfinite(value)) return false;
  if (s.kind == SettingKind::kInteger && value != std::floor(value)) return false;
  return s.open ? value > s.low && value < s.high : value >= s.low && value <= s.high;
}

// A value as the `settings` key and the descriptions write it.
json to_json(const LiveSetting& s, double value) {
  if (s.kind == SettingKind::kBoolean) return value != 0;
  if (s.kind == SettingKind::kInteger) return static_cast<std::int64_t>(value);
  return value;
}

// A value as the line of the values in force writes it (%g for reals, as --log-every's line did).
std::string value_text(const LiveSetting& s, double value) {
  if (s.kind != SettingKind::kReal) return to_json(s, value).dump();
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

LiveTable live_settings() { return kLiveSettings; }

std::optional<double> LiveSettings::value(std::string_view name) const {
  const auto it = values.find(name);
  return it == values.end() ? std::nullopt : std::optional<double>(it->second);
}

std::string LiveSettings::describe(LiveTable table) const {
  std::vector<std::string> parts;
  for (const LiveSetting& s : table) {
    if (const auto v = value(s.name)) parts.push_back(std::string(s.name) + "=" + to_json(s, *v).dump());
  }
  return join(parts, ", ");
}

std::vector<std::string> setting_names(LiveTable table) {
  std::vector<std::string> names;
  for (const LiveSetting& s : table) names.emplace_back(s.name);
  return names;
}

std::string encode(const LiveSettings& settings, LiveTable table) {
  if (settings.empty()) return {};
  json value = json::object();
  for (const LiveSetting& s : table) {
    if (const auto v = settings.value(s.name)) value[std::string(s.name)] = to_json(s, *v);
  }
  return value.dump();
}

LiveSettings decode_settings(std::string_view text, std::string_view what, LiveTable table) {
  const json value = parse(text, what);
  LiveSettings settings;
  for (const auto& [name, v] : value.items()) {
    const LiveSetting* s = find(table, name);
    if (!s) bad(what, "unknown setting " + quote_value(name));
    double number = 0;
    if (s->kind == SettingKind::kBoolean) {
      if (!v.is_boolean()) bad(what, "field '" + name + "' is not true or false");
      number = v.get<bool>() ? 1 : 0;
    } else {
      if (!v.is_number() || (s->kind == SettingKind::kInteger && !v.is_number_integer())) {
        bad(what, "field '" + name + "' is not " + range_text(*s));
      }
      number = v.get<double>();
      if (!in_range(*s, number)) bad(what, "field '" + name + "' is not " + range_text(*s));
    }
    settings.values[name] = number;
  }
  return settings;
}

void assign_setting(LiveSettings& settings, std::string_view assignment, LiveTable table) {
  const auto equals = assignment.find('=');
  const std::string name(assignment.substr(0, equals));
  const LiveSetting* s = equals == std::string_view::npos ? nullptr : find(table, name);
  if (!s) {
    throw InvalidArgument("expected NAME=VALUE with NAME one of " + join(setting_names(table), ", ") + ", got " +
                          quote_value(std::string(assignment)));
  }
  const std::string text(assignment.substr(equals + 1));
  double number = 0;
  bool ok = false;
  if (s->kind == SettingKind::kBoolean) {
    ok = text == "true" || text == "on" || text == "1" || text == "false" || text == "off" || text == "0";
    number = text == "true" || text == "on" || text == "1" ? 1 : 0;
  } else {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, number);
    ok = !text.empty() && ec == std::errc() && ptr == end && in_range(*s, number);
  }
  if (!ok) throw InvalidArgument(name + " must be " + range_text(*s) + ", got " + quote_value(text));
  settings.values[name] = number;
}

LiveValues in_force(LiveValues flags, const LiveSettings& settings, LiveTable table) {
  for (const LiveSetting& s : table) {
    if (const auto v = settings.value(s.name)) s.set(flags, *v);
  }
  return flags;
}

std::string describe(const LiveValues& values, LiveTable table) {
  return join(table, ", ", [&](const LiveSetting& s) { return std::string(s.name) + "=" + value_text(s, s.get(values)); });
}

std::vector<std::int64_t> to_row(const LiveValues& values, LiveTable table) {
  std::vector<std::int64_t> row;
  for (const LiveSetting& s : table) row.push_back(std::bit_cast<std::int64_t>(s.get(values)));
  return row;
}

LiveValues from_row(LiveValues flags, std::span<const std::int64_t> row, LiveTable table) {
  if (row.size() != table.size()) {
    throw InvariantViolation("a row of " + std::to_string(row.size()) + " live settings, the table has " +
                             std::to_string(table.size()));
  }
  for (std::size_t i = 0; i < table.size(); ++i) table[i].set(flags, std::bit_cast<double>(row[i]));
  return flags;
}

}  // namespace hdp::elastic
