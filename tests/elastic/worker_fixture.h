// File: tests/elastic/worker_fixture.h
//
// Workers' side of the rendezvous without agents: a MemoryStore in which the test publishes
// generations as the leader would (one slot on each named node, incarnation "inc-<node>"), and
// ElasticContexts for those nodes.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "elastic/elastic_context.h"
#include "elastic/job_keys.h"
#include "elastic/membership.h"
#include "elastic/memory_store.h"

namespace hdp::elastic::test {

class WorkerFixture : public ::testing::Test {
 protected:
  // Publishes running generation g with one slot on each of `nodes`.
  void publish(std::int64_t g, const std::vector<std::string>& nodes) {
    Generation generation{.number = g};
    for (const auto& node : nodes) generation.members.push_back({node, "inc-" + node, "127.0.0.1", {0}, 0});
    generation.assign_ranks();
    store_->set(keys::generation(g), encode(generation));
    store_->set(keys::kGeneration, std::to_string(g));
  }
  ElasticContext worker(const std::string& node) { return ElasticContext(store_, {"job", node, "inc-" + node, 0}); }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

}  // namespace hdp::elastic::test
