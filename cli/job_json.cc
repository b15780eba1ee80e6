#include "cli/job_json.h"

#include <algorithm>
#include <cmath>

namespace hdp::cli {
namespace {

// The evicted node/slots: `active` while the cool-down runs (the leader keeps the slot out).
nlohmann::json evictions_json(const elastic::Evictions& evictions) {
  nlohmann::json list = nlohmann::json::array();
  const std::int64_t now = elastic::now_ms();
  for (const auto& [key, e] : evictions) {
    list.push_back({{"node", e.node},
                    {"slot", e.slot},
                    {"count", e.count},
                    {"reason", e.reason},
                    {"speed", e.speed},
                    {"until_ms", e.until_ms},
                    {"active", e.until_ms > now},
                    {"readmitted", e.readmitted}});
  }
  return list;
}

nlohmann::json request_json(const std::string& op, const elastic::Request& r) {
  return {{"op", op}, {"id", r.id}, {"by", r.by}, {"at_ms", r.at_ms}};
}

// The pending requests, one entry each: {op, id, by, at_ms[, node, incarnation]}.
nlohmann::json requests_json(const elastic::ControlRequests& requests) {
  nlohmann::json list = nlohmann::json::array();
  if (requests.stop) list.push_back(request_json("stop", *requests.stop));
  if (requests.checkpoint) list.push_back(request_json("checkpoint", *requests.checkpoint));
  for (const auto& [node, d] : requests.drains) {
    nlohmann::json entry = request_json("drain", d);
    entry["node"] = node;
    entry["incarnation"] = d.incarnation;
    list.push_back(std::move(entry));
  }
  return list;
}

nlohmann::json cordons_json(const elastic::Cordons& cordons) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [node, c] : cordons) list.push_back({{"node", node}, {"by", c.by}, {"at_ms", c.at_ms}});
  return list;
}

// The job's ETTR now (elastic/goodput.h); null before its first step was accounted.
nlohmann::json goodput_json(const elastic::JobSnapshot& s) {
  const auto f = elastic::goodput_figures(s.state, elastic::now_ms());
  if (!f) return nullptr;
  return {{"ettr", f->ettr},
          {"productive_s", f->productive_ms / 1000.0},
          {"wall_s", f->wall_ms / 1000.0},
          {"lost_s", f->lost_ms / 1000.0},
          {"recomputed_steps", f->recomputed_steps},
          {"recomputed_s", f->recomputed_ms / 1000.0},
          {"text", elastic::goodput_text(*f)}};
}

nlohmann::json recoveries_json(const std::vector<elastic::RecoveryRecord>& recoveries) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : recoveries) {
    list.push_back({{"kind", r.kind},
                    {"seconds", r.seconds},
                    {"lost_steps", r.lost_steps},
                    {"step", r.step},
                    {"generation", r.generation},
                    {"time_ms", r.time_ms}});
  }
  return list;
}

}  // namespace

nlohmann::json job_json(const std::string& job, const elastic::JobSnapshot& s,
                        const std::vector<elastic::RecoveryRecord>* recoveries) {
  nlohmann::json members = nlohmann::json::array();
  if (s.members) {
    for (const auto& m : s.members->members) {
      auto lease = s.leases.find(m.node);
      const bool live = lease != s.leases.end() && lease->second.incarnation == m.incarnation;
      nlohmann::json member = {{"node", m.node},        {"incarnation", m.incarnation}, {"host", m.host},
                               {"first_rank", m.first_rank}, {"slots", m.slots},      {"lease", live}};
      // Seconds since the lease was last renewed (absent for an expired lease or an older agent).
      if (auto age = s.lease_ages.find(m.node); live && age != s.lease_ages.end()) {
        member["lease_age_s"] = static_cast<double>(age->second.count()) / 1000.0;
      }
      members.push_back(std::move(member));
    }
  }
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : s.events) {
    nlohmann::json fields = nlohmann::json::object();
    for (const auto& [k, v] : e.fields) fields[k] = v;
    events.push_back({{"id", e.id}, {"fields", fields}});
  }
  // Samples (validated: every field a finite number), oldest first; integers stay integers.
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& e : s.samples) {
    nlohmann::json sample = nlohmann::json::object();
    for (const auto& [k, v] : e.fields) {
      const double number = std::stod(v);
      if (number == std::floor(number) && std::abs(number) < 9.0e15) {
        sample[k] = static_cast<std::int64_t>(number);
      } else {
        sample[k] = number;
      }
    }
    samples.push_back(std::move(sample));
  }
  // Numeric fields as JSON numbers (validated by JobState::snapshot), the others as text.
  nlohmann::json state = nlohmann::json::object();
  for (const auto& [field, value] : s.state) {
    if (std::find(std::begin(elastic::kIntegerStateFields), std::end(elastic::kIntegerStateFields), field) !=
        std::end(elastic::kIntegerStateFields)) {
      state[field] = std::stoll(value);
    } else if (std::find(std::begin(elastic::kNumberStateFields), std::end(elastic::kNumberStateFields), field) !=
               std::end(elastic::kNumberStateFields)) {
      state[field] = std::stod(value);
    } else if (std::find(std::begin(elastic::kNumberListStateFields), std::end(elastic::kNumberListStateFields),
                         field) != std::end(elastic::kNumberListStateFields)) {
      state[field] = elastic::parse_number_list(field, value);
    } else {
      state[field] = value;
    }
  }
  return {{"job", job},
          {"generation", s.generation},
          {"generation_status", s.members ? nlohmann::json(elastic::encode(s.members->status)) : nlohmann::json()},
          {"world_size", s.members ? s.members->world_size() : 0},
          {"leader", s.leader ? nlohmann::json(*s.leader) : nlohmann::json()},
          {"store", s.store_primary ? nlohmann::json{{"primary", *s.store_primary}, {"failovers", s.store_failovers}}
                                    : nlohmann::json()},
          {"state", state},
          {"members", members},
          {"evictions", evictions_json(s.evictions)},
          {"requests", requests_json(s.requests)},
          {"cordons", cordons_json(s.cordons)},
          {"settings", s.settings.empty() ? nlohmann::json::object() : nlohmann::json::parse(elastic::encode(s.settings))},
          {"events", events},
          {"samples", samples},
          {"goodput", goodput_json(s)},
          {"recoveries", recoveries_json(recoveries ? *recoveries : elastic::recent_recoveries(s.events, kRecoveriesShown))}};
}

}  // namespace hdp::cli
