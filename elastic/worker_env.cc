#include "elastic/worker_env.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "common/error.h"

namespace hdp::elastic {
namespace {

bool in_contract(std::string_view name) {
  return std::any_of(worker_env::kAll.begin(), worker_env::kAll.end(),
                     [&](const char* variable) { return name == variable; });
}

std::string required(const std::function<const char*(const char*)>& lookup, const char* name) {
  const char* value = lookup(name);
  if (!value || !*value) throw InvalidArgument(std::string("environment variable ") + name + " is not set");
  return value;
}

int non_negative(const char* name, std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + std::string(text.substr(0, 64)) +
                          "' is not a non-negative integer");
  }
  return value;
}

}  // namespace

std::vector<std::string> worker_environment(const WorkerEnvironment& values, const char* const* inherited) {
  namespace env = worker_env;
  std::vector<std::string> result;
  for (const char* const* entry = inherited; entry && *entry; ++entry) {
    const std::string_view text = *entry;
    const auto equals = text.find('=');
    if (equals == std::string_view::npos || in_contract(text.substr(0, equals))) continue;
    result.emplace_back(text);
  }
  auto set = [&](const char* name, const std::string& value) { result.push_back(std::string(name) + "=" + value); };
  set(env::kJobId, values.job);
  set(env::kRedisUrl, values.redis_url);
  if (!values.redis_password_file.empty()) set(env::kRedisPasswordFile, values.redis_password_file);
  if (!values.sentinel_password_file.empty()) set(env::kSentinelPasswordFile, values.sentinel_password_file);
  set(env::kNodeId, values.node_id);
  set(env::kNodeIncarnation, values.incarnation);
  set(env::kLocalRank, std::to_string(values.local_rank));
  set(env::kTorchLocalRank, std::to_string(values.local_rank));
  set(env::kNprocPerNode, std::to_string(values.nproc_per_node));
  set(env::kAdvertiseAddr, values.advertise_address);
  if (values.agent_pid > 0) set(env::kAgentPid, std::to_string(values.agent_pid));
  if (!values.metrics_file.empty()) set(env::kMetricsFile, values.metrics_file);
  if (!values.agent_channel.empty()) set(env::kAgentChannel, values.agent_channel);
  return result;
}

WorkerEnvironment read_worker_environment(const std::function<const char*(const char*)>& lookup) {
  namespace env = worker_env;
  WorkerEnvironment values;
  values.job = required(lookup, env::kJobId);
  values.redis_url = required(lookup, env::kRedisUrl);
  values.node_id = required(lookup, env::kNodeId);
  values.incarnation = required(lookup, env::kNodeIncarnation);
  values.local_rank = non_negative(env::kLocalRank, required(lookup, env::kLocalRank));
  auto optional = [&](const char* name) -> std::string_view {
    const char* value = lookup(name);
    return value ? value : "";
  };
  values.redis_password_file = std::string(optional(env::kRedisPasswordFile));
  values.sentinel_password_file = std::string(optional(env::kSentinelPasswordFile));
  if (auto nproc = optional(env::kNprocPerNode); !nproc.empty()) {
    values.nproc_per_node = non_negative(env::kNprocPerNode, nproc);
  }
  if (auto address = optional(env::kAdvertiseAddr); !address.empty()) values.advertise_address = std::string(address);
  if (auto pid = optional(env::kAgentPid); !pid.empty()) values.agent_pid = non_negative(env::kAgentPid, pid);
  values.metrics_file = std::string(optional(env::kMetricsFile));
  values.agent_channel = std::string(optional(env::kAgentChannel));
  if (!values.agent_channel.empty() && (values.agent_channel[0] != '@' || values.agent_channel.size() < 2 ||
                                        values.agent_channel.size() > 100)) {
    throw InvalidArgument(std::string("environment variable ") + env::kAgentChannel + "='" +
                          values.agent_channel.substr(0, 64) + "' is not an abstract socket name (@<name>)");
  }
  return values;
}

}  // namespace hdp::elastic
