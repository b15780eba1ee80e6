#include "elastic/prefix_store.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "elastic/memory_store.h"

namespace hdp::elastic {
namespace {

TEST(PrefixStore, ScopesEveryOperationAndHidesOtherScopes) {
  auto shared = std::make_shared<MemoryStore>();
  PrefixStore job_a(shared, "hdp:a:"), job_b(shared, "hdp:b:");
  job_a.set("state", "running");
  job_b.set("state", "waiting");
  job_a.add("gen", 3);
  EXPECT_EQ(job_a.get("state"), "running");
  EXPECT_EQ(job_b.get("state"), "waiting");
  EXPECT_EQ(job_b.get("gen"), std::nullopt);
  EXPECT_EQ(shared->get("hdp:a:gen"), "3");
  EXPECT_EQ(job_a.keys(""), (std::vector<std::string>{"gen", "state"}));
  EXPECT_TRUE(job_b.erase("state"));
  EXPECT_EQ(job_a.get("state"), "running");
}

TEST(PrefixStore, NestedPrefixesCompose) {
  auto shared = std::make_shared<MemoryStore>();
  auto job = std::make_shared<PrefixStore>(shared, "hdp:j:");
  PrefixStore generation(job, "gen:7:");
  generation.set("rank0", "addr");
  EXPECT_EQ(shared->get("hdp:j:gen:7:rank0"), "addr");
  EXPECT_EQ(job->keys("gen:7:"), std::vector<std::string>{"gen:7:rank0"});
  EXPECT_EQ(generation.keys(""), std::vector<std::string>{"rank0"});
  generation.wait({"rank0"}, std::chrono::milliseconds(10));
}

TEST(PrefixStore, NullInnerStoreIsRejected) { EXPECT_THROW(PrefixStore(nullptr, "p:"), InvalidArgument); }

}  // namespace
}  // namespace hdp::elastic
