// The `hdp` binary as a user runs it: exit codes, one-line errors, flags from env and config files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
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

// `hdp status` shows the job's ETTR from the state's goodput fields (elastic/goodput.h) and the
// last recoveries from its `recovered` events, also when they are older than the events shown;
// --json carries both. The job completed, so its clock stopped at its last write: the figures do
// not depend on when the test runs.
TEST(Cli, StatusShowsTheEttrAndTheLastRecoveries) {
  RedisServer server;
  auto store = std::make_shared<elastic::PrefixStore>(
      std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(server.url())), elastic::keys::job_namespace("g"));
  const std::int64_t started = 1'700'000'000'000, minute = 60'000;
  elastic::JobState job(store);
  job.event("continue", {{"source", "memory"}, {"generation", "2"}, {"seconds", "0.200"}});
  job.event("recovered", {{"generation", "2"}, {"seconds", "2.500"}, {"lost_steps", "0"}, {"step", "41"}});
  job.event("recovered", {{"source", "checkpoint"}, {"generation", "3"}, {"seconds", "7.300"}, {"lost_steps", "3"},
                          {"step", "57"}});
  for (int i = 0; i < 20; ++i) job.event("join", {{"node", "n" + std::to_string(i)}});
  store->commit(elastic::Transaction{}.add(elastic::Write::hash_set(
      elastic::keys::kState, {{"status", "completed"},
                              {"step", "900"},
                              {"started_at_ms", std::to_string(started)},
                              {"updated_at_ms", std::to_string(started + 64 * minute)},
                              {"productive_ms", std::to_string(62 * minute) + ".0"},
                              {"furthest_step", "900"},
                              {"recomputed_steps", "3"},
                              {"recomputed_ms", "1500.0"},
                              {"ettr", "0.9700"}})));

  auto text = hdp({"status", "--job", "g", "--redis", server.url(), "--events", "5"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("ETTR 0.97 (productive 1 h 02 min of 1 h 04 min; 3 steps computed twice)\n"),
            std::string::npos) << text.out;
  EXPECT_NE(text.out.find("memory, 2.5 s, 0 step(s) lost (generation 2, at step 41)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("checkpoint, 7.3 s, 3 step(s) lost (generation 3, at step 57)"), std::string::npos) << text.out;

  auto out = hdp({"status", "--job", "g", "--redis", server.url(), "--events", "5", "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto json = nlohmann::json::parse(out.out);
  EXPECT_EQ(json["events"].size(), 5u);
  const auto& goodput = json["goodput"];
  EXPECT_NEAR(goodput["ettr"].get<double>(), 62.0 / 64.0, 1e-9) << goodput.dump();
  EXPECT_DOUBLE_EQ(goodput["productive_s"].get<double>(), 62 * 60);
  EXPECT_DOUBLE_EQ(goodput["wall_s"].get<double>(), 64 * 60);
  EXPECT_DOUBLE_EQ(goodput["lost_s"].get<double>(), 2 * 60);
  EXPECT_EQ(goodput["recomputed_steps"], 3);
  EXPECT_DOUBLE_EQ(goodput["recomputed_s"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(json["state"]["ettr"].get<double>(), 0.97);  // a number, as rank 0 wrote it
  ASSERT_EQ(json["recoveries"].size(), 2u) << json["recoveries"].dump();
  EXPECT_EQ(json["recoveries"][0]["kind"], "memory");
  EXPECT_DOUBLE_EQ(json["recoveries"][0]["seconds"].get<double>(), 2.5);
  EXPECT_EQ(json["recoveries"][1]["kind"], "checkpoint");
  EXPECT_EQ(json["recoveries"][1]["lost_steps"], 3);
  EXPECT_EQ(json["recoveries"][1]["step"], 57);
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
