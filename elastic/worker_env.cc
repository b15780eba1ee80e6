#include "elastic/worker_env.h"

#include <algorithm>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <set>
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

// GLIBC_TUNABLES's value for a worker from the agent's `inherited` values, in the order of its
// environment (glibc reads every GLIBC_TUNABLES entry in that order, a later setting of a tunable
// winning): their "name=value" entries joined by ':', empty ones left out, then glibc.malloc.hugetlb=1
// unless one of them sets that tunable.
std::string worker_tunables(const std::vector<std::string_view>& inherited) {
  std::string joined;
  bool hugetlb_set = false;
  const std::string name = std::string(worker_env::kHugePageHeapTunable) + "=";
  for (const std::string_view value : inherited) {
    for (std::size_t start = 0; start <= value.size();) {
      const std::size_t end = std::min(value.find(':', start), value.size());
      const std::string_view entry = value.substr(start, end - start);
      start = end + 1;
      if (entry.empty()) continue;
      hugetlb_set = hugetlb_set || entry.starts_with(name);
      joined += (joined.empty() ? "" : ":") + std::string(entry);
    }
  }
  if (!hugetlb_set) joined += (joined.empty() ? "" : ":") + std::string(worker_env::kHugePageHeapSetting);
  return joined;
}

}  // namespace

std::vector<std::string> worker_environment(const WorkerEnvironment& values, const char* const* inherited) {
  namespace env = worker_env;
  std::vector<std::string> result;
  std::vector<std::string_view> tunables;  // the inherited GLIBC_TUNABLES's values, in order
  for (const char* const* entry = inherited; entry && *entry; ++entry) {
    const std::string_view text = *entry;
    const auto equals = text.find('=');
    if (equals == std::string_view::npos || in_contract(text.substr(0, equals))) continue;
    if (text.substr(0, equals) == env::kGlibcTunables) {
      tunables.push_back(text.substr(equals + 1));
      continue;
    }
    result.emplace_back(text);
  }
  auto set = [&](const char* name, const std::string& value) { result.push_back(std::string(name) + "=" + value); };
  set(env::kGlibcTunables, worker_tunables(tunables));
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
  if (!values.node_dir.empty()) set(env::kNodeDir, values.node_dir);
  if (values.standby) set(env::kStandby, "1");
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
  values.node_dir = std::string(optional(env::kNodeDir));
  if (!values.agent_channel.empty() && (values.agent_channel[0] != '@' || values.agent_channel.size() < 2 ||
                                        values.agent_channel.size() > 100)) {
    throw InvalidArgument(std::string("environment variable ") + env::kAgentChannel + "='" +
                          values.agent_channel.substr(0, 64) + "' is not an abstract socket name (@<name>)");
  }
  return values;
}

bool is_standby(const std::function<const char*(const char*)>& lookup) {
  const char* value = lookup(worker_env::kStandby);
  return value && std::string_view(value) == "1";
}

StandbyAssignment StandbyAssignment::of(const std::vector<std::string>& slot_environment) {
  StandbyAssignment assignment;
  for (const std::string& entry : slot_environment) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos) continue;
    std::string name = entry.substr(0, equals);
    if (!in_contract(name) || name == worker_env::kStandby) continue;
    assignment.variables.emplace_back(std::move(name), entry.substr(equals + 1));
  }
  return assignment;
}

std::string StandbyAssignment::encode() const {
  std::string text;
  for (const auto& [name, value] : variables) {
    if (value.find('\n') != std::string::npos) {
      throw InvalidArgument("standby assignment: the value of " + name + " holds a newline");
    }
    text += name + "=" + value + "\n";
  }
  return text + "\n";
}

StandbyAssignment StandbyAssignment::decode(std::string_view text) {
  StandbyAssignment assignment;
  std::set<std::string, std::less<>> seen;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const auto equals = line.find('=');
    const std::string quoted = "'" + std::string(line.substr(0, 64)) + "'";
    if (equals == std::string_view::npos) throw InvalidArgument("standby assignment: line " + quoted + " has no '='");
    const std::string name(line.substr(0, equals));
    if (!in_contract(name) || name == worker_env::kStandby) {
      throw InvalidArgument("standby assignment: " + quoted + " is not a slot's variable of the worker contract");
    }
    if (!seen.insert(name).second) throw InvalidArgument("standby assignment: " + name + " is given twice");
    assignment.variables.emplace_back(name, std::string(line.substr(equals + 1)));
  }
  return assignment;
}

bool await_standby_assignment(int fd, const std::atomic<bool>& cancelled) {
  // The agent sends a few hundred bytes; more than this is not an assignment.
  constexpr std::size_t kMaxBytes = 64 * 1024;
  std::string text;
  for (;;) {
    const bool empty = !text.empty() && text[0] == '\n';
    if (const auto blank = text.find("\n\n"); blank != std::string::npos || empty) {
      const StandbyAssignment assignment =
          StandbyAssignment::decode(empty ? std::string_view() : std::string_view(text).substr(0, blank + 1));
      for (const char* name : worker_env::kAll) unsetenv(name);
      for (const auto& [name, value] : assignment.variables) setenv(name.c_str(), value.c_str(), 1);
      return true;
    }
    if (text.size() > kMaxBytes) throw InvalidArgument("standby assignment: more than 64 KiB without an empty line");
    // A signal that lands just before a blocking read would not end it: wait in slices, and give
    // up only when nothing is waiting to be read (an assignment already sent is taken).
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    if (const int ready = poll(&readable, 1, 200); ready <= 0) {
      if (ready < 0 && errno != EINTR) throw Error(std::string("standby: waiting for the assignment: ") + std::strerror(errno));
      if (cancelled.load()) return false;
      continue;
    }
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("standby: reading the assignment: ") + std::strerror(errno));
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace hdp::elastic
