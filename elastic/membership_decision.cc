// File: elastic/membership_decision.cc
//
// desired_members() (membership_decision.h): the membership a tick's reads call for.
#include "elastic/membership_decision.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "elastic/job_keys.h"
#include "elastic/release.h"

namespace hdp::elastic {
namespace {

using Identity = std::pair<std::string, std::string>;  // node, incarnation

// Nodes of the evictions record that are neither members nor candidates (every slot of them is
// evicted), with the incarnation recorded there.
std::vector<Identity> benched_nodes(std::span<const Member> members, std::span<const JoinCandidate> candidates,
                                    const Evictions& evictions) {
  std::vector<Identity> benched;
  auto known_node = [&](const std::string& node) {
    return std::any_of(members.begin(), members.end(), [&](const Member& m) { return m.node == node; }) ||
           std::any_of(candidates.begin(), candidates.end(), [&](const JoinCandidate& c) { return c.node == node; }) ||
           std::any_of(benched.begin(), benched.end(), [&](const Identity& b) { return b.first == node; });
  };
  for (const auto& [key, e] : evictions) {
    if (!known_node(e.node)) benched.emplace_back(e.node, e.incarnation);
  }
  return benched;
}

bool same_members(const std::vector<Member>& a, std::span<const Member> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Member& x, const Member& y) { return same_identity(x, y) && x.slots == y.slots; });
}

struct Wanted {
  std::vector<Member> members;
  bool lost = false;  // a member left or lost a slot
  std::int64_t newest_seen = 0;
  std::vector<JoinCandidate> standby;
};

// The members wanted with the node/slots `out` left out: the survivors, the benched nodes, the
// candidates (membership_decision.h).
class Wanting {
 public:
  Wanting(const MembershipView& view, std::vector<Identity> benched, std::span<const JoinCandidate> candidates)
      : view_(view), benched_(std::move(benched)), candidates_(candidates) {}

  Wanted operator()(const std::set<std::string>& out) const {
    Wanted w;
    w.newest_seen = std::max(view_.generation, std::min(view_.seen_by_leader, kMaxGeneration));
    for (const auto& member : view_.members) {
      const NodeLease* lease = live(member.node, member.incarnation);
      if (!lease || !add(w, member.node, member.incarnation, *lease, out) ||
          !std::includes(w.members.back().slots.begin(), w.members.back().slots.end(), member.slots.begin(),
                         member.slots.end())) {
        w.lost = true;
      }
    }
    // A cordoned node is not admitted (hdp cordon): a member stays, a newcomer waits.
    for (const auto& [node, incarnation] : benched_) {
      if (view_.cordons.contains(node)) continue;
      const NodeLease* lease = live(node, incarnation);
      if (lease && static_cast<int>(w.members.size()) < view_.config.max_nodes) add(w, node, incarnation, *lease, out);
    }
    for (const auto& candidate : candidates_) {
      const NodeLease* lease = live(candidate.node, candidate.incarnation);
      if (!lease || view_.cordons.contains(candidate.node)) continue;  // no healthy slot yet, or cordoned
      if (static_cast<int>(w.members.size()) >= view_.config.max_nodes) {
        w.standby.push_back(candidate);
        continue;
      }
      add(w, candidate.node, candidate.incarnation, *lease, out);
    }
    return w;
  }

 private:
  // The lease of (node, incarnation) when it is live, names that identity and has a healthy slot.
  const NodeLease* live(const std::string& node, const std::string& incarnation) const {
    auto it = view_.leases.find(keys::lease(node, incarnation));
    if (it == view_.leases.end() || it->second.node != node || it->second.incarnation != incarnation ||
        it->second.healthy.empty()) {
      return nullptr;
    }
    return &it->second;
  }
  // Adds the node with its healthy slots not `out`; false when none is left.
  static bool add(Wanted& w, const std::string& node, const std::string& incarnation, const NodeLease& lease,
                  const std::set<std::string>& out) {
    std::vector<int> slots;
    for (int slot : lease.healthy) {
      if (!out.contains(eviction_key(lease.node, slot))) slots.push_back(slot);
    }
    if (slots.empty()) return false;
    w.members.push_back({node, incarnation, lease.host, std::move(slots), 0});
    w.newest_seen = std::max(w.newest_seen, lease.last_generation);
    return true;
  }

  const MembershipView& view_;
  std::vector<Identity> benched_;
  std::span<const JoinCandidate> candidates_;
};

// The decision's action once its members are known (membership_decision.h); `lost`: a member left
// or lost a slot.
MembershipDecision::Action action(const MembershipView& view, MembershipDecision& d, bool lost, bool evicting) {
  using Action = MembershipDecision::Action;
  // Every straggler request is answered by a new generation, also when all were refused (the same
  // members again: the ranks, which stopped at a step boundary to wait for it, continue from
  // memory); a broken or rolled-back generation is replaced even by the same members.
  const bool replace = view.rolled_back || view.broken || evicting;
  if (!replace && same_members(d.members, view.members) && d.status == view.status && view.generation > 0) {
    d.pending_since.reset();
    return Action::kRepair;
  }
  if (d.members.empty() && view.generation == 0) return Action::kNothing;
  if (!replace && !lost && d.members.size() >= view.members.size()) {
    // Joins only: wait for the settle window so that a wave of joins becomes one generation.
    if (!d.pending_since) d.pending_since = view.now;
    // With no generation in the store (the job's first, or the store lost its data), wait for
    // every live agent: the returning ones' leases carry the numbers to publish above.
    const auto window = view.generation == 0 ? std::max(view.settle, view.rejoin_window) : view.settle;
    if (view.now - *d.pending_since < window) return Action::kSettle;
  }
  return Action::kPublish;
}

// The job's build (release.h): the lease of a live member, one that records its wire if any does,
// when the live members name one version and at most one wire; null when none is live, or when
// they differ (members of two builds, admitted together at a start or after the store lost its
// data: nothing says which is the job's). Not release_difference() against the first: a wire left
// unrecorded (an older agent) matches any, which would let wires 1 and 2 pass as one.
const NodeLease* job_build(const MembershipView& view) {
  const NodeLease* job = nullptr;
  for (const auto& member : view.members) {
    auto it = view.leases.find(keys::lease(member.node, member.incarnation));
    if (it == view.leases.end() || !same_identity(it->second, member)) continue;
    const NodeLease& lease = it->second;
    if (!job) {
      job = &lease;
      continue;
    }
    if (lease.version != job->version) return nullptr;
    if (lease.wire > 0 && job->wire > 0 && lease.wire != job->wire) return nullptr;
    if (job->wire == 0 && lease.wire > 0) job = &lease;  // the reference records the wire
  }
  return job;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> lease_identities(std::span<const Member> members,
                                                                  std::span<const JoinCandidate> candidates,
                                                                  const Evictions& evictions) {
  std::vector<Identity> identities;
  for (const auto& member : members) identities.emplace_back(member.node, member.incarnation);
  for (const auto& candidate : candidates) identities.emplace_back(candidate.node, candidate.incarnation);
  for (auto& benched : benched_nodes(members, candidates, evictions)) identities.push_back(std::move(benched));
  return identities;
}

MembershipDecision desired_members(const MembershipView& view) {
  MembershipDecision d;
  auto benched = benched_nodes(view.members, view.candidates, view.evictions);
  // Candidates whose lease is gone or was replaced are dead.
  for (const auto& c : view.candidates) {
    if (view.leases.contains(keys::lease(c.node, c.incarnation))) d.candidates.push_back(c);
  }
  // A member that never reported on a broken generation because its incarnation is dead (no
  // lease) is gone anyway; evicting its node/slot would only keep out the node's next incarnation.
  NewEvictions fresh = view.fresh;
  std::erase_if(fresh.evictions, [&](const Eviction& e) {
    return e.reason == "timeout" && !view.leases.contains(keys::lease(e.node, e.incarnation));
  });
  // Candidates of another build than the job's are refused before anything else is decided; those
  // still preparing wait while ranks run (preparing_workers.h; a cordoned one waits anyway).
  std::vector<JoinCandidate> admissible, ready;
  const NodeLease* job = job_build(view);
  const bool running = view.generation > 0 && view.status == GenerationStatus::kRunning;
  for (const auto& c : d.candidates) {
    const auto lease = view.leases.find(keys::lease(c.node, c.incarnation));
    if (job && lease != view.leases.end() && same_identity(lease->second, c)) {
      if (auto why = release_difference(lease->second, *job)) {
        d.refused.push_back({c, std::move(*why)});
        continue;
      }
    }
    admissible.push_back(c);
    // One that could not be admitted anyway (no healthy slot yet, or cordoned) waits as such.
    const bool admittable = lease != view.leases.end() && same_identity(lease->second, c) &&
                            !lease->second.healthy.empty() && !view.cordons.contains(c.node);
    if (running && admittable && view.preparing.contains({c.node, c.incarnation})) {
      d.preparing.push_back(c);
    } else {
      ready.push_back(c);
    }
  }
  auto decide = [&](const std::vector<JoinCandidate>& candidates) {
    const Wanting want(view, benched, candidates);
    EvictionsApplied evictions =
        apply_evictions(view.evictions, fresh, view.now_ms, view.config.min_nodes,
                        [&](const std::set<std::string>& out) { return want(out).members.size(); });
    Wanted wanted = want(evictions.out);
    return std::pair{std::move(evictions), std::move(wanted)};
  };
  auto [evictions, wanted] = decide(ready);
  // Below MIN the job would wait anyway: nobody is held up by the candidates still preparing.
  if (!d.preparing.empty() && static_cast<int>(wanted.members.size()) < view.config.min_nodes) {
    std::tie(evictions, wanted) = decide(admissible);
    d.preparing.clear();
  }
  d.evictions = std::move(evictions);
  note_readmissions(d.evictions, view.evictions, wanted.members);
  d.members = std::move(wanted.members);
  d.status = static_cast<int>(d.members.size()) >= view.config.min_nodes ? GenerationStatus::kRunning
                                                                        : GenerationStatus::kWaiting;
  d.newest_seen = wanted.newest_seen;
  // Standing by: the candidates beyond max_nodes and those still preparing, in join order. A
  // preparing one makes up a leave as well (it is admitted when the job would be below MIN without
  // it), and a leader that takes over resumes reading the joins before it.
  for (const auto& c : d.candidates) {
    auto listed = [&](const std::vector<JoinCandidate>& in) {
      return std::any_of(in.begin(), in.end(), [&](const JoinCandidate& x) { return same_identity(x, c); });
    };
    if (listed(wanted.standby) || listed(d.preparing)) d.standby.push_back(c);
  }
  d.pending_since = view.pending_since;
  d.action = action(view, d, wanted.lost, !fresh.evictions.empty());
  // A join seen while its workers prepare: its settle window runs meanwhile (a publication, or a
  // generation published since, starts it again).
  if (!d.preparing.empty() && d.action != MembershipDecision::Action::kPublish && !d.pending_since) {
    d.pending_since = view.pending_since.value_or(view.now);
  }
  return d;
}

}  // namespace hdp::elastic
