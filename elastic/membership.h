// File: elastic/membership.h
//
// The records the rendezvous keeps in the store, and their JSON forms. Every decoder validates
// what it reads: a value written by another program, an older version or by hand gives an
// InvalidArgument naming the key and the field, never a crash or a wrong action.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hdp::elastic {

// The job's fixed settings, written by the first agent; later agents must agree.
struct JobConfig {
  int min_nodes = 1;
  int max_nodes = 1;
};

// A node's lease (key lease:<id>/<incarnation>, with a TTL): who it is and which of its slots are healthy.
struct NodeLease {
  std::string node;
  std::string incarnation;  // random per registration: a node that rejoins is a new member
  std::string host;         // address its workers advertise to peers
  int pid = 0;
  std::string version;  // the agent's hdp release (HDP_VERSION)
  int wire = 0;         // its kWireProtocol (common/release.h); 0: not recorded (an older agent)
  int slots = 0;
  std::vector<int> healthy;          // local ranks whose worker is running
  std::int64_t last_generation = 0;  // highest generation this agent has seen (survives Redis data loss)
  std::int64_t lease_ms = 0;         // the lease's TTL (for its age: TTL less the time left); 0: not recorded
};

// Whether `a` and `b` (anything with a `node` and an `incarnation`: a Member, a NodeLease, a join
// candidate) name the same incarnation of the same node.
template <typename A, typename B>
bool same_identity(const A& a, const B& b) {
  return a.node == b.node && a.incarnation == b.incarnation;
}

struct Member {
  std::string node;
  std::string incarnation;
  std::string host;
  std::vector<int> slots;  // local ranks, ascending; global ranks first_rank .. first_rank+size-1
  int first_rank = 0;

  bool same_identity(const Member& other) const { return elastic::same_identity(*this, other); }
};

enum class GenerationStatus { kRunning, kWaiting };

// Generation g (key gen:<g>): the ordered members and their global ranks.
struct Generation {
  std::int64_t number = 0;
  GenerationStatus status = GenerationStatus::kRunning;
  std::vector<Member> members;
  std::int64_t joins_seen = 0;  // every join announcement up to here is a member or dead
  std::int64_t created_ms = 0;  // wall clock, for people

  int world_size() const;
  // The member entry and global rank of (node, incarnation, local_rank); nullopt when absent.
  std::optional<int> rank_of(std::string_view node, std::string_view incarnation, int local_rank) const;
  // Fills first_rank in member order.
  void assign_ranks();
};

std::string encode(const JobConfig& config);
std::string encode(const NodeLease& lease);
std::string encode(const Generation& generation);
std::string encode(GenerationStatus status);

// `what` names the key in messages ("node:n3", "gen:7").
JobConfig decode_job_config(std::string_view json, std::string_view what);
NodeLease decode_node_lease(std::string_view json, std::string_view what);
Generation decode_generation(std::string_view json, std::string_view what);
// ---- A generation record by difference -----------------------------------------------------------
//
// At 12,500 nodes a record is ~1.4 MB; every agent reading it at every change moves 18 GB out of
// Redis. So the leader's entry in the generations stream carries, beside `gen`, the record's
// digest and, when the previous record is its base, the change: the member list as runs of the
// base's members ([first index, count]) and the entries that are new or changed, plus the scalar
// fields. An agent holding the base derives the record and checks it against the digest; on any
// doubt (no base, a gap, a mismatch, garbage) it reads gen:<g> as before.
//
// The change from `base` to `next` (JSON), or nullopt when it would exceed `max_bytes` or there is
// no base (number 0).
std::optional<std::string> encode_delta(const Generation& base, const Generation& next, std::size_t max_bytes);
// The record of generation `number` that `delta` describes over `base`; InvalidArgument (naming
// `what`) for a delta that does not decode, is for another base, or indexes outside it.
Generation apply_delta(const Generation& base, std::int64_t number, std::string_view delta, std::string_view what);
// xxHash64 of an encoded record, 16 hex digits: what the stream entry's `digest` holds.
std::string record_digest(std::string_view encoded);

// The largest generation number hdp accepts from Redis or publishes: 2^53 - 1, so that g + 1 can
// never overflow and every number is exact in a JSON reader that keeps numbers as doubles. At a
// thousand generations a second it lasts 285,000 years; a larger value in `gen`, a lease's
// `last_generation` or a `gen:<g>` record is garbage, and the leader refuses to publish above it.
inline constexpr std::int64_t kMaxGeneration = (std::int64_t{1} << 53) - 1;
// The largest join counter (`joins`, a record's `joins_seen`) accepted, for the same reasons.
inline constexpr std::int64_t kMaxJoinCount = (std::int64_t{1} << 53) - 1;

// A decimal integer in [0, max] read from Redis key `what`; anything else (not a number, negative,
// above max, trailing bytes) is an InvalidArgument naming `what` and quoting the value.
std::int64_t decode_counter(std::string_view text, std::string_view what, std::int64_t max);
// A generation number: decode_counter(text, what, kMaxGeneration).
std::int64_t decode_generation_number(std::string_view text, std::string_view what);
// "MIN:MAX" or "N" with 1 <= MIN <= MAX.
JobConfig parse_nnodes(std::string_view text);

// ---- Evictions: a slow or hung worker taken out of the job for a while ----------------------------
//
// A worker's place that outlives its process and its rank: (node, local slot). The leader alone
// evicts: it reads the requests below, records an eviction per node/slot in key `evictions`, and
// leaves the slot out of every generation it publishes until the cool-down ends, never below the
// job's minimum number of nodes (docs/architecture.md, "Stragglers").

// An evicted node/slot's cool-down: base · 2^(evictions before this one), at most max.
struct Cooldown {
  std::int64_t base_ms = 60'000;
  std::int64_t max_ms = 3'600'000;
  std::int64_t after(std::int64_t previous_evictions) const;
  bool operator==(const Cooldown&) const = default;
};

// A worker the trainer's rank 0 of generation g asks the leader to evict for being slow (key
// gen:<g>:stragglers, a JSON list; `speed` relative to the generation's median).
struct StragglerRequest {
  std::string node;
  std::string incarnation;
  int slot = 0;
  int rank = 0;
  double speed = 0;
  std::int64_t step = 0;
  Cooldown cooldown;
};

// What a worker that abandons generation g says (hash gen:<g>:abandoned, field = its rank): whether
// a collective timed out on it (true) or failed otherwise. When every report of a broken
// generation is a timeout, the members that did not report are the hung ones.
struct AbandonReport {
  std::string node;
  int slot = 0;
  bool timed_out = false;
  std::int64_t timeout_ms = 0;  // the collective timeout it ran under
  Cooldown cooldown;
};

// One node/slot's eviction record. It stays after the cool-down (readmitted = true once a
// generation includes the slot again), so that a second eviction knows it is the second.
struct Eviction {
  std::string node;
  std::string incarnation;  // the agent's when evicted: finds the node's lease while it is out
  int slot = 0;
  std::int64_t count = 0;     // evictions of this node/slot so far, this one included
  std::int64_t until_ms = 0;  // wall clock: the cool-down ends
  std::string reason;         // "slow" or "timeout"
  double speed = 0;           // relative speed when evicted ("slow"); 0 for "timeout"
  bool readmitted = false;
};
using Evictions = std::map<std::string, Eviction>;  // by eviction_key(node, slot)

std::string eviction_key(std::string_view node, int slot);
std::string encode(const std::vector<StragglerRequest>& requests);
std::string encode(const AbandonReport& report);
std::string encode(const Evictions& evictions);
std::vector<StragglerRequest> decode_straggler_requests(std::string_view json, std::string_view what);
AbandonReport decode_abandon_report(std::string_view json, std::string_view what);
Evictions decode_evictions(std::string_view json, std::string_view what);

}  // namespace hdp::elastic

namespace hdp::elastic {
// A job id is 1-128 characters of [A-Za-z0-9._-]; throws InvalidArgument otherwise.
void validate_job_id(std::string_view job);
}  // namespace hdp::elastic
