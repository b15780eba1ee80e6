// File: tests/elastic/controller_fixture.h
//
// A MemoryStore with nodes registered the way agents do (lease + join announcement) and a
// MembershipController acting as the leader: what the controller's tests and the bad-value tests
// share.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "elastic/job_keys.h"
#include "elastic/membership_controller.h"
#include "elastic/memory_store.h"
#include "elastic/node_registration.h"

namespace hdp::elastic::test {

class ControllerFixture : public ::testing::Test {
 protected:
  // Registers a node the way an agent does (lease + join announcement).
  NodeRegistration& join(const std::string& node, int slots = 2) {
    NodeLease lease{.node = node, .host = "127.0.0.1", .pid = 1, .version = "test", .slots = slots};
    for (int s = 0; s < slots; ++s) lease.healthy.push_back(s);
    auto& registration =
        nodes_.emplace(node, NodeRegistration(store_, lease, std::chrono::seconds(60))).first->second;
    registration.register_new_incarnation(std::chrono::seconds(1));
    return registration;
  }
  // The node's lease expires (its agent stopped heartbeating).
  void expire(const std::string& node) {
    ASSERT_TRUE(store_->erase(keys::lease(node, nodes_.at(node).lease().incarnation)));
  }
  MembershipController controller(JobConfig config = {1, 16}, Store::Duration settle = Store::Duration::zero()) {
    store_->set(keys::kLeader, "leader");
    return MembershipController(store_, "leader", config, settle);
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  std::map<std::string, NodeRegistration> nodes_;
};

}  // namespace hdp::elastic::test
