#include "elastic/node_registration.h"

#include <cstdio>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/log.h"
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
  if (ttl_.count() < 100) throw InvalidArgument("lease must be at least 100 ms");
}

void NodeRegistration::register_new_incarnation(Store::Duration wait_for_previous) {
  lease_.incarnation = new_incarnation();
  written_ = encode(lease_);
  const std::string key = keys::node(lease_.node);
  const auto deadline = std::chrono::steady_clock::now() + wait_for_previous;
  bool warned = false;
  while (!store_->commit(Transaction{}.require_absent(key).add(Write::set(key, written_, ttl_)))) {
    if (std::chrono::steady_clock::now() >= deadline) {
      auto holder = store_->get(key);
      throw InvalidArgument("node id '" + lease_.node + "' is held by another live agent (" +
                            (holder ? holder->substr(0, 200) : std::string("gone now")) +
                            "); give each agent its own --node-id");
    }
    if (!warned) {
      log()->warn("node {}: waiting for the lease of a previous agent with this node id to expire", lease_.node);
      warned = true;
    }
    std::this_thread::sleep_for(std::min<Store::Duration>(ttl_ / 10, Store::Duration(200)));
  }
  const std::int64_t sequence = store_->add(keys::kJoinCount, 1);
  const std::string announcement = R"({"node":")" + lease_.node + R"(","incarnation":")" + lease_.incarnation + "\"}";
  // Join announcements outlive any settle window by far; the leader reads them within a tick.
  store_->commit(Transaction{}
                     .add(Write::set(keys::join(sequence), announcement, std::chrono::hours(1)))
                     .add(event_write("join", {{"node", lease_.node}, {"incarnation", lease_.incarnation},
                                               {"host", lease_.host}, {"slots", std::to_string(lease_.slots)}})));
}

NodeRegistration::Heartbeat NodeRegistration::heartbeat(const std::vector<int>& healthy, std::int64_t last_generation) {
  const std::string key = keys::node(lease_.node);
  Transaction txn;
  txn.require(key, written_).read(keys::kLeader).read(keys::kGeneration);
  std::string encoded;
  NodeLease updated = lease_;
  if (healthy == lease_.healthy && last_generation == lease_.last_generation) {
    txn.add(Write::expire(key, ttl_));
  } else {
    updated.healthy = healthy;
    updated.last_generation = last_generation;
    encoded = encode(updated);
    txn.add(Write::set(key, encoded, ttl_));
  }
  CommitResult result = store_->commit(txn);
  if (result.applied && !encoded.empty()) {
    lease_ = std::move(updated);
    written_ = std::move(encoded);
  }
  return {result.applied, std::move(result.values[0]), std::move(result.values[1])};
}

void NodeRegistration::deregister() {
  const std::string key = keys::node(lease_.node);
  store_->commit(Transaction{}
                     .require(key, written_)
                     .add(Write::erase(key))
                     .add(event_write("leave", {{"node", lease_.node}, {"incarnation", lease_.incarnation}})));
}

}  // namespace hdp::elastic
