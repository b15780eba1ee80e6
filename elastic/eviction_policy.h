// File: elastic/eviction_policy.h
//
// The leader's evictions (membership.h, "Evictions"): which node/slots to take out of the job for
// a while, which of those evictions take effect, and what is written about them.
//  - New evictions (EvictionPolicy::new_evictions): the current generation's straggler requests
//    (gen:<g>:stragglers, acted on once per generation) and, when the generation is broken, its
//    hung members: when one of its abandon reports (gen:<g>:abandoned) says a collective timed
//    out, the members that never reported. It waits for the live ones' reports first: until all
//    but one member reported, or the longest collective timeout reported has passed since the
//    generation was first seen broken, at most kHungReportWait. Reports of other failures only (a
//    lost peer, not a hang) blame nobody. The n-th eviction of a node/slot lasts
//    Cooldown::after(n - 1).
//  - Which take effect (apply_evictions, pure): an evicted node/slot is left out of every
//    generation published until its cool-down ends, then admitted again like a join. An eviction
//    that would leave fewer than min_nodes nodes is refused, and a cool-down that would is cut
//    short: the job keeps its slow rank (the trainer plans around its speed) rather than stop. A
//    node/slot in the generation again is readmitted (note_readmissions).
//  - What is written (eviction_writes): an `evict`, `evict_refused` or `readmit` event each, and
//    the `evictions` record when it changed, committed with the generation that acts on them.
// The leader alone writes `evictions`; a value that does not decode is ignored (logged once per
// distinct value) and replaced by the next eviction: garbage written by hand must not stop
// publishing. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/warn_once.h"
#include "elastic/membership.h"
#include "elastic/store.h"
#include "elastic/transaction.h"

namespace hdp::elastic {

// This tick's new evictions, in order, and the training step each straggler request named, by
// eviction key (-1: none, a hung rank).
struct NewEvictions {
  std::vector<Eviction> evictions;
  std::map<std::string, std::int64_t> steps;
};

// What became of one eviction this tick.
struct EvictionOutcome {
  enum class Kind { kEvicted, kRefused, kReadmitted };
  Kind kind = Kind::kEvicted;
  Eviction eviction;
  std::int64_t step = -1;      // kEvicted: the step its request named (-1: none)
  std::size_t nodes_left = 0;  // kRefused: the nodes the eviction would have left
};

struct EvictionsApplied {
  std::set<std::string> out;              // the node/slots left out of the generation (eviction keys)
  Evictions record;                       // the `evictions` record after this tick
  bool record_changed = false;            // ... differs from the one read (set by note_readmissions)
  std::vector<EvictionOutcome> outcomes;  // the new evictions, taken or refused, in order; then readmissions
  bool cooldowns_cut = false;             // cool-downs were cut short to keep the job at its minimum
};

// How many nodes the generation would have with the node/slots `out` left out.
using NodesWithout = std::function<std::size_t(const std::set<std::string>& out)>;

// Which evictions take effect at wall-clock time `now_ms` (see the header comment): those of the
// `evictions` record still in their cool-down, and each of `fresh` that leaves min_nodes nodes.
EvictionsApplied apply_evictions(const Evictions& evictions, const NewEvictions& fresh, std::int64_t now_ms,
                                 int min_nodes, const NodesWithout& nodes_without);
// Marks readmitted the records of node/slots out of their cool-down that `members` include again,
// and whether the record now differs from `before`.
void note_readmissions(EvictionsApplied& applied, const Evictions& before, const std::vector<Member>& members);
// The events of `applied` and, when it changed, the `evictions` record; logs each eviction.
std::vector<Write> eviction_writes(const EvictionsApplied& applied, std::int64_t now_ms, int min_nodes);

class EvictionPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kHungReportWait{30};

  // The `evictions` record; none when absent or when it does not decode (see the header comment).
  Evictions read_record(const std::optional<std::string>& value);
  // New evictions this tick asks for: `current`'s straggler requests (`requests`, once per
  // generation) and, when it is `broken` on a timeout, its hung members. Reads the abandon reports
  // of a broken generation. nullopt: wait for more reports.
  std::optional<NewEvictions> new_evictions(Store& store, const Generation& current, bool broken,
                                            const std::optional<std::string>& requests, const Evictions& evictions);
  // A generation was published after generation `number`: its requests were answered.
  void answered(std::int64_t number) { requests_handled_ = number; }

 private:
  std::int64_t requests_handled_ = 0;  // the generation whose straggler requests were applied
  std::optional<std::pair<std::int64_t, Clock::time_point>> broken_seen_;  // generation, first seen broken
  WarnOnce bad_record_;  // the last undecodable `evictions` value
};

}  // namespace hdp::elastic
