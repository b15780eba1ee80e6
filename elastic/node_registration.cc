#include "elastic/node_registration.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::elastic {

std::string new_incarnation() {
  std::random_device device;
  const std::uint64_t value = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

NodeRegistration::NodeRegistration(std::shared_ptr<Store> job_store, NodeLease lease, Store::Duration ttl)
    : store_(std::move(job_store)), lease_(std::move(lease)), ttl_(ttl) {
  // The lease's policy (its range, its default) is elastic/lease_timing.h's, checked where an agent
  // derives its timing; here only what a TTL must be.
  if (ttl_.count() < 1) throw InvalidArgument("lease must be at least 1 ms, got " + std::to_string(ttl_.count()) + " ms");
  lease_.lease_ms = ttl_.count();  // recorded in the lease, so that readers can tell its age
}

void NodeRegistration::register_new_incarnation(Store::Duration wait_for_previous) {
  const std::string claim_key = keys::node(lease_.node);
  const auto deadline = std::chrono::steady_clock::now() + wait_for_previous;
  if (!pending_) {
    // A new incarnation, unless a previous call failed part way: that one is completed instead.
    registered_ = false;
    pending_ = lease_;
    pending_->incarnation = new_incarnation();
    pending_join_.reset();
  }
  const NodeLease& fresh = *pending_;
  bool warned = false;
  for (;;) {
    // The node id is free when nobody claims it or the claiming incarnation's lease has expired;
    // it is already ours when a previous attempt of this registration committed the claim (its
    // reply may have been lost) — then taking it again only rewrites our own lease.
    const std::optional<std::string> holder = store_->get(claim_key);
    Transaction claim;
    if (holder && *holder == fresh.incarnation) {
      claim.require(claim_key, *holder);
    } else if (holder) {
      claim.require(claim_key, *holder).require_absent(keys::lease(lease_.node, *holder));
    } else {
      claim.require_absent(claim_key);
    }
    claim.add(Write::set(claim_key, fresh.incarnation))
        .add(Write::set(keys::lease(fresh.node, fresh.incarnation), encode(fresh), ttl_));
    if (store_->commit(claim)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      // Nothing of this incarnation is in the store: the next call starts a fresh one.
      pending_.reset();
      throw NodeIdInUse("node id '" + lease_.node + "' is held by another live agent (incarnation " +
                        (holder ? quote_value(*holder, 64) : std::string("?")) + "); give each agent its own --node-id");
    }
    if (!warned) {
      log()->warn("node {}: waiting for the lease of a previous agent with this node id to expire", lease_.node);
      warned = true;
    }
    std::this_thread::sleep_for(std::min<Store::Duration>(ttl_ / 10, Store::Duration(200)));
  }
  lease_ = fresh;  // heartbeats now keep the claimed lease alive, even if the announcement fails
  if (!pending_join_) {
    const std::int64_t sequence = store_->add(keys::kJoinCount, 1);
    // The leader reads announcements only up to kMaxJoinCount (membership.h).
    if (sequence < 1 || sequence > kMaxJoinCount) {
      throw InvalidArgument("invalid value in Redis key 'joins': the join counter reached " + std::to_string(sequence) +
                            ", outside [1, " + std::to_string(kMaxJoinCount) + "]");
    }
    pending_join_ = sequence;
  }
  write_announcement(*pending_join_);
  pending_.reset();
  pending_join_.reset();
  registered_ = true;
}

void NodeRegistration::announce() {
  const std::int64_t sequence = store_->add(keys::kJoinCount, 1);
  if (sequence < 1 || sequence > kMaxJoinCount) {
    throw InvalidArgument("invalid value in Redis key 'joins': the join counter reached " + std::to_string(sequence) +
                          ", outside [1, " + std::to_string(kMaxJoinCount) + "]");
  }
  write_announcement(sequence);
}

void NodeRegistration::write_announcement(std::int64_t sequence) {
  const std::string announcement = R"({"node":")" + lease_.node + R"(","incarnation":")" + lease_.incarnation + "\"}";
  // Join announcements outlive any settle window by far; the leader reads them within a tick.
  commit_with_job_state(*store_, Transaction{}
                     .add(Write::set(keys::join(sequence), announcement, std::chrono::hours(1)))
                     .add(event_write("join", {{"node", lease_.node}, {"incarnation", lease_.incarnation},
                                               {"host", lease_.host}, {"slots", std::to_string(lease_.slots)}})));
}

bool NodeRegistration::reestablish(std::int64_t last_generation) {
  return take_back(last_generation, std::nullopt, "restored", {});
}

bool NodeRegistration::reclaim(std::int64_t last_generation, const std::string& claim, const std::string& why) {
  return take_back(last_generation, claim, "lease_restored", {{"why", why}});
}

bool NodeRegistration::take_back(std::int64_t last_generation, const std::optional<std::string>& claim,
                                 const char* event, Fields details) {
  NodeLease restored = lease_;
  restored.last_generation = std::max(restored.last_generation, last_generation);
  const std::string claim_key = keys::node(lease_.node);
  const std::string lease_key = keys::lease(lease_.node, lease_.incarnation);
  Transaction txn;
  if (claim) {
    txn.require(claim_key, *claim);
  } else {
    txn.require_absent(claim_key);
  }
  Fields fields{{"node", lease_.node}, {"incarnation", lease_.incarnation}};
  fields.insert(fields.end(), details.begin(), details.end());
  txn.require_absent(lease_key)
      .add(Write::set(claim_key, lease_.incarnation))
      .add(Write::set(lease_key, encode(restored), ttl_))
      .add(event_write(event, std::move(fields)));
  const bool done = commit_with_job_state(*store_, txn);
  if (done) lease_ = restored;
  return done;
}

NodeRegistration::Heartbeat NodeRegistration::heartbeat(const std::vector<int>& healthy, std::int64_t last_generation,
                                                        bool rewrite) {
  std::optional<std::string> rewritten;
  if (rewrite || healthy != lease_.healthy || last_generation != lease_.last_generation) {
    NodeLease updated = lease_;
    updated.healthy = healthy;
    updated.last_generation = last_generation;
    rewritten = encode(updated);
  }
  Refresh refresh = store_->refresh_ttl(keys::lease(lease_.node, lease_.incarnation), ttl_, rewritten,
                                        {keys::kLeader, keys::kGeneration, keys::kControl,
                                         keys::refusal(lease_.node, lease_.incarnation)});
  if (refresh.alive && rewritten) {
    lease_.healthy = healthy;
    lease_.last_generation = last_generation;
  }
  return {refresh.alive, std::move(refresh.values[0]), std::move(refresh.values[1]), std::move(refresh.values[2]),
          std::move(refresh.values[3])};
}

void NodeRegistration::deregister() {
  const std::string claim_key = keys::node(lease_.node);
  // Only while the node id is still ours: after an eviction another incarnation may hold it.
  commit_with_job_state(*store_, Transaction{}
                     .require(claim_key, lease_.incarnation)
                     .add(Write::erase(claim_key))
                     .add(Write::erase(keys::lease(lease_.node, lease_.incarnation)))
                     .add(Write::erase(keys::kLastLeave))  // garbage of another type is replaced too
                     .add(Write::set(keys::kLastLeave, lease_.node + "/" + lease_.incarnation))
                     .add(event_write("leave", {{"node", lease_.node}, {"incarnation", lease_.incarnation}})));
}

}  // namespace hdp::elastic
