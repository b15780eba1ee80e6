// File: elastic/job_keys.h
//
// The names of a job's keys, relative to its namespace `hdp:<job>:` (a PrefixStore adds that).
// docs/redis-schema.md documents every key and field.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hdp::elastic::keys {

inline constexpr const char* kGeneration = "gen";     // current generation number (the fencing token)
inline constexpr const char* kConfig = "config";      // JSON JobConfig, written once
inline constexpr const char* kLeader = "leader";      // "<node>/<incarnation>" + TTL
inline constexpr const char* kJoinCount = "joins";    // counter of join announcements
// "<node>/<incarnation>" of the last agent that deregistered (left the job: drained, stopped),
// written in the commit that erases its lease. The leader reads it every tick and reads every lease
// when it changed: a lease erased by its agent is otherwise seen only at the next full read
// (lease_cache.h), which cost a drain up to a heartbeat before the generation without it.
inline constexpr const char* kLastLeave = "last_leave";
inline constexpr const char* kState = "state";        // hash: status, generation, world_size, step, ...
inline constexpr const char* kEvents = "events";      // capped stream
inline constexpr const char* kSamples = "samples";    // capped stream: one entry per training step (rank 0)
inline constexpr const char* kOutcome = "outcome";    // "completed" or "stopped"; ends publishing
inline constexpr const char* kEvictions = "evictions";  // JSON: evicted node/slots and their cool-downs (leader)
inline constexpr const char* kControl = "control";  // JSON: pending requests (hdp stop/drain/checkpoint), control.h
inline constexpr const char* kCordons = "cordons";  // JSON: nodes not admitted (hdp cordon), control.h
inline constexpr const char* kSettings = "settings";  // JSON: live settings (hdp config set), control.h
// The nodes standing by (registered alive, not members: at MAX, or a joiner whose workers are still
// preparing: membership_decision.h), comma-separated in join order, as the state's `standby` field
// (leader): a string key too, so that rank 0 reads it with its step report and a drain that a
// standby makes up is not a leave below MIN.
inline constexpr const char* kStandby = "standby";
// The store's primary as the job's agents last saw it ("host:port", RedisStore::primary()) and how
// many times it moved (failovers through Redis Sentinel): for `hdp status` and the dashboard only,
// written by agents (StorePrimaryRecord, job_state.h).
inline constexpr const char* kStorePrimary = "store_primary";
inline constexpr const char* kStoreFailovers = "store_failovers";  // integer counter
// Capped stream: one entry {gen: <g>, digest: <xxh64 of gen:<g>>, delta: <change over g-1's record,
// when small>} per published generation, appended in the publishing commit. Agents block on it
// (Store::stream_read) to learn of a new generation, and its record, without polling or reading it.
inline constexpr const char* kGenerationLog = "generations";
inline constexpr std::size_t kGenerationLogLength = 16;
// A delta larger than this is left out of the entry (every agent reads every entry): its readers
// read gen:<g> instead. A node lost or joined takes ~100 bytes.
inline constexpr std::size_t kMaxDeltaBytes = 16 * 1024;

inline std::string generation(std::int64_t g) { return "gen:" + std::to_string(g); }
// Prefix under which a generation's communicator bootstrap lives (each rank's address record per
// channel, mesh/comm/wire.h).
inline std::string bootstrap(std::int64_t g) { return "gen:" + std::to_string(g) + ":boot:"; }
// Set by a worker that lost a peer in generation g: the leader then publishes a new generation
// even when the members look unchanged (a crashed worker restarted before its agent noticed).
inline std::string broken(std::int64_t g) { return "gen:" + std::to_string(g) + ":broken"; }
// Workers generation g's rank 0 asks the leader to evict for being slow (JSON list).
inline std::string stragglers(std::int64_t g) { return "gen:" + std::to_string(g) + ":stragglers"; }
// Hash: one field per rank that abandoned generation g, whether a collective timed out on it.
inline std::string abandoned(std::int64_t g) { return "gen:" + std::to_string(g) + ":abandoned"; }
// The incarnation that holds a node id (no TTL: registration checks that its lease is gone).
inline std::string node(const std::string& id) { return "node:" + id; }
// One incarnation's lease (TTL). The incarnation is in the name, so a heartbeat is a plain PEXPIRE
// that can never refresh another incarnation's lease.
inline std::string lease(const std::string& node, const std::string& incarnation) {
  return "lease:" + node + "/" + incarnation;
}
// The leader's refusal of one incarnation (JSON Refusal, elastic/release.h; TTL kRefusalTtl): read
// by that agent's heartbeat, which then leaves the job.
inline constexpr std::chrono::hours kRefusalTtl{1};
inline std::string refusal(const std::string& node, const std::string& incarnation) {
  return "refusal:" + node + "/" + incarnation;
}
// Written by an agent while its incarnation's workers set themselves up and it is no member
// (TTL: the lease, renewed by its heartbeats; elastic/preparing_workers.h): the leader admits the
// node into a running job only once it is gone.
inline std::string preparing(const std::string& node, const std::string& incarnation) {
  return "preparing:" + node + "/" + incarnation;
}
inline std::string join(std::int64_t sequence) { return "join:" + std::to_string(sequence); }
inline std::string job_namespace(const std::string& job) { return "hdp:" + job + ":"; }

}  // namespace hdp::elastic::keys
