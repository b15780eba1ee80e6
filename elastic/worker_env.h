// File: elastic/worker_env.h
//
// The contract between `hdp agent` and its workers: the environment variables through which the
// agent tells each worker who it is. Both sides include this one definition: the agent builds a
// worker's environment with worker_environment() (agents/agent.cc) and the worker reads it back
// with read_worker_environment() (ElasticContext::from_environment).
//
// The agent's own flags win over its environment: a variable of this contract that the agent
// inherited (HDP_NODE_ID from a systemd EnvironmentFile, a Slurm submission, a shell) is removed
// from the worker's environment and replaced by the agent's value, or dropped when the agent has
// none (HDP_REDIS_PASSWORD_FILE without a password file, HDP_SENTINEL_PASSWORD_FILE likewise).
// GLIBC_TUNABLES is amended (worker_env::kGlibcTunables). Every other inherited variable passes
// through unchanged (HDP_LOG_LEVEL, PATH, CUDA_VISIBLE_DEVICES, ...): every worker of a node sees
// the node's devices, and binds to its local rank's (trainer/device_placement.h).
#pragma once

#include <array>
#include <atomic>
#include <string_view>
#include <utility>
#include <functional>
#include <string>
#include <vector>

namespace hdp::elastic {

namespace worker_env {
inline constexpr const char* kJobId = "HDP_JOB_ID";
inline constexpr const char* kRedisUrl = "HDP_REDIS_URL";
inline constexpr const char* kRedisPasswordFile = "HDP_REDIS_PASSWORD_FILE";  // set only with a password file
// Set only with a sentinel password file (a redis+sentinel:// URL whose sentinels have a password).
inline constexpr const char* kSentinelPasswordFile = "HDP_SENTINEL_PASSWORD_FILE";
inline constexpr const char* kNodeId = "HDP_NODE_ID";
inline constexpr const char* kNodeIncarnation = "HDP_NODE_INCARNATION";
inline constexpr const char* kLocalRank = "HDP_LOCAL_RANK";
// The same local rank under torchrun's name, for a worker command written for torchrun (a script
// that binds its GPU with LOCAL_RANK); hdp itself reads HDP_LOCAL_RANK.
inline constexpr const char* kTorchLocalRank = "LOCAL_RANK";
inline constexpr const char* kNprocPerNode = "HDP_NPROC_PER_NODE";
inline constexpr const char* kAdvertiseAddr = "HDP_ADVERTISE_ADDR";
inline constexpr const char* kAgentPid = "HDP_AGENT_PID";
// Set only when the agent serves /metrics: the file where the worker keeps its metrics (a
// metrics::Registry as JSON, replaced atomically), which the agent reads at every scrape. (Not
// HDP_METRICS_FILE: that is `hdp train --metrics-file`, a setting the agent passes through.)
inline constexpr const char* kMetricsFile = "HDP_AGENT_METRICS_FILE";
// Set only by an agent: the abstract unix socket ("@<name>") on which it tells its workers the
// job's generation (elastic/agent_channel.h). Without it a worker reads `gen` from the store.
inline constexpr const char* kAgentChannel = "HDP_AGENT_CHANNEL";
// Set only by an agent: a directory the agent keeps for its life (created at its start, removed
// when it exits; a SIGKILLed agent's by the next agent on the machine: agents/node_directory.h),
// which the node's workers share: each worker's metrics file, and a directory corpus's index,
// which a restarted worker reads instead of walking the tree (trainer/data/corpus_index_cache.h).
inline constexpr const char* kNodeDir = "HDP_NODE_DIR";
// Set ("1") only for a standby worker (agents/worker_supervisor.h, Options::standby): a process
// started before any slot needs it, which prepares what does not depend on its slot and then reads
// its slot's variables on standard input (StandbyAssignment below). Its other variables are the
// node's, for local rank 0, until then.
inline constexpr const char* kStandby = "HDP_STANDBY";
// Outside the contract, the one inherited variable the agent amends: glibc's tunables, which glibc
// reads only when a process starts. Every worker's holds glibc.malloc.hugetlb=1 (its malloc advises
// its heap as transparent huge pages, as the system's THP setting "madvise" or "always" allows)
// unless the agent's own GLIBC_TUNABLES sets glibc.malloc.hugetlb (the user's choice, "=0" to
// refuse it). A worker restarted after a crash first touches its model's buffers, the state it
// receives and its first step's activations (about 100 MB for the demo model), and on a virtual
// machine each 4 KiB page touched first cost 11-15 us (bench/first_touch.cc; docs/performance.md,
// "A restarted worker's memory, in huge pages"). It reaches any worker command, not only `hdp
// train`, and the children it starts.
inline constexpr const char* kGlibcTunables = "GLIBC_TUNABLES";
inline constexpr std::string_view kHugePageHeapTunable = "glibc.malloc.hugetlb";
inline constexpr std::string_view kHugePageHeapSetting = "glibc.malloc.hugetlb=1";
static_assert(kHugePageHeapSetting.starts_with(kHugePageHeapTunable) &&
              kHugePageHeapSetting[kHugePageHeapTunable.size()] == '=');
// Every variable of the contract: none of them is ever inherited by a worker.
inline constexpr std::array<const char*, 15> kAll = {
    kJobId,          kRedisUrl,     kRedisPasswordFile, kSentinelPasswordFile, kNodeId,
    kNodeIncarnation, kLocalRank,   kTorchLocalRank,    kNprocPerNode,         kAdvertiseAddr,
    kAgentPid,       kMetricsFile,  kAgentChannel,      kNodeDir,              kStandby};
}  // namespace worker_env

// What an agent tells one worker.
struct WorkerEnvironment {
  std::string job;
  std::string redis_url;
  std::string redis_password_file;  // empty: none (the URL may carry the password)
  std::string sentinel_password_file;  // empty: none (the sentinels have no password)
  std::string node_id;
  std::string incarnation;
  int local_rank = 0;
  int nproc_per_node = 1;
  std::string advertise_address = "127.0.0.1";
  int agent_pid = 0;  // 0: not started by an agent (tests); the variable is then not written
  std::string metrics_file;  // empty: the agent serves no metrics; the variable is then not written
  std::string agent_channel;  // empty: none (the variable is then not written)
  std::string node_dir;       // empty: none (the variable is then not written)
  bool standby = false;       // HDP_STANDBY=1 (the variable is written only when true)
};

// The worker's whole environment as "NAME=value" entries: `inherited` (a null-terminated array
// such as `environ`; may be null) without any variable of the contract, GLIBC_TUNABLES with
// glibc.malloc.hugetlb=1 added (worker_env::kGlibcTunables), then the contract's variables with
// `values`. Entries of `inherited` without '=' are dropped.
std::vector<std::string> worker_environment(const WorkerEnvironment& values, const char* const* inherited);

// Reads the contract back with `lookup` (std::getenv in a worker). Required: HDP_JOB_ID,
// HDP_REDIS_URL, HDP_NODE_ID, HDP_NODE_INCARNATION, HDP_LOCAL_RANK; optional, with the defaults of
// WorkerEnvironment: the others. Throws InvalidArgument naming a missing or malformed variable.
WorkerEnvironment read_worker_environment(const std::function<const char*(const char*)>& lookup);

// Whether `lookup` (std::getenv) says this process is a standby worker (HDP_STANDBY=1).
bool is_standby(const std::function<const char*(const char*)>& lookup);

// A standby's assignment: what the agent writes on the standby's standard input when it gives it
// a slot, and the standby reads. The text is the slot's contract variables, one "NAME=value" line
// each, then an empty line; the standby then holds exactly those (every other variable of the
// contract, HDP_STANDBY included, is unset), as if it had been started for the slot.
struct StandbyAssignment {
  std::vector<std::pair<std::string, std::string>> variables;  // names of the contract only

  // The contract's entries of a slot's whole environment (worker_environment()'s result).
  static StandbyAssignment of(const std::vector<std::string>& slot_environment);
  std::string encode() const;
  // The text up to and without the empty line. Throws InvalidArgument for a line without '=',
  // a name outside the contract, HDP_STANDBY, or a name given twice.
  static StandbyAssignment decode(std::string_view text);
};

// The worker's side: reads the assignment from `fd` (a standby's standard input) and applies it to
// this process's environment (setenv/unsetenv; call it while no other thread reads the
// environment). Returns false, changing nothing, at end of input before the empty line (the agent
// closed it: no slot will come) or when `cancelled` is set and nothing waits to be read (checked
// every 200 ms). Throws InvalidArgument for a malformed assignment, hdp::Error for a read error.
bool await_standby_assignment(int fd, const std::atomic<bool>& cancelled);

}  // namespace hdp::elastic
