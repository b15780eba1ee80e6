// File: elastic/eviction_policy.cc
//
// The leader's evictions (eviction_policy.h): new ones from straggler requests and abandon
// reports, which take effect, and their events.
#include "elastic/eviction_policy.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::elastic {
namespace {

bool has_slot(const Member& member, int slot) {
  return std::find(member.slots.begin(), member.slots.end(), slot) != member.slots.end();
}

// New evictions of node/slots of the current generation.
struct Collector {
  const Generation& current;
  const Evictions& evictions;
  std::int64_t now_ms;
  NewEvictions fresh;

  void evict(const std::string& node, int slot, const std::string& reason, double speed, const Cooldown& cooldown,
             std::int64_t step) {
    auto member = std::find_if(current.members.begin(), current.members.end(),
                               [&](const Member& m) { return m.node == node; });
    if (member == current.members.end() || !has_slot(*member, slot)) return;  // not in this generation (any more)
    const std::string key = eviction_key(node, slot);
    auto before = evictions.find(key);
    const std::int64_t previous = before == evictions.end() ? 0 : before->second.count;
    fresh.steps[key] = step;
    fresh.evictions.push_back(Eviction{.node = node,
                                       .incarnation = member->incarnation,
                                       .slot = slot,
                                       .count = previous + 1,
                                       .until_ms = now_ms + cooldown.after(previous),
                                       .reason = reason,
                                       .speed = speed});
  }
};

// Which members of broken generation `current` said they abandoned it, and whether on a timeout,
// by rank; a report that does not decode is logged and left out.
std::map<int, AbandonReport> abandon_reports(Store& store, const Generation& current) {
  const std::string key = keys::abandoned(current.number);
  std::map<int, AbandonReport> reports;
  for (const auto& [field, value] : store.hash_get_all(key)) {
    try {
      const auto rank = decode_counter(field, key, current.world_size() - 1);
      reports.emplace(static_cast<int>(rank), decode_abandon_report(value, key));
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring an abandon report: {}", e.what());
    }
  }
  return reports;
}

Fields event_fields(const Eviction& e) {
  return {{"node", e.node}, {"slot", std::to_string(e.slot)}, {"reason", e.reason}, {"speed", std::to_string(e.speed)}};
}

}  // namespace

Evictions EvictionPolicy::read_record(const std::optional<std::string>& value) {
  if (!value) return {};
  auto record = bad_record_.decode(
      *value, [&] { return decode_evictions(*value, keys::kEvictions); },
      [](const InvalidArgument& e) { log()->warn("ignoring the evictions record: {}", e.what()); });
  return record ? std::move(*record) : Evictions{};
}

std::optional<NewEvictions> EvictionPolicy::new_evictions(Store& store, const Generation& current, bool broken,
                                                          const std::optional<std::string>& requests,
                                                          const Evictions& evictions) {
  Collector collector{current, evictions, now_ms(), {}};
  if (requests && current.number > 0 && requests_handled_ != current.number) {
    try {
      for (const auto& r : decode_straggler_requests(*requests, keys::stragglers(current.number))) {
        collector.evict(r.node, r.slot, "slow", r.speed, r.cooldown, r.step);
      }
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring the straggler requests: {}", e.what());
      requests_handled_ = current.number;
    }
  }
  if (!broken) return std::move(collector.fresh);
  const std::map<int, AbandonReport> reports = abandon_reports(store, current);
  const auto timed_out = std::find_if(reports.begin(), reports.end(), [](const auto& r) { return r.second.timed_out; });
  if (timed_out == reports.end()) return std::move(collector.fresh);  // a lost peer, not a hang: nobody to blame
  std::int64_t wait_ms = 0;
  for (const auto& [rank, report] : reports) wait_ms = std::max(wait_ms, report.timeout_ms);
  const auto wait = std::min<Clock::duration>(std::chrono::milliseconds(wait_ms), kHungReportWait);
  if (!broken_seen_ || broken_seen_->first != current.number) broken_seen_.emplace(current.number, Clock::now());
  const int silent = current.world_size() - static_cast<int>(reports.size());
  if (silent > 1 && Clock::now() - broken_seen_->second < wait) return std::nullopt;  // the live ones report soon
  for (const auto& member : current.members) {
    for (std::size_t i = 0; i < member.slots.size(); ++i) {
      const int rank = member.first_rank + static_cast<int>(i);
      if (reports.contains(rank)) continue;
      log()->warn("generation {} broke on a timeout and rank {} ({}/{}) never reported: evicting it as hung",
                  current.number, rank, member.node, member.slots[i]);
      collector.evict(member.node, member.slots[i], "timeout", 0, timed_out->second.cooldown, -1);
    }
  }
  return std::move(collector.fresh);
}

EvictionsApplied apply_evictions(const Evictions& evictions, const NewEvictions& fresh, std::int64_t now_ms,
                                 int min_nodes, const NodesWithout& nodes_without) {
  EvictionsApplied applied;
  applied.record = evictions;
  for (const auto& [key, e] : evictions) {
    if (e.until_ms > now_ms) applied.out.insert(key);
  }
  std::size_t nodes = nodes_without(applied.out);
  for (const Eviction& e : fresh.evictions) {
    const std::string key = eviction_key(e.node, e.slot);
    auto with = applied.out;
    with.insert(key);
    const std::size_t left = nodes_without(with);
    if (static_cast<int>(left) < min_nodes) {
      applied.outcomes.push_back({.kind = EvictionOutcome::Kind::kRefused, .eviction = e, .nodes_left = left});
      continue;
    }
    applied.out = std::move(with);
    nodes = left;
    applied.record[key] = e;
    const auto step = fresh.steps.find(key);
    applied.outcomes.push_back({.kind = EvictionOutcome::Kind::kEvicted,
                                .eviction = e,
                                .step = step == fresh.steps.end() ? -1 : step->second});
  }
  // A cool-down never holds the job below its minimum: those in a cool-down come back early.
  if (static_cast<int>(nodes) < min_nodes && !applied.out.empty() &&
      static_cast<int>(nodes_without({})) >= min_nodes) {
    applied.out.clear();
    applied.cooldowns_cut = true;
  }
  return applied;
}

void note_readmissions(EvictionsApplied& applied, const Evictions& before, const std::vector<Member>& members) {
  // Evicted workers back in: readmitted, once their generation is published.
  for (auto& [key, e] : applied.record) {
    if (e.readmitted || applied.out.contains(key)) continue;
    const bool in = std::any_of(members.begin(), members.end(),
                                [&](const Member& m) { return m.node == e.node && has_slot(m, e.slot); });
    if (!in) continue;
    e.readmitted = true;
    applied.outcomes.push_back({.kind = EvictionOutcome::Kind::kReadmitted, .eviction = e});
  }
  applied.record_changed =
      applied.record.size() != before.size() ||
      std::any_of(applied.record.begin(), applied.record.end(), [&](const auto& kv) {
        auto it = before.find(kv.first);
        return it == before.end() || it->second.count != kv.second.count ||
               it->second.readmitted != kv.second.readmitted;
      });
}

std::vector<Write> eviction_writes(const EvictionsApplied& applied, std::int64_t now_ms, int min_nodes) {
  std::vector<Write> writes;
  for (const auto& [kind, e, step, nodes_left] : applied.outcomes) {
    const std::string key = eviction_key(e.node, e.slot);
    Fields fields = event_fields(e);
    if (kind == EvictionOutcome::Kind::kRefused) {
      log()->warn("keeping {} ({}): evicting it would leave {} node(s), below the minimum of {}", key, e.reason,
                  nodes_left, min_nodes);
      fields.emplace_back("why", "the job is at its minimum size");
      writes.push_back(event_write("evict_refused", std::move(fields)));
    } else if (kind == EvictionOutcome::Kind::kEvicted) {
      log()->warn("evicting {} ({}{}) for {:.1f} s (eviction {} of this node/slot)", key, e.reason,
                  e.reason == "slow" ? ", speed " + std::to_string(e.speed) : std::string(),
                  (e.until_ms - now_ms) / 1000.0, e.count);
      fields.insert(fields.end(), {{"count", std::to_string(e.count)},
                                   {"step", step >= 0 ? std::to_string(step) : "-"},
                                   {"cooldown_s", std::to_string((e.until_ms - now_ms) / 1000.0)},
                                   {"until_ms", std::to_string(e.until_ms)}});
      writes.push_back(event_write("evict", std::move(fields)));
    } else {
      writes.push_back(event_write("readmit", {{"node", e.node}, {"slot", std::to_string(e.slot)},
                                               {"count", std::to_string(e.count)}}));
    }
  }
  if (applied.cooldowns_cut) {
    log()->warn("admitting evicted workers before their cool-down ends: the job is below its minimum of {} node(s)",
                min_nodes);
  }
  if (applied.record_changed) writes.push_back(Write::set(keys::kEvictions, encode(applied.record)));
  return writes;
}

}  // namespace hdp::elastic
