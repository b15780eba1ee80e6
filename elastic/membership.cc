#include "elastic/membership.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace hdp::elastic {
namespace {

using nlohmann::json;

[[noreturn]] void bad(std::string_view what, const std::string& reason) {
  throw InvalidArgument("invalid value in Redis key '" + std::string(what) + "': " + reason);
}

json parse(std::string_view text, std::string_view what) {
  json value = json::parse(text.begin(), text.end(), nullptr, false);
  if (value.is_discarded() || !value.is_object()) bad(what, "not a JSON object");
  return value;
}

// Reads field `name` as T, checking presence and type.
template <typename T>
T field(const json& object, const char* name, std::string_view what) {
  auto it = object.find(name);
  if (it == object.end()) bad(what, std::string("field '") + name + "' is missing");
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) bad(what, std::string("field '") + name + "' is not a string");
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) bad(what, std::string("field '") + name + "' is not an integer");
  }
  return it->get<T>();
}

std::vector<int> slot_list(const json& object, const char* name, std::string_view what, int limit) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_array()) bad(what, std::string("field '") + name + "' is not an array");
  std::vector<int> slots;
  for (const auto& slot : *it) {
    if (!slot.is_number_integer()) bad(what, std::string("field '") + name + "' holds a non-integer");
    const int value = slot.get<int>();
    if (value < 0 || value >= limit || (!slots.empty() && value <= slots.back())) {
      bad(what, std::string("field '") + name + "' must list distinct local ranks in [0, " + std::to_string(limit) +
                    ") in ascending order");
    }
    slots.push_back(value);
  }
  return slots;
}

constexpr int kMaxSlotsPerNode = 1024;

}  // namespace

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
              {"healthy", lease.healthy}, {"last_generation", lease.last_generation}}
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
  lease.last_generation = field<std::int64_t>(value, "last_generation", what);
  if (lease.node.empty() || lease.incarnation.empty()) bad(what, "node and incarnation must not be empty");
  return lease;
}

Generation decode_generation(std::string_view text, std::string_view what) {
  json value = parse(text, what);
  Generation generation;
  generation.number = field<std::int64_t>(value, "generation", what);
  const auto status = field<std::string>(value, "status", what);
  if (status != "running" && status != "waiting") bad(what, "status '" + status + "' is not running or waiting");
  generation.status = status == "running" ? GenerationStatus::kRunning : GenerationStatus::kWaiting;
  generation.joins_seen = field<std::int64_t>(value, "joins_seen", what);
  generation.created_ms = field<std::int64_t>(value, "created_ms", what);
  auto members = value.find("members");
  if (members == value.end() || !members->is_array()) bad(what, "field 'members' is not an array");
  for (const auto& entry : *members) {
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
  if (generation.number < 1) bad(what, "generation must be >= 1");
  return generation;
}

std::int64_t decode_generation_number(std::string_view text, std::string_view what) {
  std::int64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || number < 0) {
    bad(what, "'" + std::string(text.substr(0, 40)) + "' is not a generation number (a non-negative integer)");
  }
  return number;
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
  if (!ok) throw InvalidArgument("job id '" + std::string(job.substr(0, 130)) + "' must be 1-128 characters of A-Z a-z 0-9 . _ -");
}
}  // namespace hdp::elastic
