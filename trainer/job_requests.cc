#include "trainer/job_requests.h"

#include "common/error.h"
#include "common/log.h"
#include "elastic/control.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::trainer {

JobRequests::JobRequests(elastic::Store& job_store, const elastic::LiveValues& flags, TrainerConfig& config,
                         StepReporter& reporter, std::string worker)
    : store_(job_store), flags_(flags), config_(config), reporter_(reporter), worker_(std::move(worker)) {}

Asked JobRequests::asked(const elastic::Membership& m) const {
  Asked a;
  if (m.rank != 0) return a;
  a.live = elastic::in_force(flags_, reporter_.settings());
  const elastic::ControlRequests& requests = reporter_.requests();
  a.stop = requests.stop.has_value();
  a.checkpoint = reporter_.checkpoint_request().has_value();
  a.standby = reporter_.standby();
  for (std::size_t i = 0; i < m.record.members.size(); ++i) {
    if (requests.drain_of(m.record.members[i].node, m.record.members[i].incarnation)) {
      a.drain_member = static_cast<int>(i);  // one node per boundary; the next at the next
      break;
    }
  }
  return a;
}

bool JobRequests::apply_live_settings(const elastic::Membership& m, const elastic::LiveValues& agreed,
                                      std::int64_t step) {
  elastic::LiveValues& live = config_;
  if (agreed == live) return false;
  live = agreed;
  const std::string in_force = elastic::describe(live);
  log()->info("worker {}: live settings in force from step {}: {}", worker_, step + 1, in_force);
  if (m.rank == 0) reporter_.settings_applied(m, step + 1, in_force);
  return true;
}

void JobRequests::checkpoint_taken(std::int64_t step, const std::string& outcome, const std::string& path) {
  log()->info("step {}: checkpoint requested by {}: {}{}", step, reporter_.checkpoint_request()->by, outcome,
              path.empty() ? "" : " at " + path);
  reporter_.checkpoint_done(reporter_.checkpoint_request()->id, step, outcome, path);
}

void JobRequests::finish_drains(const elastic::Membership& m, const std::optional<std::set<std::string>>& nodes,
                                const std::string& outcome, std::int64_t step) {
  for (const auto& member : m.record.members) {
    if (nodes && !nodes->contains(member.node)) continue;
    if (const auto* drain = reporter_.requests().drain_of(member.node, member.incarnation)) {
      elastic::finish_request(store_, "drain", drain->id, outcome,
                              {{"step", std::to_string(step)}, {"incarnation", member.incarnation}}, member.node);
    }
  }
}

void JobRequests::finish_stop(std::int64_t step, const std::string& checkpoint) {
  if (const auto& stop = reporter_.requests().stop) {
    elastic::finish_request(store_, "stop", stop->id, "stopped", {{"step", std::to_string(step)}, {"checkpoint", checkpoint}});
  }
}

std::optional<int> read_min_nodes(elastic::Store& job_store) {
  try {
    if (auto text = job_store.get(elastic::keys::kConfig)) {
      return elastic::decode_job_config(*text, elastic::keys::kConfig).min_nodes;
    }
    return 1;
  } catch (const StoreUnavailable&) {
    return std::nullopt;
  }
}

}  // namespace hdp::trainer
