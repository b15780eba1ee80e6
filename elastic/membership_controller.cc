#include "elastic/membership_controller.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::elastic {
namespace {

bool same_members(const std::vector<Member>& a, const std::vector<Member>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Member& x, const Member& y) {
    return x.same_identity(y) && x.slots == y.slots;
  });
}

std::string node_list(const std::vector<Member>& members) {
  std::string text;
  for (const auto& member : members) text += (text.empty() ? "" : ",") + member.node;
  return text;
}

}  // namespace

MembershipController::MembershipController(std::shared_ptr<Store> job_store, std::string leader_id, JobConfig config,
                                           Store::Duration settle, Store::Duration rejoin_window,
                                           Store::Duration full_read_every, StoreTroubleRule trouble)
    : store_(std::move(job_store)),
      leader_id_(std::move(leader_id)),
      config_(config),
      settle_(settle),
      rejoin_window_(rejoin_window),
      full_read_every_(full_read_every),
      trouble_(trouble) {
  if (full_read_every.count() < 0) throw InvalidArgument("MembershipController: full_read_every must be >= 0");
}

std::map<std::string, NodeLease> MembershipController::read_leases(const std::vector<std::string>& keys, bool force) {
  const auto now = Clock::now();
  const bool full = force || full_read_every_.count() == 0 || keys != fully_read_keys_ || now >= next_full_read_;
  std::vector<std::string> to_read;
  if (full) {
    to_read = keys;
  } else {
    for (const auto& key : keys) {
      auto it = lease_cache_.find(key);
      if (it == lease_cache_.end() || it->second.check_at <= now) to_read.push_back(key);
    }
  }
  if (full) lease_cache_.clear();
  if (!to_read.empty()) {
    auto raw = store_->multi_get(to_read);
    // Read after the values: a TTL measured from `now` (before both) can only run out early, and
    // a lease looked at early is merely read again.
    std::vector<std::optional<Store::Duration>> ttls;
    if (full_read_every_.count() > 0) ttls = store_->remaining_ttl(to_read);
    for (std::size_t i = 0; i < to_read.size(); ++i) {
      lease_cache_.erase(to_read[i]);
      if (!raw[i]) continue;
      try {
        // A lease with no TTL (or one that vanished between the two reads) is read again next tick.
        const auto check_at = i < ttls.size() && ttls[i] ? now + *ttls[i] : now;
        lease_cache_.emplace(to_read[i], CachedLease{decode_node_lease(*raw[i], to_read[i]), check_at});
      } catch (const InvalidArgument& e) {
        log()->warn("treating node as gone: {}", e.what());
      }
    }
  }
  if (full) {
    fully_read_keys_ = keys;
    next_full_read_ = now + full_read_every_;
  }
  std::map<std::string, NodeLease> leases;
  for (const auto& key : keys) {
    if (auto it = lease_cache_.find(key); it != lease_cache_.end()) leases.emplace(key, it->second.lease);
  }
  return leases;
}

void MembershipController::load_generation(std::int64_t number) {
  if (number == current_.number) return;
  if (number == 0) {
    current_ = Generation{};
  } else {
    const std::string key = keys::generation(number);
    auto record = store_->get(key);
    if (!record) throw InvalidArgument("Redis key " + quote_value(key) + " is missing although 'gen' names it");
    Generation loaded = decode_generation(*record, key);
    // Publishing requires `gen` to equal current_.number: a record describing another generation
    // would make every publication fail, silently, forever.
    if (loaded.number != number) {
      throw InvalidArgument("invalid value in Redis key " + quote_value(key) + ": it describes generation " +
                            std::to_string(loaded.number));
    }
    current_ = std::move(loaded);
  }
  pending_since_.reset();  // a join-only change under way was relative to the previous generation
  // A generation published by another leader may have admitted some of our candidates.
  std::erase_if(candidates_, [&](const Candidate& c) {
    return std::any_of(current_.members.begin(), current_.members.end(),
                       [&](const Member& m) { return m.node == c.node && m.incarnation == c.incarnation; });
  });
  if (joins_read_ < current_.joins_seen) joins_read_ = current_.joins_seen;
}

void MembershipController::read_new_joins(std::int64_t join_count) {
  if (join_count < joins_read_) {
    // Counters only go up: the store lost its data (restarted empty, flushed) or someone removed
    // `joins`. Announcements are numbered from its new start; one read again is a known identity.
    log()->warn("the join counter went back from {} to {}: the store lost data; reading announcements from 1",
                joins_read_, join_count);
    joins_read_ = 0;
    holes_.clear();
  }
  // The pending holes again, then new numbers: at most kJoinsPerTick keys a tick in all, so a
  // counter far ahead of its announcements (garbage, or a wave of joins) costs bounded memory and
  // time. An announcement missing when read (its agent is between drawing the number and writing
  // it, died in between, or the key was removed or expired) is looked for again each tick, for up
  // to kJoinHoleWait, without holding back the announcements after it.
  std::vector<std::int64_t> numbers;
  for (const auto& [sequence, since] : holes_) numbers.push_back(sequence);
  const std::int64_t room = kJoinsPerTick - static_cast<std::int64_t>(holes_.size());
  const std::int64_t last = std::min(join_count, joins_read_ + std::max<std::int64_t>(room, 0));
  for (std::int64_t sequence = joins_read_ + 1; sequence <= last; ++sequence) numbers.push_back(sequence);
  joins_read_ = std::max(joins_read_, last);
  if (numbers.empty()) return;
  std::vector<std::string> announcement_keys;
  for (std::int64_t sequence : numbers) announcement_keys.push_back(keys::join(sequence));
  auto values = store_->multi_get(announcement_keys);
  const auto now = Clock::now();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t sequence = numbers[i];
    if (!values[i]) {
      auto [hole, added] = holes_.emplace(sequence, now);
      if (!added && now - hole->second >= kJoinHoleWait) {
        log()->warn("join announcement {} never appeared; skipping it", quote_value(announcement_keys[i]));
        holes_.erase(hole);
      }
      continue;
    }
    holes_.erase(sequence);
    auto value = nlohmann::json::parse(*values[i], nullptr, false);
    if (!value.is_object() || !value.contains("node") || !value["node"].is_string() ||
        !value.contains("incarnation") || !value["incarnation"].is_string()) {
      log()->warn("ignoring malformed join announcement in Redis key {}: {}", quote_value(announcement_keys[i]),
                  quote_value(*values[i]));
      continue;
    }
    Candidate candidate{sequence, value["node"], value["incarnation"]};
    // An identity announced twice (or already a member) is one candidate.
    const bool known =
        std::any_of(candidates_.begin(), candidates_.end(),
                    [&](const Candidate& c) { return c.node == candidate.node && c.incarnation == candidate.incarnation; }) ||
        std::any_of(current_.members.begin(), current_.members.end(), [&](const Member& m) {
          return m.node == candidate.node && m.incarnation == candidate.incarnation;
        });
    if (!known) candidates_.push_back(std::move(candidate));
  }
  // Newcomers join in announcement order, also when a hole was filled after later numbers.
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const Candidate& x, const Candidate& y) { return x.sequence < y.sequence; });
}

Cordons MembershipController::read_cordons(const std::optional<std::string>& value) {
  if (!value) return {};
  try {
    Cordons cordons = decode_cordons(*value, keys::kCordons);
    bad_cordons_.reset();
    return cordons;
  } catch (const InvalidArgument& e) {
    if (bad_cordons_ != *value) log()->warn("ignoring the cordons: {}", e.what());
    bad_cordons_ = *value;
    return {};
  }
}

Evictions MembershipController::read_evictions(const std::optional<std::string>& value) {
  if (!value) return {};
  try {
    Evictions evictions = decode_evictions(*value, keys::kEvictions);
    bad_evictions_.reset();
    return evictions;
  } catch (const InvalidArgument& e) {
    // Only the leader writes it; garbage (by hand) must not stop publishing. The next eviction
    // replaces it.
    if (bad_evictions_ != *value) log()->warn("ignoring the evictions record: {}", e.what());
    bad_evictions_ = *value;
    return {};
  }
}

std::optional<std::vector<Eviction>> MembershipController::new_evictions(bool broken,
                                                                         const std::optional<std::string>& requests,
                                                                         const Evictions& evictions) {
  std::vector<Eviction> fresh;
  const std::int64_t now = now_ms();
  steps_.clear();
  auto evict = [&](const std::string& node, int slot, const std::string& reason, double speed, const Cooldown& cooldown,
                   std::int64_t step) {
    auto member = std::find_if(current_.members.begin(), current_.members.end(),
                               [&](const Member& m) { return m.node == node; });
    if (member == current_.members.end() ||
        std::find(member->slots.begin(), member->slots.end(), slot) == member->slots.end()) {
      return;  // not in this generation (any more)
    }
    auto before = evictions.find(eviction_key(node, slot));
    const std::int64_t previous = before == evictions.end() ? 0 : before->second.count;
    steps_[eviction_key(node, slot)] = step;
    fresh.push_back(Eviction{.node = node,
                             .incarnation = member->incarnation,
                             .slot = slot,
                             .count = previous + 1,
                             .until_ms = now + cooldown.after(previous),
                             .reason = reason,
                             .speed = speed});
  };
  if (requests && current_.number > 0 && requests_handled_ != current_.number) {
    try {
      for (const auto& r : decode_straggler_requests(*requests, keys::stragglers(current_.number))) {
        evict(r.node, r.slot, "slow", r.speed, r.cooldown, r.step);
      }
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring the straggler requests: {}", e.what());
      requests_handled_ = current_.number;
    }
  }
  if (!broken) return fresh;
  // Which members of the broken generation said they abandoned it, and whether on a timeout.
  const std::string key = keys::abandoned(current_.number);
  std::map<int, AbandonReport> reports;
  for (const auto& [field, value] : store_->hash_get_all(key)) {
    try {
      const auto rank = decode_counter(field, key, current_.world_size() - 1);
      reports.emplace(static_cast<int>(rank), decode_abandon_report(value, key));
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring an abandon report: {}", e.what());
    }
  }
  const auto timed_out = std::find_if(reports.begin(), reports.end(), [](const auto& r) { return r.second.timed_out; });
  if (timed_out == reports.end()) return fresh;  // a lost peer, not a hang: nobody to blame
  std::int64_t wait_ms = 0;
  for (const auto& [rank, report] : reports) wait_ms = std::max(wait_ms, report.timeout_ms);
  const auto wait = std::min<Clock::duration>(std::chrono::milliseconds(wait_ms), kHungReportWait);
  if (!broken_seen_ || broken_seen_->first != current_.number) broken_seen_.emplace(current_.number, Clock::now());
  const int world = current_.world_size();
  const int silent = world - static_cast<int>(reports.size());
  if (silent > 1 && Clock::now() - broken_seen_->second < wait) return std::nullopt;  // the live ones report soon
  for (const auto& member : current_.members) {
    for (std::size_t i = 0; i < member.slots.size(); ++i) {
      const int rank = member.first_rank + static_cast<int>(i);
      if (reports.contains(rank)) continue;
      log()->warn("generation {} broke on a timeout and rank {} ({}/{}) never reported: evicting it as hung",
                  current_.number, rank, member.node, member.slots[i]);
      evict(member.node, member.slots[i], "timeout", 0, timed_out->second.cooldown, -1);
    }
  }
  return fresh;
}

bool MembershipController::hold_for_store_trouble(Clock::time_point began, std::int64_t number,
                                                  std::int64_t newest_known,
                                                  const std::map<std::string, NodeLease>& leases) {
  if (trouble_.hold.count() <= 0) return true;
  const auto now = Clock::now();
  auto hold = [&](const std::string& why) {
    if (now >= judge_after_) log()->warn("{}: judging no lease for {} ms", why, trouble_.hold.count());
    judge_after_ = std::max(judge_after_, now + trouble_.hold);
  };
  if (trouble_.slow_read.count() > 0 && now - began > trouble_.slow_read) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - began).count();
    hold("the store took " + std::to_string(ms) + " ms to answer this tick's reads");
  }
  if (number > 0 && number < newest_known && rollback_held_ != number) {
    rollback_held_ = number;
    hold("the store's generation went back from " + std::to_string(newest_known) + " to " + std::to_string(number) +
         " (it rolled back: restored from an older snapshot, or a failover to a replica that missed the last writes)");
  }
  // The leader is alive by definition: its own lease gone means the store lost or expired it.
  for (const auto& member : current_.members) {
    if (member.node + "/" + member.incarnation == leader_id_ && !leases.contains(keys::lease(member.node, member.incarnation))) {
      hold("this leader's own lease (" + leader_id_ + ") is gone");
    }
  }
  if (now >= judge_after_ && mass_expiry_held_ != current_.number) {
    // A member whose node registered again (a live candidate of the same node: its agent was
    // restarted) is replaced, not lost to the store: it does not count.
    std::size_t missing = 0;
    for (const auto& member : current_.members) {
      const bool replaced = std::any_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) {
        return c.node == member.node && leases.contains(keys::lease(c.node, c.incarnation));
      });
      missing += !replaced && !leases.contains(keys::lease(member.node, member.incarnation));
    }
    if (missing >= 2 && 2 * missing > current_.members.size()) {
      mass_expiry_held_ = current_.number;
      hold(std::to_string(missing) + " of the " + std::to_string(current_.members.size()) +
           " members' leases ran out at once: taken as the store's trouble, not the nodes' (those still gone after "
           "the hold are dropped)");
    }
  }
  return now >= judge_after_;
}

namespace {

// "n4,n5": the nodes standing by, in join order (the state's `standby` field).
template <typename Candidates>
std::string standby_list(const Candidates& standby) {
  std::string text;
  for (const auto& c : standby) text += (text.empty() ? "" : ",") + c.node;
  return text;
}

}  // namespace

std::optional<std::int64_t> MembershipController::tick(std::int64_t seen_by_leader) {
  const auto began = Clock::now();
  auto head = store_->multi_get({keys::kGeneration, keys::kJoinCount, keys::broken(current_.number), keys::kEvictions,
                                 keys::stragglers(current_.number), keys::kCordons});
  const std::int64_t number = head[0] ? decode_generation_number(*head[0], keys::kGeneration) : 0;
  // The broken flag and the requests read belong to the generation we had cached; they count only
  // if it is still current.
  const bool cached_is_current = number == current_.number && number > 0;
  const bool broken = head[2].has_value() && cached_is_current;
  if (!cached_is_current) head[4].reset();
  load_generation(number);
  if (joins_read_ < 0) joins_read_ = current_.joins_seen;
  read_new_joins(head[1] ? decode_counter(*head[1], keys::kJoinCount, kMaxJoinCount) : 0);

  Evictions evictions = read_evictions(head[3]);
  const Cordons cordons = read_cordons(head[5]);
  auto fresh = new_evictions(broken, head[4], evictions);
  if (!fresh) return std::nullopt;

  // The leases of every member, candidate and benched node (one whose every slot is evicted,
  // known from its eviction records), by identity: a lease key names its incarnation, so a
  // missing key is a dead (or replaced) incarnation. Read as read_leases() says.
  std::vector<std::pair<std::string, std::string>> benched;  // node, incarnation
  auto known_node = [&](const std::string& node) {
    return std::any_of(current_.members.begin(), current_.members.end(), [&](const Member& m) { return m.node == node; }) ||
           std::any_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.node == node; }) ||
           std::any_of(benched.begin(), benched.end(), [&](const auto& b) { return b.first == node; });
  };
  for (const auto& [key, e] : evictions) {
    if (!known_node(e.node)) benched.emplace_back(e.node, e.incarnation);
  }
  std::vector<std::string> lease_keys;
  for (const auto& member : current_.members) lease_keys.push_back(keys::lease(member.node, member.incarnation));
  for (const auto& candidate : candidates_) lease_keys.push_back(keys::lease(candidate.node, candidate.incarnation));
  for (const auto& [node, incarnation] : benched) lease_keys.push_back(keys::lease(node, incarnation));
  // by lease key; only well-formed ones
  const std::map<std::string, NodeLease> leases = read_leases(lease_keys, broken || !fresh->empty() || !cached_is_current);
  // The newest generation any live agent saw (each lease carries its agent's): above the store's
  // own when the store rolled back.
  std::int64_t newest_known = std::min(seen_by_leader, kMaxGeneration);
  for (const auto& [key, lease] : leases) newest_known = std::max(newest_known, lease.last_generation);
  const bool rolled_back = number > 0 && number < newest_known;
  if (!hold_for_store_trouble(began, number, newest_known, leases)) return std::nullopt;
  // A member that never reported on a broken generation because its incarnation is dead (no
  // lease) is gone anyway; evicting its node/slot would only keep out the node's next incarnation.
  std::erase_if(*fresh, [&](const Eviction& e) {
    return e.reason == "timeout" && !leases.contains(keys::lease(e.node, e.incarnation));
  });
  auto live = [&](const std::string& node, const std::string& incarnation) -> const NodeLease* {
    auto it = leases.find(keys::lease(node, incarnation));
    return it != leases.end() && it->second.node == node && it->second.incarnation == incarnation &&
                   !it->second.healthy.empty()
               ? &it->second
               : nullptr;
  };

  // The members wanted, with the slots that are evicted now (`out`) left out.
  const std::int64_t now = now_ms();
  struct Wanted {
    std::vector<Member> members;
    bool lost = false;
    std::int64_t newest_seen = 0;
    std::vector<Candidate> standby;
  };
  auto want = [&](const std::map<std::string, bool>& out) {
    Wanted w;
    w.newest_seen = std::max(current_.number, std::min(seen_by_leader, kMaxGeneration));
    auto slots_of = [&](const NodeLease& lease) {
      std::vector<int> slots;
      for (int slot : lease.healthy) {
        if (!out.contains(eviction_key(lease.node, slot))) slots.push_back(slot);
      }
      return slots;
    };
    auto add = [&](const std::string& node, const std::string& incarnation, const NodeLease& lease) {
      std::vector<int> slots = slots_of(lease);
      if (slots.empty()) return false;
      w.members.push_back({node, incarnation, lease.host, std::move(slots), 0});
      w.newest_seen = std::max(w.newest_seen, lease.last_generation);
      return true;
    };
    for (const auto& member : current_.members) {
      const NodeLease* lease = live(member.node, member.incarnation);
      if (!lease || !add(member.node, member.incarnation, *lease) ||
          !std::includes(w.members.back().slots.begin(), w.members.back().slots.end(), member.slots.begin(),
                         member.slots.end())) {
        w.lost = true;
      }
    }
    // A cordoned node is not admitted (hdp cordon): a member stays, a newcomer waits.
    for (const auto& [node, incarnation] : benched) {
      if (cordons.contains(node)) continue;
      const NodeLease* lease = live(node, incarnation);
      if (lease && static_cast<int>(w.members.size()) < config_.max_nodes) add(node, incarnation, *lease);
    }
    for (const auto& candidate : candidates_) {
      const NodeLease* lease = live(candidate.node, candidate.incarnation);
      if (!lease || cordons.contains(candidate.node)) continue;  // no healthy slot yet, or cordoned
      if (static_cast<int>(w.members.size()) >= config_.max_nodes) {
        w.standby.push_back(candidate);
        continue;
      }
      add(candidate.node, candidate.incarnation, *lease);
    }
    return w;
  };
  std::map<std::string, bool> out;  // node/slots in their cool-down
  for (const auto& [key, e] : evictions) {
    if (e.until_ms > now) out.emplace(key, true);
  }
  // Candidates whose lease is gone or was replaced are dead.
  std::erase_if(candidates_, [&](const Candidate& c) { return !leases.contains(keys::lease(c.node, c.incarnation)); });

  std::vector<Write> extra;  // evictions and their events, committed with the generation
  Evictions next_evictions = evictions;
  Wanted wanted = want(out);
  for (const Eviction& e : *fresh) {
    const std::string key = eviction_key(e.node, e.slot);
    auto with = out;
    with.emplace(key, true);
    Wanted w = want(with);
    if (static_cast<int>(w.members.size()) < config_.min_nodes) {
      log()->warn("keeping {} ({}): evicting it would leave {} node(s), below the minimum of {}", key, e.reason,
                  w.members.size(), config_.min_nodes);
      extra.push_back(event_write("evict_refused", {{"node", e.node},
                                                    {"slot", std::to_string(e.slot)},
                                                    {"reason", e.reason},
                                                    {"speed", std::to_string(e.speed)},
                                                    {"why", "the job is at its minimum size"}}));
      continue;
    }
    out = std::move(with);
    wanted = std::move(w);
    next_evictions[key] = e;
    log()->warn("evicting {} ({}{}) for {:.1f} s (eviction {} of this node/slot)", key, e.reason,
                e.reason == "slow" ? ", speed " + std::to_string(e.speed) : std::string(), (e.until_ms - now) / 1000.0,
                e.count);
    extra.push_back(event_write("evict", {{"node", e.node},
                                          {"slot", std::to_string(e.slot)},
                                          {"reason", e.reason},
                                          {"speed", std::to_string(e.speed)},
                                          {"count", std::to_string(e.count)},
                                          {"step", steps_[key] >= 0 ? std::to_string(steps_[key]) : "-"},
                                          {"cooldown_s", std::to_string((e.until_ms - now) / 1000.0)},
                                          {"until_ms", std::to_string(e.until_ms)}}));
  }
  // A cool-down never holds the job below its minimum: those in a cool-down come back early.
  if (static_cast<int>(wanted.members.size()) < config_.min_nodes && !out.empty()) {
    Wanted all = want({});
    if (static_cast<int>(all.members.size()) >= config_.min_nodes) {
      log()->warn("admitting evicted workers before their cool-down ends: the job is below its minimum of {} node(s)",
                  config_.min_nodes);
      wanted = std::move(all);
      out.clear();
    }
  }
  std::vector<Member> desired = std::move(wanted.members);
  bool lost = wanted.lost;
  // Evicted workers back in: readmitted, once their generation is published.
  for (auto& [key, e] : next_evictions) {
    if (e.readmitted || out.contains(key)) continue;
    const bool in = std::any_of(desired.begin(), desired.end(), [&](const Member& m) {
      return m.node == e.node && std::find(m.slots.begin(), m.slots.end(), e.slot) != m.slots.end();
    });
    if (!in) continue;
    e.readmitted = true;
    extra.push_back(event_write("readmit", {{"node", e.node}, {"slot", std::to_string(e.slot)},
                                            {"count", std::to_string(e.count)}}));
  }

  if (next_evictions.size() != evictions.size() ||
      std::any_of(next_evictions.begin(), next_evictions.end(), [&](const auto& kv) {
        auto it = evictions.find(kv.first);
        return it == evictions.end() || it->second.count != kv.second.count ||
               it->second.readmitted != kv.second.readmitted;
      })) {
    extra.push_back(Write::set(keys::kEvictions, encode(next_evictions)));
  }
  const bool should_run = static_cast<int>(desired.size()) >= config_.min_nodes;
  const auto status = should_run ? GenerationStatus::kRunning : GenerationStatus::kWaiting;
  if (rolled_back) {
    // What the workers run is newer than what the store says: republish, above every number seen.
    log()->warn("the store's generation {} is older than generation {} that an agent saw (the store rolled back); "
                "publishing the live members above it",
                number, newest_known);
    extra.push_back(event_write("store_rollback", {{"from", std::to_string(newest_known)}, {"to", std::to_string(number)}}));
    lost = true;
  } else if (broken) {
    log()->warn("generation {} is broken ({}); publishing a new one", current_.number, quote_value(*head[2]));
    lost = true;
  } else if (!fresh->empty()) {
    // Every request is answered by a new generation, also when all were refused (the same
    // members again: the ranks, which stopped at a step boundary to wait for it, continue from
    // memory).
    lost = true;
  } else if (same_members(desired, current_.members) && status == current_.status && current_.number > 0) {
    pending_since_.reset();
    // The nodes standing by changed (a spare registered or left): the state lists them.
    const std::string standby = standby_list(wanted.standby);
    Fields state = missing_state_fields(standby);
    if (standby != standby_written_) {
      state.emplace_back("standby", standby);  // also when missing: a field set twice to one value
      extra.push_back(Write::set(keys::kStandby, standby));
    }
    if (!state.empty()) {
      state.emplace_back("updated_at_ms", std::to_string(now_ms()));
      extra.push_back(Write::hash_set(keys::kState, std::move(state)));
    }
    if (!extra.empty()) {
      // Readmissions of workers already back (a cool-down cut short), the standby list, the
      // state's generation fields put back: fenced like a publication.
      Transaction txn;
      txn.require(keys::kGeneration, std::to_string(current_.number)).require(keys::kLeader, leader_id_);
      txn.require_absent(keys::kOutcome);  // an ended job's state is final
      for (auto& write : extra) txn.add(std::move(write));
      if (commit_with_job_state(*store_, txn)) standby_written_ = standby;
    }
    return std::nullopt;
  }
  if (desired.empty() && current_.number == 0) return std::nullopt;
  if (!lost && desired.size() >= current_.members.size()) {
    // Joins only: wait for the settle window so that a wave of joins becomes one generation.
    const auto now_steady = Clock::now();
    if (!pending_since_) pending_since_ = now_steady;
    // With no generation in the store (the job's first, or the store lost its data), wait for
    // every live agent: the returning ones' leases carry the numbers to publish above.
    const auto window = current_.number == 0 ? std::max(settle_, rejoin_window_) : settle_;
    if (now_steady - *pending_since_ < window) return std::nullopt;
  }
  const std::int64_t handled = current_.number;
  auto published = publish(std::move(desired), wanted.newest_seen, wanted.standby, std::move(extra));
  if (published) requests_handled_ = handled;
  return published;
}

Fields MembershipController::missing_state_fields(const std::string& standby) {
  const auto now = Clock::now();
  if (now < next_state_check_) return {};
  next_state_check_ = now + full_read_every_;
  const auto state = store_->hash_get_all(keys::kState);
  // What the publication of the current generation wrote; a field another writer keeps (rank 0's
  // status while it trains, a drain's) is put back only when it is missing.
  const Fields published = {{"status", encode(current_.status)},
                            {"generation", std::to_string(current_.number)},
                            {"world_size", std::to_string(current_.world_size())},
                            {"nodes", std::to_string(current_.members.size())},
                            {"standby", standby}};
  Fields missing;
  for (const auto& [field, value] : published) {
    if (!state.count(field)) missing.emplace_back(field, value);
  }
  if (!missing.empty()) {
    log()->warn("the job's state hash lacks {} field(s) of generation {} (deleted by hand?); writing them again",
                missing.size(), current_.number);
  }
  return missing;
}

std::optional<std::int64_t> MembershipController::publish(std::vector<Member> members, std::int64_t newest_seen,
                                                          const std::vector<Candidate>& standby,
                                                          std::vector<Write> extra) {
  if (newest_seen >= kMaxGeneration) {
    // Every input was range-checked, so this takes 2^53 - 1 generations or a value written by
    // hand; wrapping around would hand every worker a negative fencing token. Refuse, loudly
    // (at most every 10 s: the tick runs 5 times a second).
    const auto now = Clock::now();
    if (!exhausted_logged_ || now - *exhausted_logged_ >= std::chrono::seconds(10)) {
      log()->error("refusing to publish: the next generation number would exceed {} (the newest seen is {}); "
                   "someone must reset the job's keys",
                   kMaxGeneration, newest_seen);
      exhausted_logged_ = now;
    }
    return std::nullopt;
  }
  Generation next;
  next.number = newest_seen + 1;
  next.members = std::move(members);
  next.assign_ranks();
  next.status = static_cast<int>(next.members.size()) >= config_.min_nodes ? GenerationStatus::kRunning
                                                                           : GenerationStatus::kWaiting;
  // A new leader resumes reading after joins_seen: not past a standby candidate or a pending hole.
  next.joins_seen = standby.empty() ? joins_read_ : standby.front().sequence - 1;
  if (!holes_.empty()) next.joins_seen = std::min(next.joins_seen, holes_.begin()->first - 1);
  next.created_ms = now_ms();

  Transaction txn;
  if (current_.number == 0) {
    txn.require_absent(keys::kGeneration);
  } else {
    txn.require(keys::kGeneration, std::to_string(current_.number));
  }
  txn.require(keys::kLeader, leader_id_).require_absent(keys::kOutcome);
  // The record (1.4 MB at 12,500 nodes), encoded once: stored, and its digest in the stream entry.
  const std::string encoded = encode(next);
  txn.add(Write::set(keys::kGeneration, std::to_string(next.number)))
      .add(Write::set(keys::generation(next.number), encoded));
  // The previous record stays readable for an hour, for workers still catching up and for people.
  if (current_.number > 0) txn.add(Write::expire(keys::generation(current_.number), std::chrono::hours(1)));
  const std::string world = std::to_string(next.world_size());
  const std::string standby_nodes = standby_list(standby);
  txn.add(Write::hash_set(keys::kState, {{"status", encode(next.status)},
                                         {"generation", std::to_string(next.number)},
                                         {"world_size", world},
                                         {"nodes", std::to_string(next.members.size())},
                                         {"standby", standby_nodes},
                                         {"updated_at_ms", std::to_string(now_ms())}}));
  txn.add(Write::set(keys::kStandby, standby_nodes));
  txn.add(event_write("resize", {{"generation", std::to_string(next.number)},
                                 {"world_size", world},
                                 {"status", encode(next.status)},
                                 {"members", node_list(next.members)},
                                 {"standby", std::to_string(standby.size())}}));
  // The stream entry tells agents the record too: its digest and, over the record before, the
  // change (elastic/membership.h, "A generation record by difference").
  std::vector<std::pair<std::string, std::string>> entry{{"gen", std::to_string(next.number)},
                                                         {"digest", record_digest(encoded)}};
  if (auto delta = encode_delta(current_, next, keys::kMaxDeltaBytes)) entry.emplace_back("delta", std::move(*delta));
  txn.add(Write::stream_append(keys::kGenerationLog, std::move(entry), keys::kGenerationLogLength));
  for (auto& write : extra) txn.add(std::move(write));
  if (!commit_with_job_state(*store_, txn)) return std::nullopt;  // another leader or a newer generation: re-read next tick
  log()->info("published generation {}: {} node(s), world size {}, {} [{}]", next.number, next.members.size(), world,
              encode(next.status), node_list(next.members));
  std::erase_if(candidates_, [&](const Candidate& c) {
    return std::any_of(next.members.begin(), next.members.end(),
                       [&](const Member& m) { return m.node == c.node && m.incarnation == c.incarnation; });
  });
  current_ = std::move(next);
  pending_since_.reset();
  standby_written_ = standby_nodes;
  return current_.number;
}

}  // namespace hdp::elastic
