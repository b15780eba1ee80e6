// `hdp` given a bad Redis Sentinel setup, as a user runs it: each case exits 2 (a URL that cannot
// be right) or 1 (a deployment that does not answer as asked) with an error line naming the
// problem, and no password ever appears in what it prints. A real SentinelCluster (one primary,
// no replica, one sentinel) with a data password and a sentinel password.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/child_process.h"
#include "tests/support/sentinel_cluster.h"
#include "tests/support/temp_dir.h"
#include "agents/embedded_redis.h"

namespace hdp::test {
namespace {

constexpr const char* kDataPassword = "data-secret-71";
constexpr const char* kSentinelPassword = "sentinel-secret-93";

CommandResult hdp(std::vector<std::string> args) {
  const char* dir = std::getenv("HDP_BIN_DIR");
  args.insert(args.begin(), std::string(dir ? dir : "build/bin") + "/hdp");
  return run_command(args, {}, std::chrono::seconds(60));
}

void expect_refused(const CommandResult& r, int code, const std::string& names) {
  EXPECT_EQ(r.exit_code, code) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_NE(r.err.find("hdp: error: "), std::string::npos) << all;
  EXPECT_NE(all.find(names), std::string::npos) << "the error should name: " << names << "\n" << all;
  EXPECT_EQ(all.find(kDataPassword), std::string::npos) << all;
  EXPECT_EQ(all.find(kSentinelPassword), std::string::npos) << all;
}

TEST(SentinelCli, EveryBadSetupIsRefusedWithOneLineAndNoPassword) {
  SentinelCluster sentinels(SentinelClusterOptions{
      .replicas = 0, .sentinels = 1, .quorum = 1, .password = kDataPassword, .sentinel_password = kSentinelPassword});
  const std::string sentinel = "127.0.0.1:" + std::to_string(sentinels.sentinel_port(0));
  TempDir dir;
  const std::string wrong = agents::write_private_file(dir.path() / "wrong", "not-it\n").string();
  const std::string data_file = sentinels.password_file(), sentinel_file = sentinels.sentinel_password_file();
  auto status = [&](const std::string& url, std::vector<std::string> more) {
    std::vector<std::string> args = {"status", "--job", "j", "--redis", url};
    args.insert(args.end(), more.begin(), more.end());
    return hdp(args);
  };
  // The right setup answers (an unknown job is not an error of the URL).
  const auto ok = status("redis+sentinel://" + sentinel + "/hdp",
                         {"--redis-password-file", data_file, "--sentinel-password-file", sentinel_file});
  EXPECT_EQ(ok.err.find("hdp: error: redis"), std::string::npos) << ok.out << ok.err;
  // A URL that cannot be right: 2.
  expect_refused(status("redis+sentinel://" + sentinel, {}), 2, "master name is missing");
  expect_refused(status("redis+sentinel://:" + std::string(kDataPassword) + "@/hdp", {}), 2, "sentinels is empty");
  expect_refused(status("redis://127.0.0.1:1", {"--sentinel-password-file", sentinel_file}), 2, "--sentinel-password-file");
  // A name the sentinels do not know: 2 (retrying cannot help).
  expect_refused(status("redis+sentinel://" + sentinel + "/nosuch",
                        {"--redis-password-file", data_file, "--sentinel-password-file", sentinel_file}),
                 2, "'nosuch'");
  // Wrong passwords, of the sentinels and of the data nodes; sentinels that do not answer: 1.
  expect_refused(status("redis+sentinel://" + sentinel + "/hdp",
                        {"--redis-password-file", data_file, "--sentinel-password-file", wrong}),
                 1, "sentinel");
  expect_refused(status("redis+sentinel://" + sentinel + "/hdp",
                        {"--redis-password-file", wrong, "--sentinel-password-file", sentinel_file}),
                 1, "refused the credentials");
  const int nobody = agents::free_loopback_port();
  expect_refused(status("redis+sentinel://:" + std::string(kDataPassword) + "@127.0.0.1:" + std::to_string(nobody) + "/hdp",
                        {"--redis-timeout", "1000"}),
                 1, "no sentinel of 1 answered");
}

}  // namespace
}  // namespace hdp::test
