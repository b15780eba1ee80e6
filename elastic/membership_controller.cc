#include "elastic/membership_controller.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/release.h"
#include "elastic/job_state.h"
#include "elastic/preparing_workers.h"

namespace hdp::elastic {
namespace {

// "n1,n2": the nodes of `items` (members or candidates) in order: a `resize` event's members, the
// state's `standby` (the nodes standing by, in join order) and `preparing` (those of them whose
// workers are still setting up).
template <typename Items>
std::string node_list(const Items& items) {
  return hdp::join(items, ",", [](const auto& item) -> const std::string& { return item.node; });
}

}  // namespace

MembershipController::MembershipController(std::shared_ptr<Store> job_store, std::string leader_id, JobConfig config,
                                           Store::Duration settle, Store::Duration rejoin_window,
                                           Store::Duration full_read_every, StoreTroubleRule trouble,
                                           std::shared_ptr<const AgentPresence> presence)
    : store_(std::move(job_store)),
      leader_id_(std::move(leader_id)),
      config_(config),
      settle_(settle),
      rejoin_window_(rejoin_window),
      full_read_every_(full_read_every),
      leases_(full_read_every),
      trouble_(trouble, leader_id_),
      presence_(std::move(presence)) {
  if (full_read_every.count() < 0) throw InvalidArgument("MembershipController: full_read_every must be >= 0");
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
                       [&](const Member& m) { return same_identity(m, c); });
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
                    [&](const Candidate& c) { return same_identity(c, candidate); }) ||
        std::any_of(current_.members.begin(), current_.members.end(),
                    [&](const Member& m) { return same_identity(m, candidate); });
    if (!known) candidates_.push_back(std::move(candidate));
  }
  // Newcomers join in announcement order, also when a hole was filled after later numbers.
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const Candidate& x, const Candidate& y) { return x.sequence < y.sequence; });
}

Cordons MembershipController::read_cordons(const std::optional<std::string>& value) {
  if (!value) return {};
  auto cordons = bad_cordons_.decode(
      *value, [&] { return decode_cordons(*value, keys::kCordons); },
      [](const InvalidArgument& e) { log()->warn("ignoring the cordons: {}", e.what()); });
  return cordons ? std::move(*cordons) : Cordons{};
}

MembershipController::Head MembershipController::read_head() {
  auto values = store_->multi_get({keys::kGeneration, keys::kJoinCount, keys::broken(current_.number),
                                   keys::kEvictions, keys::stragglers(current_.number), keys::kCordons,
                                   keys::kLastLeave});
  Head head;
  // An agent deregistered since the last tick (its lease erased, not expired): read every lease.
  head.someone_left = values[6] != last_leave_;
  last_leave_ = std::move(values[6]);
  head.number = values[0] ? decode_generation_number(*values[0], keys::kGeneration) : 0;
  // The broken flag and the requests read belong to the generation we had cached; they count only
  // if it is still current.
  head.cached_is_current = head.number == current_.number && head.number > 0;
  if (head.cached_is_current) {
    head.broken = std::move(values[2]);
    head.requests = std::move(values[4]);
  }
  load_generation(head.number);
  // A generation this controller had not held (a new leader's first tick, another leader's
  // publication): its broken flag, read now, so that a leader that took over because it broke
  // acts on it in this tick.
  if (!head.cached_is_current && head.number > 0) head.broken = store_->get(keys::broken(head.number));
  if (joins_read_ < 0) joins_read_ = current_.joins_seen;
  read_new_joins(values[1] ? decode_counter(*values[1], keys::kJoinCount, kMaxJoinCount) : 0);
  head.evictions = evictions_.read_record(values[3]);
  head.cordons = read_cordons(values[5]);
  return head;
}

std::map<std::string, NodeLease> MembershipController::read_leases(const Evictions& evictions, bool force) {
  // A lease key names its incarnation, so a missing key is a dead (or replaced) incarnation.
  std::vector<std::string> lease_keys;
  for (const auto& [node, incarnation] : lease_identities(current_.members, candidates_, evictions)) {
    lease_keys.push_back(keys::lease(node, incarnation));
  }
  return leases_.read(*store_, lease_keys, force);
}

void MembershipController::note_preparing(const std::vector<Candidate>& preparing) {
  std::set<std::string> now;
  for (const auto& c : preparing) {
    const std::string id = c.node + "/" + c.incarnation;
    if (!preparing_logged_.contains(id)) {
      log()->info("node {} (incarnation {}) joins once its workers are set up", c.node, c.incarnation);
    }
    now.insert(id);
  }
  preparing_logged_ = std::move(now);  // its admission is logged as a publication
}

std::optional<std::int64_t> MembershipController::tick(std::int64_t seen_by_leader) {
  const auto began = Clock::now();
  Head head = read_head();
  const bool broken = head.broken.has_value();
  auto fresh = evictions_.new_evictions(*store_, current_, broken, head.requests, head.evictions);
  if (!fresh) return std::nullopt;
  const bool read_all_leases = broken || !fresh->evictions.empty() || !head.cached_is_current || head.someone_left;
  MembershipView view{.config = config_,
                      .generation = current_.number,
                      .status = current_.status,
                      .members = current_.members,
                      .candidates = candidates_,
                      .leases = read_leases(head.evictions, read_all_leases),
                      .cordons = std::move(head.cordons),
                      .evictions = std::move(head.evictions),
                      .fresh = std::move(*fresh),
                      .seen_by_leader = seen_by_leader,
                      .broken = broken};
  // The newest generation any live agent saw (each lease carries its agent's): above the store's
  // own when the store rolled back.
  std::int64_t newest_known = std::min(seen_by_leader, kMaxGeneration);
  for (const auto& [key, lease] : view.leases) newest_known = std::max(newest_known, lease.last_generation);
  view.rolled_back = head.number > 0 && head.number < newest_known;
  // With no generation in the store (its first, or the store restarted empty) there is no member
  // whose lease could be misjudged, and the first generation waits for every live agent anyway.
  if (head.number > 0 && !trouble_.may_judge(began, head.number, newest_known, current_, candidates_, view.leases)) {
    return std::nullopt;
  }
  // Into a running generation, a candidate is admitted once its workers are set up (preparing_workers.h).
  if (current_.number > 0 && current_.status == GenerationStatus::kRunning) {
    view.preparing = read_preparing(*store_, candidates_);
  }
  view.now_ms = now_ms();
  view.pending_since = pending_since_;
  view.now = Clock::now();
  view.settle = settle_;
  view.rejoin_window = rejoin_window_;
  std::vector<Write> gone = broken ? drop_gone_agents(view) : std::vector<Write>{};
  MembershipDecision decision = desired_members(view);
  candidates_ = std::move(decision.candidates);
  pending_since_ = decision.pending_since;
  note_preparing(decision.preparing);
  std::vector<Write> extra = eviction_writes(decision.evictions, view.now_ms, config_.min_nodes);
  extra.insert(extra.end(), std::make_move_iterator(gone.begin()), std::make_move_iterator(gone.end()));
  const std::vector<MembershipDecision::Refused> refusing = refusal_writes(decision.refused, view.now_ms, extra);
  if (view.rolled_back) {
    // What the workers run is newer than what the store says: republish, above every number seen.
    log()->warn("the store's generation {} is older than generation {} that an agent saw (the store rolled back); "
                "publishing the live members above it",
                head.number, newest_known);
    extra.push_back(
        event_write("store_rollback", {{"from", std::to_string(newest_known)}, {"to", std::to_string(head.number)}}));
  } else if (broken) {
    log()->warn("generation {} is broken ({}); publishing a new one", current_.number, quote_value(*head.broken));
  }
  bool committed = false;
  auto published = act(std::move(decision), std::move(extra), committed);
  // Recorded once committed; a tick that settles, or whose commit was fenced, wrote nothing, and a
  // later one writes them again (so does a new leader, which has recorded none).
  for (const auto& [candidate, why] : committed ? refusing : std::vector<MembershipDecision::Refused>{}) {
    log()->warn("node {} (incarnation {}) is refused: {}", candidate.node, candidate.incarnation, why);
    refusals_written_.insert(candidate.node + "/" + candidate.incarnation);
  }
  return published;
}

std::vector<MembershipDecision::Refused> MembershipController::refusal_writes(
    const std::vector<MembershipDecision::Refused>& refused, std::int64_t now_ms, std::vector<Write>& writes) {
  // A refused node is forgotten once it is no candidate (its lease gone: it left).
  std::erase_if(refusals_written_, [&](const std::string& id) {
    return std::none_of(candidates_.begin(), candidates_.end(),
                        [&](const Candidate& c) { return c.node + "/" + c.incarnation == id; });
  });
  std::vector<MembershipDecision::Refused> refusing;
  for (const auto& r : refused) {
    if (refusals_written_.contains(r.candidate.node + "/" + r.candidate.incarnation)) continue;
    writes.push_back(Write::set(keys::refusal(r.candidate.node, r.candidate.incarnation),
                                encode(Refusal{.why = r.why, .by = leader_id_, .at_ms = now_ms}), keys::kRefusalTtl));
    writes.push_back(event_write("node_refused", {{"nodes", r.candidate.node},
                                                  {"incarnation", r.candidate.incarnation},
                                                  {"differs_in", "hdp build"},
                                                  {"why", r.why},
                                                  {"generation", std::to_string(current_.number)}}));
    refusing.push_back(r);
  }
  return refusing;
}

std::vector<Write> MembershipController::drop_gone_agents(MembershipView& view) {
  if (!presence_) return {};
  std::vector<NodeLease> suspects;
  const NodeLease* self = nullptr;
  for (const auto& member : current_.members) {
    const auto it = view.leases.find(keys::lease(member.node, member.incarnation));
    if (it == view.leases.end()) continue;  // dropped by its lease anyway
    if (member.node + "/" + member.incarnation == leader_id_) {
      self = &it->second;
    } else {
      suspects.push_back(it->second);
    }
  }
  if (!self) return {};  // this leader's own lease unread: the trouble rule holds judgement anyway
  std::vector<Write> writes;
  for (const NodeLease& lease : presence_->gone(suspects, *self)) {
    const std::string key = keys::lease(lease.node, lease.incarnation);
    log()->warn("generation {} broke and node {} (incarnation {}) has no agent connected to the store: its processes "
                "are gone; dropping it without waiting for its lease",
                current_.number, lease.node, lease.incarnation);
    view.leases.erase(key);
    writes.push_back(Write::erase(key));
    writes.push_back(event_write("agent_gone", {{"node", lease.node},
                                                {"incarnation", lease.incarnation},
                                                {"generation", std::to_string(current_.number)}}));
  }
  return writes;
}

std::optional<std::int64_t> MembershipController::act(MembershipDecision decision, std::vector<Write> extra,
                                                      bool& committed) {
  committed = false;
  switch (decision.action) {
    case MembershipDecision::Action::kNothing:
    case MembershipDecision::Action::kSettle:
      return std::nullopt;
    case MembershipDecision::Action::kRepair:
      committed = repair_state(decision.standby, decision.preparing, std::move(extra));
      return std::nullopt;
    case MembershipDecision::Action::kPublish:
      break;
  }
  const std::int64_t handled = current_.number;
  auto published =
      publish(std::move(decision.members), decision.newest_seen, decision.standby, decision.preparing, std::move(extra));
  if (published) evictions_.answered(handled);
  committed = published.has_value();
  return published;
}

bool MembershipController::repair_state(const std::vector<Candidate>& standby_candidates,
                                        const std::vector<Candidate>& preparing_candidates, std::vector<Write> extra) {
  // The nodes standing by changed (a spare registered or left, a joiner's workers set up): the
  // state lists them.
  const std::string standby = node_list(standby_candidates), preparing = node_list(preparing_candidates);
  Fields state = missing_state_fields(standby, preparing);
  if (standby != standby_written_) {
    state.emplace_back("standby", standby);  // also when missing: a field set twice to one value
    extra.push_back(Write::set(keys::kStandby, standby));
  }
  if (preparing != preparing_written_) state.emplace_back("preparing", preparing);
  if (!state.empty()) {
    state.emplace_back("updated_at_ms", std::to_string(now_ms()));
    extra.push_back(Write::hash_set(keys::kState, std::move(state)));
  }
  if (extra.empty()) return false;
  // Readmissions of workers already back (a cool-down cut short), the standby list, the state's
  // generation fields put back: fenced like a publication.
  Transaction txn;
  txn.require(keys::kGeneration, std::to_string(current_.number)).require(keys::kLeader, leader_id_);
  txn.require_absent(keys::kOutcome);  // an ended job's state is final
  for (auto& write : extra) txn.add(std::move(write));
  if (!commit_with_job_state(*store_, txn)) return false;
  standby_written_ = standby;
  preparing_written_ = preparing;
  return true;
}

Fields MembershipController::missing_state_fields(const std::string& standby, const std::string& preparing) {
  const auto now = Clock::now();
  if (now < next_state_check_) return {};
  next_state_check_ = now + full_read_every_;
  const auto state = store_->hash_get_all(keys::kState);
  // What the publication of the current generation wrote; a field another writer keeps (rank 0's
  // status while it trains, a drain's) is put back only when it is missing.
  Fields published = {{"status", encode(current_.status)},
                      {"generation", std::to_string(current_.number)},
                      {"world_size", std::to_string(current_.world_size())},
                      {"nodes", std::to_string(current_.members.size())},
                      {"standby", standby}};
  if (!preparing.empty()) published.emplace_back("preparing", preparing);  // none: nothing to put back
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
                                                          const std::vector<Candidate>& preparing,
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
  const std::string standby_nodes = node_list(standby), preparing_nodes = node_list(preparing);
  txn.add(Write::hash_set(keys::kState, {{"status", encode(next.status)},
                                         {"generation", std::to_string(next.number)},
                                         {"world_size", world},
                                         {"nodes", std::to_string(next.members.size())},
                                         {"standby", standby_nodes},
                                         {"preparing", preparing_nodes},
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
    return std::any_of(next.members.begin(), next.members.end(), [&](const Member& m) { return same_identity(m, c); });
  });
  current_ = std::move(next);
  pending_since_.reset();
  standby_written_ = standby_nodes;
  preparing_written_ = preparing_nodes;
  return current_.number;
}

}  // namespace hdp::elastic
