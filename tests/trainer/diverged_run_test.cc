// A run whose loss diverges to NaN (learning rate 1e30) stays observable: rank 0 leaves the
// non-finite figures out of the job state and the samples (whose readers accept only finite
// numbers), so `hdp status --json --samples N` still answers, with every step's sample and no loss
// where there was none to show. Real `hdp run` processes against a private redis-server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"

namespace hdp::test {
namespace {

TEST(DivergedRun, NonFiniteFiguresAreLeftOutAndTheJobStateStaysReadable) {
  RedisServer redis;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const auto run = run_command({hdp, "run", "--nodes", "1", "--nproc-per-node", "2", "--job", "diverged", "--redis", redis.url(),
                                "--", hdp, "train", "--model", "tiny", "--steps", "12", "--context", "128", "--capacity",
                                "128", "--batch-tokens", "1024", "--data", "synthetic:github", "--threads", "1", "--lr",
                                "1e30", "--warmup-steps", "0"},
                               {}, std::chrono::seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  ASSERT_TRUE(std::regex_search(run.err, std::regex("loss -?nan"))) << "the run did not diverge:\n" << run.err;
  const auto status = run_command({hdp, "status", "--job", "diverged", "--redis", redis.url(), "--json", "--samples", "100"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const auto job = nlohmann::json::parse(status.out);
  ASSERT_EQ(job["samples"].size(), 12u);
  int without_loss = 0;
  for (const auto& sample : job["samples"]) {
    EXPECT_TRUE(sample.contains("step") && sample.contains("world_size") && sample.contains("time_ms")) << sample.dump();
    if (!sample.contains("loss")) ++without_loss;
  }
  EXPECT_GE(without_loss, 1) << "no NaN step left out";
  EXPECT_EQ(job["state"]["step"], 12);
}

}  // namespace
}  // namespace hdp::test
