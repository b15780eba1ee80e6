// File: elastic/membership_decision.h
//
// The leader's membership decision, as a pure function of what a tick read: desired_members()
// reads no store and no clock (the caller passes the times), so every rule below can be tested
// from a plain MembershipView.
//  - A member whose lease expired (no live, well-formed lease under its key, or one naming another
//    identity) or whose slots failed (a slot of it no longer healthy) leaves at once: the change
//    is `lost` and is published without waiting.
//  - Joins wait for a settle window from when the change was first seen (pending_since), so that
//    several joins become one change; with no generation yet (the job's first, or the store lost
//    its data) the window is max(settle, rejoin_window), so that every live agent is in the first
//    generation published.
//  - Survivors keep their relative order, with their healthy slots; then, up to max_nodes, come
//    the benched nodes (every slot of them evicted, known only from their eviction records) whose
//    cool-down ended, and the candidates in join order. The other live candidates stand by. Below
//    min_nodes the generation's status is `waiting`.
//  - While a running generation exists, a candidate whose workers are still preparing (the view's
//    `preparing`: elastic/preparing_workers.h) is not admitted: it waits, listed in `preparing`
//    and in `standby` (a leave it makes up is no leave below MIN: see the next sentence), and the
//    settle window runs from when its join was first seen, so that a candidate ready after the
//    window is published at the next tick. The first generation, or one waiting below MIN, waits
//    for nobody's preparation, nor does a generation that would be below MIN without the
//    candidates still preparing (it would wait anyway). A cordoned candidate waits as cordoned,
//    one without a healthy slot as such (neither could be admitted).
//  - A cordoned node is not admitted (hdp cordon): a member stays, a candidate or a benched node
//    waits until it is uncordoned.
//  - A candidate of another build than the live members' (release.h: its lease's version or wire)
//    is refused: neither admitted nor standing by, listed in `refused` with why. With no live
//    member, or live members of different builds, every candidate is admitted (nothing says which
//    build is the job's).
//  - Evictions (eviction_policy.h): the node/slots in their cool-down are left out; a new one is
//    refused when it would leave fewer than min_nodes nodes, and cool-downs are cut short when
//    they would. A new timeout eviction of an incarnation that is dead anyway is dropped.
//  - A straggler request (answered even when refused: its ranks wait at a step boundary), a
//    broken generation and a store that rolled back are answered by a new generation at once,
//    even with the same members.
//  - The next generation is numbered above the current one, what the leading agent saw, and the
//    last_generation of every node admitted (newest_seen + 1).
// The decision's action: nothing (no member, no generation yet), repair (the same members and
// status: only the state and the evictions record may need writing), settle (joins wait), or
// publish.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "elastic/control.h"
#include "elastic/eviction_policy.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

// A node that announced its join (join:<sequence>) and is not a member yet.
struct JoinCandidate {
  std::int64_t sequence = 0;
  std::string node;
  std::string incarnation;
};

// What a tick read, as desired_members() takes it.
struct MembershipView {
  using Clock = std::chrono::steady_clock;

  JobConfig config;
  // The current generation (number 0: none yet) and its members in rank order.
  std::int64_t generation = 0;
  GenerationStatus status = GenerationStatus::kRunning;
  std::span<const Member> members;
  std::span<const JoinCandidate> candidates;  // announced, not members, in join order
  std::map<std::string, NodeLease> leases;    // the live, well-formed leases read, by keys::lease()
  Cordons cordons;
  // The candidates (node, incarnation) whose workers are preparing (read_preparing()).
  std::set<std::pair<std::string, std::string>> preparing;
  Evictions evictions;       // the `evictions` record
  NewEvictions fresh;        // this tick's new evictions (eviction_policy.h)
  std::int64_t seen_by_leader = 0;  // the newest generation the leading agent saw
  bool broken = false;       // the current generation is broken: publish a new one
  bool rolled_back = false;  // the store's generation is below one an agent saw: publish above it
  std::int64_t now_ms = 0;   // wall clock: cool-downs end at an eviction's until_ms
  // The settle window: since when a join-only change has been waiting (none: none is), and now.
  std::optional<Clock::time_point> pending_since;
  Clock::time_point now{};
  Store::Duration settle{0};
  Store::Duration rejoin_window{0};
};

struct MembershipDecision {
  enum class Action { kNothing, kRepair, kSettle, kPublish };
  Action action = Action::kNothing;
  std::vector<Member> members;           // to publish, in order (ranks not assigned)
  GenerationStatus status = GenerationStatus::kRunning;
  std::int64_t newest_seen = 0;          // the generation to publish is numbered above this
  std::vector<JoinCandidate> standby;    // live candidates not admitted (max_nodes, preparing), in join order
  std::vector<JoinCandidate> preparing;  // live candidates not admitted until their workers are set up
  std::vector<JoinCandidate> candidates;  // the view's candidates whose lease is still there
  struct Refused {
    JoinCandidate candidate;
    std::string why;  // release_difference()
  };
  std::vector<Refused> refused;           // live candidates of another build than the members'
  EvictionsApplied evictions;            // the evictions that take effect, and their outcomes
  std::optional<MembershipView::Clock::time_point> pending_since;  // the settle window's start, after
};

MembershipDecision desired_members(const MembershipView& view);

// The identities whose leases the decision needs: the members, the candidates, and the benched
// nodes (a node of the evictions record that is neither, with the incarnation recorded there).
std::vector<std::pair<std::string, std::string>> lease_identities(std::span<const Member> members,
                                                                  std::span<const JoinCandidate> candidates,
                                                                  const Evictions& evictions);

}  // namespace hdp::elastic
