// File: elastic/agent_presence.h
//
// Whether a node's agent process is still alive, as the store's own connections say
// (docs/architecture.md, "A node's processes gone: seen through the data plane"). Every agent
// names its one store connection (RedisStoreOptions::client_name) after its job, node, host and
// pid, the three its lease records; when the process dies with its machine up, the kernel closes
// the socket and the server drops the client at once. A live agent keeps its connection (it
// heartbeats three times a lease), so "its lease is live and its connection is gone" is a dead
// process, not a slow one. That is the check the leader makes before it drops a member whose
// peers saw their connections to it fail, without waiting for its lease.
//
// The answer errs only towards keeping a node: nothing is called gone when the client list cannot
// be read, or when it does not show the leader's own connection (names not visible: another store,
// an older server). A live agent reconnecting at that moment (its connection broke) would be
// called gone; the leader judges nothing while the store is in trouble (store_trouble.h), and a
// node dropped wrongly is fenced like any evicted one: its agent finds itself out of the
// generation and registers again.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/membership.h"

namespace hdp::elastic {

class AgentPresence {
 public:
  // The names of the clients connected to the store now; throws StoreUnavailable.
  using ClientNames = std::function<std::vector<std::string>()>;

  AgentPresence(std::string job, ClientNames client_names)
      : job_(std::move(job)), client_names_(std::move(client_names)) {}

  // The name the agent holding `lease` in `job` gives its store connection: printable ASCII
  // without spaces (CLIENT SETNAME refuses spaces), other bytes written as '_'.
  static std::string client_name(std::string_view job, const NodeLease& lease);
  std::string client_name(const NodeLease& lease) const { return client_name(job_, lease); }

  // Of `suspects`, those whose agent has no connection to the store now; none when `self` (the
  // asking agent's own lease) is not seen connected either, or the list cannot be read (logged).
  std::vector<NodeLease> gone(const std::vector<NodeLease>& suspects, const NodeLease& self) const;

 private:
  std::string job_;
  ClientNames client_names_;
};

}  // namespace hdp::elastic
