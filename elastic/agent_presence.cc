// File: elastic/agent_presence.cc
//
// AgentPresence (agent_presence.h): agents' store connections, by name.
#include "elastic/agent_presence.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/log.h"

namespace hdp::elastic {

std::string AgentPresence::client_name(std::string_view job, const NodeLease& lease) {
  std::string name = "hdp-agent:" + std::string(job) + ":" + lease.node + ":" + lease.host + ":" +
                     std::to_string(lease.pid);
  std::replace_if(name.begin(), name.end(), [](char c) { return c <= ' ' || c > '~'; }, '_');
  return name;
}

std::vector<NodeLease> AgentPresence::gone(const std::vector<NodeLease>& suspects, const NodeLease& self) const {
  if (suspects.empty()) return {};
  std::set<std::string> connected;
  try {
    for (auto& name : client_names_()) connected.insert(std::move(name));
  } catch (const Error& e) {
    log()->warn("cannot tell which agents are connected to the store: {}", e.what());
    return {};
  }
  if (!connected.contains(client_name(self))) {
    log()->warn("the store's client list does not show this agent's own connection ({}): no agent is judged gone "
                "by it",
                client_name(self));
    return {};
  }
  std::vector<NodeLease> out;
  for (const auto& lease : suspects) {
    if (!connected.contains(client_name(lease))) out.push_back(lease);
  }
  return out;
}

}  // namespace hdp::elastic
