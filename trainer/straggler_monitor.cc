#include "trainer/straggler_monitor.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "mesh/comm/gather_rows.h"

namespace hdp::trainer {

StragglerMonitor::StragglerMonitor(const TrainerConfig& config, std::shared_ptr<elastic::Store> store, EventLog& events)
    : config_(config),
      store_(std::move(store)),
      events_(events),
      speeds_({.slow_below = config.straggler_threshold}) {}

void StragglerMonitor::start_generation(const elastic::Membership& m, mesh::Communicator& comm, int min_nodes) {
  workers_.clear();
  places_.clear();
  for (const auto& member : m.record.members) {
    for (int slot : member.slots) {
      workers_.push_back(member.node + "/" + member.incarnation + "/" + std::to_string(slot));
      places_.push_back({member.node, member.incarnation, slot});
    }
  }
  constexpr std::size_t kFields = 5;
  const mesh::SpeedRecord mine = speeds_.record(workers_[static_cast<std::size_t>(m.rank)]);
  const std::vector<double> all = mesh::allgather_rows<double>(
      comm, {mine.recent[0], mine.recent[1], mine.recent[2], mine.planned, mine.strikes});
  for (int r = 0; r < m.world_size; ++r) {
    const double* f = all.data() + kFields * static_cast<std::size_t>(r);
    // Strikes count within a generation: a resize (an eviction among them) starts them again.
    speeds_.restore(workers_[static_cast<std::size_t>(r)], {.recent = {f[0], f[1], f[2]}, .planned = f[3], .strikes = 0});
  }
  last_compute_ms_ = -1;
  last_work_.clear();
  relative_.assign(static_cast<std::size_t>(m.world_size), 1.0);
  eviction_requested_ = false;
  kept_ = false;
  prior_evictions_.clear();
  min_nodes_ = min_nodes;
  if (m.rank != 0) return;
  try {
    if (const auto value = store_->get(elastic::keys::kEvictions)) {
      for (const auto& [key, e] : elastic::decode_evictions(*value, elastic::keys::kEvictions)) {
        prior_evictions_[key] = e.count;
      }
    }
  } catch (const Error& e) {
    log()->warn("cannot read the evictions record ({}): counting every worker as never evicted", e.what());
  }
}

std::vector<double> StragglerMonitor::plan_speeds(int world_size) const {
  return config_.speed_aware ? speeds_.plan_speeds(workers_) : std::vector<double>(static_cast<std::size_t>(world_size), 1.0);
}

void StragglerMonitor::planned(const mesh::PlannedStep& step) {
  last_work_ = step.work_ms;
  last_plan_speeds_ = step.request.speeds;
}

std::int64_t StragglerMonitor::compute_us() const {
  return last_compute_ms_ < 0 ? -1 : std::llround(last_compute_ms_ * 1000);
}

void StragglerMonitor::observe(const elastic::Membership& m, std::int64_t step, const std::vector<std::int64_t>& compute_us) {
  if (last_work_.empty()) return;  // the generation's first step: nothing measured yet
  const int world = m.world_size;
  for (int r = 0; r < world; ++r) {
    const double planned = last_work_[static_cast<std::size_t>(r)];
    const double measured =
        std::max(static_cast<double>(compute_us[static_cast<std::size_t>(r)]) / 1000.0, planned > 0 ? 1e-3 : 0.0);
    speeds_.report(workers_[static_cast<std::size_t>(r)], planned, measured);
  }
  relative_ = speeds_.end_step(workers_);
  if (m.rank != 0) return;
  std::vector<elastic::StragglerRequest> requests;
  for (int r = 0; r < world; ++r) {
    const std::string& worker = workers_[static_cast<std::size_t>(r)];
    const Place& p = places_[static_cast<std::size_t>(r)];
    const std::int64_t strikes = speeds_.strikes(worker);
    const double speed = relative_[static_cast<std::size_t>(r)];
    if (strikes == 1) {
      log()->warn("step {}: rank {} ({}/{}) is a straggler: {:.2f} of the median speed", step, r, p.node, p.slot, speed);
      events_.record(m, "straggler", {{"rank", std::to_string(r)},
                                      {"node", p.node},
                                      {"slot", std::to_string(p.slot)},
                                      {"speed", fixed3(speed)},
                                      {"step", std::to_string(step)}});
    }
    auto prior = prior_evictions_.find(elastic::eviction_key(p.node, p.slot));
    const std::int64_t before = prior == prior_evictions_.end() ? 0 : prior->second;
    const std::int64_t needed = std::int64_t{config_.straggler_strikes} << std::min<std::int64_t>(before, 20);
    if (strikes >= needed) {
      requests.push_back({.node = p.node, .incarnation = p.incarnation, .slot = p.slot, .rank = r, .speed = speed,
                          .step = step, .cooldown = config_.cooldown});
    }
  }
  if (requests.empty() || !config_.evict_stragglers || eviction_requested_ || kept_) return;
  // Never below the job's minimum number of nodes: then the slow ranks stay, planned at their
  // speed (the leader refuses such an eviction too; asking would only cost a generation).
  std::set<std::string> remaining;
  for (std::size_t r = 0; r < places_.size(); ++r) {
    const bool leaving = std::any_of(requests.begin(), requests.end(), [&](const auto& q) { return q.rank == static_cast<int>(r); });
    if (!leaving) remaining.insert(places_[r].node);
  }
  if (static_cast<int>(remaining.size()) < min_nodes_) {
    kept_ = true;
    for (const auto& r : requests) {
      log()->warn("step {}: keeping straggler rank {} ({}/{}): evicting it would leave {} node(s), below the job's "
                  "minimum of {}",
                  step, r.rank, r.node, r.slot, remaining.size(), min_nodes_);
      events_.record(m, "evict_refused", {{"node", r.node},
                                          {"slot", std::to_string(r.slot)},
                                          {"reason", "slow"},
                                          {"speed", fixed3(r.speed)},
                                          {"why", "the job is at its minimum size"}});
    }
    return;
  }
  eviction_requested_ = true;
  for (const auto& r : requests) {
    log()->warn("step {}: asking the leader to evict rank {} ({}/{}): below {:.2f} of the median for {} steps", step,
                r.rank, r.node, r.slot, config_.straggler_threshold, speeds_.strikes(workers_[static_cast<std::size_t>(r.rank)]));
  }
  try {
    const bool written = store_->commit(elastic::Transaction{}
                                            .require(elastic::keys::kGeneration, std::to_string(m.generation))
                                            .add(elastic::Write::set(elastic::keys::stragglers(m.generation),
                                                                     elastic::encode(requests), std::chrono::hours(1))));
    if (!written) log()->info("the eviction request came after a newer generation; not sent");
  } catch (const Error& e) {
    log()->warn("cannot send the eviction request: {}", e.what());
    eviction_requested_ = false;  // the next step tries again
  }
}

void StragglerMonitor::threshold_changed() { speeds_.set_slow_below(config_.straggler_threshold); }

}  // namespace hdp::trainer
