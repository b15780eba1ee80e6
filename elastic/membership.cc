#include "elastic/membership.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text.h"
#include "elastic/json_fields.h"

namespace hdp::elastic {
namespace {

using nlohmann::json;
using namespace json_fields;

std::vector<int> slot_list(const json& object, const char* name, std::string_view what, int limit) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_array()) bad(what, std::string("field '") + name + "' is not an array");
  std::vector<int> slots;
  for (const auto& slot : *it) {
    if (!in_range(slot, 0, limit - 1)) {
      bad(what, std::string("field '") + name + "' holds something other than an integer in [0, " +
                    std::to_string(limit) + ")");
    }
    const int value = static_cast<int>(slot.get<std::int64_t>());
    if (!slots.empty() && value <= slots.back()) {
      bad(what, std::string("field '") + name + "' must list distinct local ranks in [0, " + std::to_string(limit) +
                    ") in ascending order");
    }
    slots.push_back(value);
  }
  return slots;
}

constexpr int kMaxSlotsPerNode = 1024;
// More members than this is garbage: it would take a JSON document of tens of megabytes, and
// members x kMaxSlotsPerNode still fits an int world size.
constexpr std::size_t kMaxMembers = 1 << 20;

// A record's or a delta's status, joins_seen and created_ms into `out`; its `members` array.
const json& scalars_and_members(const json& value, std::string_view what, Generation& out) {
  const auto status = field<std::string>(value, "status", what);
  if (status != "running" && status != "waiting") bad(what, "status " + quote_value(status) + " is not running or waiting");
  out.status = status == "running" ? GenerationStatus::kRunning : GenerationStatus::kWaiting;
  out.joins_seen = bounded(value, "joins_seen", what, 0, kMaxJoinCount);
  out.created_ms = bounded(value, "created_ms", what, 0, std::numeric_limits<std::int64_t>::max());
  auto members = value.find("members");
  if (members == value.end() || !members->is_array()) bad(what, "field 'members' is not an array");
  return *members;
}

constexpr std::int64_t kMaxCooldownMs = std::int64_t{1000} * 3600 * 24 * 365;  // a year

json cooldown_json(const Cooldown& c) { return {{"cooldown_ms", c.base_ms}, {"cooldown_max_ms", c.max_ms}}; }

Cooldown cooldown_of(const json& object, std::string_view what) {
  Cooldown c{bounded(object, "cooldown_ms", what, 1, kMaxCooldownMs),
             bounded(object, "cooldown_max_ms", what, 1, kMaxCooldownMs)};
  if (c.max_ms < c.base_ms) bad(what, "cooldown_max_ms is below cooldown_ms");
  return c;
}

void check_node(const std::string& node, std::string_view what) {
  if (node.empty()) bad(what, "field 'node' is empty");
}

}  // namespace

std::int64_t Cooldown::after(std::int64_t previous_evictions) const {
  std::int64_t ms = base_ms;
  for (std::int64_t i = 0; i < previous_evictions && ms < max_ms; ++i) ms *= 2;
  return std::min(ms, max_ms);
}

std::string eviction_key(std::string_view node, int slot) { return std::string(node) + "/" + std::to_string(slot); }

std::string encode(const std::vector<StragglerRequest>& requests) {
  json list = json::array();
  for (const auto& r : requests) {
    json entry = {{"node", r.node}, {"incarnation", r.incarnation}, {"slot", r.slot},
                  {"rank", r.rank}, {"speed", r.speed},             {"step", r.step}};
    entry.update(cooldown_json(r.cooldown));
    list.push_back(std::move(entry));
  }
  return json{{"requests", list}}.dump();
}

std::string encode(const AbandonReport& report) {
  json value = {{"node", report.node},
                {"slot", report.slot},
                {"timed_out", report.timed_out},
                {"timeout_ms", report.timeout_ms}};
  value.update(cooldown_json(report.cooldown));
  return value.dump();
}

std::string encode(const Evictions& evictions) {
  json object = json::object();
  for (const auto& [key, e] : evictions) {
    object[key] = {{"node", e.node},       {"incarnation", e.incarnation}, {"slot", e.slot},
                   {"count", e.count},     {"until_ms", e.until_ms},       {"reason", e.reason},
                   {"speed", e.speed},     {"readmitted", e.readmitted}};
  }
  return object.dump();
}

std::vector<StragglerRequest> decode_straggler_requests(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  auto list = value.find("requests");
  if (list == value.end() || !list->is_array()) bad(what, "field 'requests' is not an array");
  if (list->size() > kMaxMembers) bad(what, "field 'requests' lists more than " + std::to_string(kMaxMembers));
  std::vector<StragglerRequest> requests;
  for (const auto& entry : *list) {
    if (!entry.is_object()) bad(what, "a request is not an object");
    StragglerRequest r;
    r.node = field<std::string>(entry, "node", what);
    check_node(r.node, what);
    r.incarnation = field<std::string>(entry, "incarnation", what);
    r.slot = static_cast<int>(bounded(entry, "slot", what, 0, kMaxSlotsPerNode - 1));
    r.rank = field<int>(entry, "rank", what);
    r.speed = real(entry, "speed", what, 0, 1e9);
    r.step = bounded(entry, "step", what, 0, std::numeric_limits<std::int64_t>::max());
    r.cooldown = cooldown_of(entry, what);
    requests.push_back(std::move(r));
  }
  return requests;
}

AbandonReport decode_abandon_report(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  AbandonReport report;
  report.node = field<std::string>(value, "node", what);
  check_node(report.node, what);
  report.slot = static_cast<int>(bounded(value, "slot", what, 0, kMaxSlotsPerNode - 1));
  report.timed_out = boolean(value, "timed_out", what);
  report.timeout_ms = bounded(value, "timeout_ms", what, 0, kMaxCooldownMs);
  report.cooldown = cooldown_of(value, what);
  return report;
}

Evictions decode_evictions(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  if (value.size() > kMaxMembers) bad(what, "more than " + std::to_string(kMaxMembers) + " evictions");
  Evictions evictions;
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_object()) bad(what, "eviction " + quote_value(key) + " is not an object");
    Eviction e;
    e.node = field<std::string>(entry, "node", what);
    check_node(e.node, what);
    e.incarnation = field<std::string>(entry, "incarnation", what);
    e.slot = static_cast<int>(bounded(entry, "slot", what, 0, kMaxSlotsPerNode - 1));
    e.count = bounded(entry, "count", what, 1, std::numeric_limits<std::int32_t>::max());
    e.until_ms = bounded(entry, "until_ms", what, 0, std::numeric_limits<std::int64_t>::max());
    e.reason = field<std::string>(entry, "reason", what);
    if (e.reason != "slow" && e.reason != "timeout") bad(what, "reason " + quote_value(e.reason) + " is not slow or timeout");
    e.speed = real(entry, "speed", what, 0, 1e9);
    e.readmitted = boolean(entry, "readmitted", what);
    if (key != eviction_key(e.node, e.slot)) bad(what, "eviction " + quote_value(key) + " names another node/slot");
    evictions.emplace(key, std::move(e));
  }
  return evictions;
}

int Generation::world_size() const {
  int total = 0;
  for (const auto& member : members) total += static_cast<int>(member.slots.size());
  return total;
}

std::optional<int> Generation::rank_of(std::string_view node, std::string_view incarnation, int local_rank) const {
  for (const auto& member : members) {
    if (member.node != node || member.incarnation != incarnation) continue;
    for (std::size_t i = 0; i < member.slots.size(); ++i) {
      if (member.slots[i] == local_rank) return member.first_rank + static_cast<int>(i);
    }
  }
  return std::nullopt;
}

void Generation::assign_ranks() {
  int next = 0;
  for (auto& member : members) {
    member.first_rank = next;
    next += static_cast<int>(member.slots.size());
  }
}

std::string encode(GenerationStatus status) { return status == GenerationStatus::kRunning ? "running" : "waiting"; }

std::string encode(const JobConfig& config) {
  return json{{"min_nodes", config.min_nodes}, {"max_nodes", config.max_nodes}}.dump();
}

std::string encode(const NodeLease& lease) {
  return json{{"node", lease.node},       {"incarnation", lease.incarnation}, {"host", lease.host},
              {"pid", lease.pid},         {"version", lease.version},         {"slots", lease.slots},
              {"healthy", lease.healthy}, {"last_generation", lease.last_generation}, {"lease_ms", lease.lease_ms},
              {"wire", lease.wire}}
      .dump();
}

std::string encode(const Generation& generation) {
  json members = json::array();
  for (const auto& m : generation.members) {
    members.push_back({{"node", m.node}, {"incarnation", m.incarnation}, {"host", m.host}, {"slots", m.slots},
                       {"first_rank", m.first_rank}});
  }
  return json{{"generation", generation.number}, {"status", encode(generation.status)},
              {"world_size", generation.world_size()}, {"members", members},
              {"joins_seen", generation.joins_seen}, {"created_ms", generation.created_ms}}
      .dump();
}

// The delta: {"base": g, "members": [[first, count] | {node, incarnation, host, slots}, ...],
// "status", "joins_seen", "created_ms"}. A member equal to the base's (identity, host, slots)
// extends or starts a run; any other is written whole. Ranks are renumbered on apply.
std::optional<std::string> encode_delta(const Generation& base, const Generation& next, std::size_t max_bytes) {
  if (base.number <= 0) return std::nullopt;
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < base.members.size(); ++i) index.emplace(base.members[i].node, i);
  json members = json::array();
  std::size_t run_first = 0, run_count = 0;  // the run being extended, when run_count > 0
  auto flush = [&] {
    if (run_count > 0) members.push_back(json::array({run_first, run_count}));
    run_count = 0;
  };
  for (const Member& m : next.members) {
    auto it = index.find(m.node);
    const bool same = it != index.end() && base.members[it->second].same_identity(m) &&
                      base.members[it->second].host == m.host && base.members[it->second].slots == m.slots;
    if (same && run_count > 0 && run_first + run_count == it->second) {
      ++run_count;
      continue;
    }
    flush();
    if (same) {
      run_first = it->second;
      run_count = 1;
    } else {
      members.push_back({{"node", m.node}, {"incarnation", m.incarnation}, {"host", m.host}, {"slots", m.slots}});
    }
  }
  flush();
  std::string out = json{{"base", base.number}, {"members", members}, {"status", encode(next.status)},
                         {"joins_seen", next.joins_seen}, {"created_ms", next.created_ms}}
                        .dump();
  if (out.size() > max_bytes) return std::nullopt;
  return out;
}

Generation apply_delta(const Generation& base, std::int64_t number, std::string_view delta, std::string_view what) {
  json value = parse(delta, what);
  if (bounded(value, "base", what, 1, kMaxGeneration) != base.number) bad(what, "the delta is not over the record held");
  if (number <= base.number || number > kMaxGeneration) bad(what, "the delta's generation is not above its base");
  Generation out;
  out.number = number;
  const json& members = scalars_and_members(value, what, out);
  for (const auto& entry : members) {
    if (entry.is_array()) {
      if (entry.size() != 2 || !in_range(entry[0], 0, kMaxMembers) || !in_range(entry[1], 1, kMaxMembers)) {
        bad(what, "a run of members is not [first, count]");
      }
      const auto first = entry[0].get<std::size_t>(), count = entry[1].get<std::size_t>();
      if (first + count > base.members.size()) bad(what, "a run of members lies outside the base record");
      out.members.insert(out.members.end(), base.members.begin() + static_cast<std::ptrdiff_t>(first),
                         base.members.begin() + static_cast<std::ptrdiff_t>(first + count));
    } else if (entry.is_object()) {
      out.members.push_back(Member{field<std::string>(entry, "node", what), field<std::string>(entry, "incarnation", what),
                                   field<std::string>(entry, "host", what),
                                   slot_list(entry, "slots", what, kMaxSlotsPerNode), 0});
    } else {
      bad(what, "a member is neither a run nor an object");
    }
    if (out.members.size() > kMaxMembers) bad(what, "the delta lists more than " + std::to_string(kMaxMembers) + " members");
  }
  out.assign_ranks();
  return out;
}

std::string record_digest(std::string_view encoded) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(encoded.data(), encoded.size(), 0)));
  return hex;
}

JobConfig decode_job_config(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  JobConfig config{field<int>(value, "min_nodes", what), field<int>(value, "max_nodes", what)};
  if (config.min_nodes < 1 || config.max_nodes < config.min_nodes) bad(what, "needs 1 <= min_nodes <= max_nodes");
  return config;
}

NodeLease decode_node_lease(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  NodeLease lease;
  lease.node = field<std::string>(value, "node", what);
  lease.incarnation = field<std::string>(value, "incarnation", what);
  lease.host = field<std::string>(value, "host", what);
  lease.pid = field<int>(value, "pid", what);
  lease.version = field<std::string>(value, "version", what);
  lease.slots = field<int>(value, "slots", what);
  if (lease.slots < 1 || lease.slots > kMaxSlotsPerNode) bad(what, "slots must be in [1, 1024]");
  lease.healthy = slot_list(value, "healthy", what, lease.slots);
  lease.last_generation = bounded(value, "last_generation", what, 0, kMaxGeneration);
  // Optional: leases written before it was recorded have none.
  if (value.contains("lease_ms")) lease.lease_ms = bounded(value, "lease_ms", what, 0, 3'600'000);
  if (value.contains("wire")) lease.wire = static_cast<int>(bounded(value, "wire", what, 0, 1'000'000));
  if (lease.node.empty() || lease.incarnation.empty()) bad(what, "node and incarnation must not be empty");
  return lease;
}

Generation decode_generation(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  Generation generation;
  generation.number = bounded(value, "generation", what, 1, kMaxGeneration);
  const json& members = scalars_and_members(value, what, generation);
  if (members.size() > kMaxMembers) bad(what, "field 'members' lists more than " + std::to_string(kMaxMembers));
  for (const auto& entry : members) {
    if (!entry.is_object()) bad(what, "a member is not an object");
    Member member{field<std::string>(entry, "node", what), field<std::string>(entry, "incarnation", what),
                  field<std::string>(entry, "host", what), slot_list(entry, "slots", what, kMaxSlotsPerNode),
                  field<int>(entry, "first_rank", what)};
    generation.members.push_back(std::move(member));
  }
  // Ranks must be the contiguous numbering assign_ranks() produces; anything else would give two
  // workers the same rank.
  Generation renumbered = generation;
  renumbered.assign_ranks();
  for (std::size_t i = 0; i < generation.members.size(); ++i) {
    if (renumbered.members[i].first_rank != generation.members[i].first_rank) bad(what, "member ranks are not contiguous");
  }
  if (field<int>(value, "world_size", what) != generation.world_size()) bad(what, "world_size disagrees with members");
  return generation;
}

std::int64_t decode_counter(std::string_view text, std::string_view what, std::int64_t max) {
  std::int64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || number < 0 || number > max) {
    bad(what, quote_value(text) + " is not an integer in [0, " + std::to_string(max) + "]");
  }
  return number;
}

std::int64_t decode_generation_number(std::string_view text, std::string_view what) {
  return decode_counter(text, what, kMaxGeneration);
}

JobConfig parse_nnodes(std::string_view text) {
  auto number = [&](std::string_view part) {
    int value = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 1) {
      throw InvalidArgument("--nnodes '" + std::string(text) + "': expected N or MIN:MAX with 1 <= MIN <= MAX");
    }
    return value;
  };
  auto colon = text.find(':');
  JobConfig config;
  config.min_nodes = number(text.substr(0, colon));
  config.max_nodes = colon == std::string_view::npos ? config.min_nodes : number(text.substr(colon + 1));
  if (config.max_nodes < config.min_nodes) {
    throw InvalidArgument("--nnodes '" + std::string(text) + "': MIN must not exceed MAX");
  }
  return config;
}

}  // namespace hdp::elastic

namespace hdp::elastic {
void validate_job_id(std::string_view job) {
  const bool ok = !job.empty() && job.size() <= 128 && std::all_of(job.begin(), job.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (!ok) throw InvalidArgument("job id " + quote_value(job, 130) + " must be 1-128 characters of A-Z a-z 0-9 . _ -");
}
}  // namespace hdp::elastic
