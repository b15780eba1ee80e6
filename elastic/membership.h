// File: elastic/membership.h
//
// The records the rendezvous keeps in the store, and their JSON forms. Every decoder validates
// what it reads: a value written by another program, an older version or by hand gives an
// InvalidArgument naming the key and the field, never a crash or a wrong action.
#pragma once

#include <cstdint>
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
  std::string version;
  int slots = 0;
  std::vector<int> healthy;          // local ranks whose worker is running
  std::int64_t last_generation = 0;  // highest generation this agent has seen (survives Redis data loss)
};

struct Member {
  std::string node;
  std::string incarnation;
  std::string host;
  std::vector<int> slots;  // local ranks, ascending; global ranks first_rank .. first_rank+size-1
  int first_rank = 0;

  bool same_identity(const Member& other) const { return node == other.node && incarnation == other.incarnation; }
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

}  // namespace hdp::elastic

namespace hdp::elastic {
// A job id is 1-128 characters of [A-Za-z0-9._-]; throws InvalidArgument otherwise.
void validate_job_id(std::string_view job);
}  // namespace hdp::elastic
