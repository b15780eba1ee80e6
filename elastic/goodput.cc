#include "elastic/goodput.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace hdp::elastic {
namespace {

template <typename Number>
std::optional<Number> number_field(const StateFields& fields, const char* name) {
  auto it = fields.find(name);
  if (it == fields.end()) return std::nullopt;
  Number value{};
  const std::string& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<Number>) {
    if (!std::isfinite(value)) return std::nullopt;
  }
  return value;
}

StateFields to_map(const Fields& fields) { return StateFields(fields.begin(), fields.end()); }

std::string format(const char* pattern, double value) {
  char text[48];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

bool terminal(const StateFields& state) {
  auto it = state.find("status");
  return it != state.end() && (it->second == "completed" || it->second == "stopped" || it->second == "failed");
}

}  // namespace

GoodputTotals read_goodput_totals(const StateFields& state) {
  GoodputTotals t;
  const auto started = number_field<std::int64_t>(state, goodput::kStartedAtMs);
  const auto furthest = number_field<std::int64_t>(state, goodput::kFurthestStep);
  const auto step = number_field<std::int64_t>(state, "step");
  t.furthest_step = std::max(furthest.value_or(-1), step.value_or(-1));
  if (!started || *started < 0) return t;
  t.started_at_ms = *started;
  t.productive_ms = std::max(0.0, number_field<double>(state, goodput::kProductiveMs).value_or(0));
  t.recomputed_ms = std::max(0.0, number_field<double>(state, goodput::kRecomputedMs).value_or(0));
  t.recomputed_steps = std::max<std::int64_t>(0, number_field<std::int64_t>(state, goodput::kRecomputedSteps).value_or(0));
  t.idle_ms = std::max<std::int64_t>(0, number_field<std::int64_t>(state, goodput::kIdleMs).value_or(0));
  return t;
}

std::optional<std::int64_t> resumed_idle_ms(const StateFields& state, std::int64_t now_ms) {
  const auto status = state.find("status");
  const auto stopped_at = number_field<std::int64_t>(state, "updated_at_ms");
  if (status == state.end() || status->second != "stopped" || !stopped_at) return std::nullopt;
  const std::int64_t held = std::max<std::int64_t>(0, number_field<std::int64_t>(state, goodput::kIdleMs).value_or(0));
  return held + std::max<std::int64_t>(0, now_ms - *stopped_at);
}

double ettr_of(double productive_ms, double wall_ms) {
  if (wall_ms <= 0 || productive_ms >= wall_ms) return 1;
  // Positive: a figure rounded to 0 would say nothing trained (a step was, or none is accounted).
  return std::max(productive_ms / wall_ms, 1e-6);
}

void GoodputAccount::seed(const StateFields& state) {
  const GoodputTotals stored = read_goodput_totals(state);
  const bool own_newer = totals_.started_at_ms >= 0 && stored.started_at_ms == totals_.started_at_ms &&
                         stored.furthest_step <= totals_.furthest_step &&
                         stored.recomputed_steps <= totals_.recomputed_steps &&
                         stored.productive_ms <= totals_.productive_ms + 0.05;  // written to 0.1 ms
  if (!own_newer) totals_ = stored;
}

bool GoodputAccount::step(std::int64_t step, double step_ms, std::int64_t now_ms) {
  step_ms = std::isfinite(step_ms) ? std::max(step_ms, 0.0) : 0.0;
  if (totals_.started_at_ms < 0) {
    totals_.started_at_ms = std::max<std::int64_t>(0, now_ms - static_cast<std::int64_t>(std::llround(step_ms)));
  }
  if (step <= totals_.furthest_step) {
    ++totals_.recomputed_steps;
    totals_.recomputed_ms += step_ms;
    return true;
  }
  totals_.productive_ms += step_ms;
  totals_.furthest_step = step;
  return false;
}

double GoodputAccount::ettr(std::int64_t now_ms) const {
  if (totals_.started_at_ms < 0) return 1;
  return ettr_of(totals_.productive_ms, static_cast<double>(now_ms - totals_.started_at_ms - totals_.idle_ms));
}

Fields GoodputAccount::fields(std::int64_t now_ms) const {
  if (totals_.started_at_ms < 0) return {};
  return {{goodput::kStartedAtMs, std::to_string(totals_.started_at_ms)},
          {goodput::kFurthestStep, std::to_string(std::max<std::int64_t>(totals_.furthest_step, 0))},
          {goodput::kRecomputedSteps, std::to_string(totals_.recomputed_steps)},
          {goodput::kProductiveMs, format("%.1f", totals_.productive_ms)},
          {goodput::kRecomputedMs, format("%.1f", totals_.recomputed_ms)},
          {goodput::kIdleMs, std::to_string(totals_.idle_ms)},
          {goodput::kEttr, format("%.4f", ettr(now_ms))}};
}

std::optional<GoodputFigures> goodput_figures(const StateFields& state, std::int64_t now_ms) {
  const GoodputTotals t = read_goodput_totals(state);
  if (t.started_at_ms < 0) return std::nullopt;
  // A job that ended stopped its clock at its last write.
  const std::int64_t end = terminal(state) ? number_field<std::int64_t>(state, "updated_at_ms").value_or(now_ms) : now_ms;
  GoodputFigures f;
  f.productive_ms = t.productive_ms;
  f.wall_ms = std::max(static_cast<double>(end - t.started_at_ms - t.idle_ms), t.productive_ms);
  f.lost_ms = f.wall_ms - f.productive_ms;
  f.recomputed_ms = t.recomputed_ms;
  f.recomputed_steps = t.recomputed_steps;
  f.ettr = ettr_of(f.productive_ms, f.wall_ms);
  return f;
}

std::string duration_text(double ms) {
  const auto seconds = static_cast<std::int64_t>(std::max(ms, 0.0) / 1000.0);
  char text[64];
  if (ms < 60000) {
    std::snprintf(text, sizeof text, "%.1f s", std::max(ms, 0.0) / 1000.0);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof text, "%lld min %02lld s", static_cast<long long>(seconds / 60),
                  static_cast<long long>(seconds % 60));
  } else {
    std::snprintf(text, sizeof text, "%lld h %02lld min", static_cast<long long>(seconds / 3600),
                  static_cast<long long>(seconds % 3600 / 60));
  }
  return text;
}

std::string goodput_text(const GoodputFigures& f) {
  return "ETTR " + format("%.2f", f.ettr) + " (productive " + duration_text(f.productive_ms) + " of " +
         duration_text(f.wall_ms) + "; " + std::to_string(f.recomputed_steps) + " step" +
         (f.recomputed_steps == 1 ? "" : "s") + " computed twice)";
}

std::vector<RecoveryRecord> recent_recoveries(const std::vector<StreamEntry>& events, std::size_t count) {
  std::map<std::int64_t, std::string> sources;  // by generation: the `continue`/`restore` event's source
  std::vector<RecoveryRecord> out;
  for (const auto& entry : events) {
    const StateFields f = to_map(entry.fields);
    auto type = f.find("type");
    if (type == f.end()) continue;
    const std::int64_t generation = number_field<std::int64_t>(f, "generation").value_or(0);
    auto source = f.find("source");
    if (type->second == "continue" || type->second == "restore") {
      if (source != f.end()) sources[generation] = source->second;
      continue;
    }
    if (type->second != "recovered") continue;
    RecoveryRecord r;
    r.generation = generation;
    r.kind = source != f.end()        ? source->second
             : sources.count(generation) ? sources[generation]
                                         : std::string("unknown");
    r.seconds = number_field<double>(f, "seconds").value_or(0);
    r.lost_steps = number_field<std::int64_t>(f, "lost_steps").value_or(0);
    r.step = number_field<std::int64_t>(f, "step").value_or(0);
    r.time_ms = number_field<std::int64_t>(f, "time_ms").value_or(0);
    out.push_back(std::move(r));
  }
  if (out.size() > count) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(count));
  return out;
}

}  // namespace hdp::elastic
