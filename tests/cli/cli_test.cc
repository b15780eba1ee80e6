// The `hdp` binary as a user runs it: exit codes, one-line errors, flags from env and config files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "elastic/worker_env.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

std::string hdp_binary() {
  const char* dir = std::getenv("HDP_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/hdp";
}

CommandResult hdp(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), hdp_binary());
  return run_command(args, env, std::chrono::seconds(30));
}

// The agent strips the contract's variables from what its workers inherit and sets its own
// (elastic/worker_env.h), so a trainer setting read from one of those names would be lost, or
// clobbered (HDP_METRICS_FILE was once both `--metrics-file` and the agent's metrics file).
TEST(Cli, NoTrainerSettingSharesANameWithTheAgentWorkerContract) {
  auto r = hdp({"train", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("Env:HDP_METRICS_FILE"), std::string::npos) << "the help no longer names env variables:\n" << r.out;
  for (const char* name : elastic::worker_env::kAll) {
    EXPECT_EQ(r.out.find(std::string("Env:") + name + ")"), std::string::npos) << name << " is also a trainer setting";
  }
}

// cuBLAS and NCCL are opened on first use (kernels/cuda/cublas_api.h, mesh/comm/nccl_api.h): a
// command that uses no GPU starts without mapping them (they were ~0.2-0.5 s of every start). The
// dynamic loader's own report (LD_DEBUG=libs) says what was loaded; `hdp version`, which reads
// NCCL's version, shows that the report would name the library if it were loaded.
TEST(Cli, ACommandThatUsesNoGpuLoadsNeitherCublasNorNccl) {
  const auto help = hdp({"train", "--help"}, {"LD_DEBUG=libs"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  ASSERT_NE(help.err.find("calling init:"), std::string::npos) << "the loader reported nothing:\n" << help.err;
  EXPECT_EQ(help.err.find("libcublas"), std::string::npos) << help.err;
  EXPECT_EQ(help.err.find("libnccl"), std::string::npos) << help.err;
  const auto version = hdp({"version", "--json"}, {"LD_DEBUG=libs"});
  ASSERT_EQ(version.exit_code, 0) << version.err;
  if (nlohmann::json::parse(version.out)["nccl"].value("built", false)) {
    EXPECT_NE(version.err.find("libnccl"), std::string::npos) << "hdp version reads NCCL's version from the library";
  }
}

TEST(Cli, VersionPrintsVersionAndFeatures) {
  auto r = hdp({"version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"hdp 0.1.0", "cuda:", "nccl:", "transport:", "tcp", "hdf5:", "1.10"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
  }
}

TEST(Cli, VersionJsonHasTheSameFacts) {
  auto r = hdp({"version", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info["version"], "0.1.0");
  EXPECT_TRUE(info["cuda"]["built"].is_boolean());
  EXPECT_EQ(info["transport"]["cpu"], "tcp");
  EXPECT_EQ(info["hdf5"].get<std::string>().substr(0, 4), "1.10");
}

TEST(Cli, HelpWorksOnTheCommandAndEverySubcommand) {
  auto top = hdp({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* sub : {"version", "ping"}) {
    EXPECT_NE(top.out.find(sub), std::string::npos) << sub;
    auto r = hdp({sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, UnknownSubcommandExitsTwoWithOneLineOnStderr) {
  // With or without --help: asking for the help of a subcommand that does not exist is the same mistake.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"nosuch"}, {"nosuch", "--help"}, {"nosuch", "-h"}}) {
    auto r = hdp(args);
    EXPECT_EQ(r.exit_code, 2) << args.size();
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(Cli, UnknownFlagAndMissingSubcommandExitTwo) {
  auto flag = hdp({"version", "--bogus"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(line_count(flag.err), 1) << flag.err;
  EXPECT_NE(flag.err.find("--bogus"), std::string::npos) << flag.err;
  auto none = hdp({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(line_count(none.err), 1) << none.err;
}

TEST(Cli, PingReachesARealServer) {
  RedisServer server;
  auto r = hdp({"ping", "--redis", server.url(), "-n", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PONG"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("redis 7"), std::string::npos) << r.out;
}

TEST(Cli, RedisUrlComesFromTheEnvironment) {
  RedisServer server;
  auto r = hdp({"ping"}, {"HDP_REDIS_URL=" + server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(server.port())), std::string::npos) << r.out;
}

TEST(Cli, FlagsComeFromAConfigFile) {
  RedisServer server({.password = "cfg-pw"});
  TempDir dir;
  const auto password_file = dir.path() / "pw", config = dir.path() / "hdp.toml";
  std::ofstream(password_file) << "cfg-pw\n";
  std::ofstream(config) << "[ping]\nredis = \"" << server.url() << "\"\nredis-password-file = \""
                        << password_file.string() << "\"\n";
  auto r = hdp({"--config", config.string(), "ping"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PONG"), std::string::npos) << r.out;
}

TEST(Cli, WrongPasswordIsOneLineWithoutThePassword) {
  RedisServer server({.password = "good"});
  auto r = hdp({"ping", "--redis", "redis://:Sup3rS3cret@127.0.0.1:" + std::to_string(server.port())});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.find("Sup3rS3cret"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("refused the credentials"), std::string::npos) << r.err;
}

TEST(Cli, MalformedUrlIsAUsageError) {
  auto r = hdp({"ping", "--redis", "redis://host:99999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("port"), std::string::npos) << r.err;
}

TEST(Cli, UnreachableServerFailsWithinTheTimeout) {
  const int port = free_loopback_port();
  // The process's own start-up and exit, measured in the same run (it is most of the wall time
  // under a sanitizer on a loaded machine): `hdp ping --help` parses its flags and exits.
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(hdp({"ping", "--help"}).exit_code, 0);
  const double startup = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  const auto start = std::chrono::steady_clock::now();
  auto r = hdp({"ping", "--redis", "redis://127.0.0.1:" + std::to_string(port), "--redis-timeout", "700"});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.err;
  EXPECT_LT(waited, 0.7 * 1.2 + startup + 0.3) << "start-up " << startup << " s";  // the budget (+20%), start-up, slack
}

}  // namespace
}  // namespace hdp::test
