// `hdp agent`, `hdp status` and `hdp run` as a user runs them: bad input, garbage in Redis,
// readable and JSON status, the one-machine launcher.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "elastic/job_keys.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using cli::kExitFailure;

CommandResult hdp(const AgentCluster& cluster, std::vector<std::string> args) {
  args.insert(args.begin(), cluster.hdp());
  return run_command(args, {}, 60s);
}

TEST(ControlPlaneCli, BadInputIsAUsageErrorWithOneClearLine) {
  AgentCluster cluster;
  const std::string url = cluster.redis().url();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"agent", "--job", "j", "--redis", "redis://host:99999"}, "port"},
      {{"agent", "--job", "j", "--redis", url, "--nnodes", "3:2"}, "--nnodes"},
      {{"agent", "--job", "has space", "--redis", url}, "job id"},
      {{"agent", "--job", "j", "--redis", url, "--standby-worker", "--", "/bin/sh", "-c", "true"},
       "--standby-worker needs `hdp train` as the worker command"},
      {{"status", "--job", "nosuch", "--redis", url}, "no job 'nosuch'"},
      {{"status", "--redis", url}, "no job id"},
      {{"train"}, "HDP_JOB_ID"},
      {{"train", "--capacity", "0"}, "--capacity"},
      {{"train", "--model", "small", "--max-rank-memory-mb", "10"}, "--max-rank-memory-mb"},
      {{"train", "--fault", "crash:x@1"}, "--fault"},
      {{"train", "--fault", "crash:1@4:backward"}, "is not one of forward, reduce-scatter, optimizer, all-gather"},
      {{"train", "--fault", "kill-node:1@4:"}, "is not one of forward"},
  };
  for (const auto& [args, reason] : cases) {
    auto r = hdp(cluster, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args.back() << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  }
}

TEST(ControlPlaneCli, TrainSettingsComeFromTheEnvironmentAndTheConfigFile) {
  // The same checks as flags: an impossible value is named whatever its source.
  auto r = run_command({AgentCluster().hdp(), "train"}, {"HDP_BATCH_TOKENS=0"}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--batch-tokens 0 must be >= 1"), std::string::npos) << r.err;
  TempDir dir;
  const auto config = dir.path() / "job.toml";
  std::ofstream(config) << "[train]\ncapacity = 0\n";
  r = run_command({AgentCluster().hdp(), "--config", config.string(), "train"}, {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--capacity 0 must be >= 1 token"), std::string::npos) << r.err;
  // A flag on the command line wins over the file.
  r = run_command({AgentCluster().hdp(), "--config", config.string(), "train", "--capacity", "64", "--steps", "0"}, {},
                  30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--steps"), std::string::npos) << r.err;
}

TEST(ControlPlaneCli, WrongPasswordIsARuntimeErrorThatHidesThePassword) {
  RedisServer server({.password = "good"});
  auto r = run_command({AgentCluster().hdp(), "status", "--job", "j", "--redis",
                        "redis://:Bad-Secret@127.0.0.1:" + std::to_string(server.port())},
                       {}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("Bad-Secret"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("refused the credentials"), std::string::npos) << r.err;
}

// Issue 13, defect 12: an agent refused because its node id is held by a live agent exited 2 (a
// usage error, which systemd does not restart) while docs/errors.md says 1. The second agent waits
// two of its leases (2 x 300 ms) for the holder's lease to lapse, then gives up.
TEST(ControlPlaneCli, NodeIdHeldByALiveAgentIsAnAgentErrorExitOne) {
  AgentCluster cluster({.nproc = 1});
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_for_members({"n1"}, 15s), 0) << cluster.all_logs();
  const auto start = std::chrono::steady_clock::now();
  auto r = hdp(cluster, {"agent", "--job", cluster.job(), "--redis", cluster.redis().url(), "--node-id", "n1",
                         "--nproc-per-node", "1", "--nnodes", cluster.options().nnodes, "--lease-ms", "300", "--",
                         "true"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, kExitFailure) << r.err;
  EXPECT_NE(r.err.find("hdp: error: node id 'n1' is held by another live agent"), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err.substr(r.err.find("hdp: error:"))), 1) << r.err;
  EXPECT_LT(took, 20s);
  // The holder is untouched and still the node's only member.
  EXPECT_TRUE(cluster.agent("n1").running());
  EXPECT_GE(cluster.wait_for_members({"n1"}, 1s), 0) << cluster.all_logs();
}

TEST(ControlPlaneCli, StatusShowsTheJobAsATableAndAsJson) {
  AgentCluster cluster({.nproc = 1});
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 15s), 0) << cluster.all_logs();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 10; }, 10s), 0) << cluster.all_logs();

  auto table = hdp(cluster, {"status", "--job", cluster.job(), "--redis", cluster.redis().url()});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* text : {"running", "generation", "n1", "n2", "alive", "resize", "join"}) {
    EXPECT_NE(table.out.find(text), std::string::npos) << text << " missing from:\n" << table.out;
  }
  auto json = hdp(cluster, {"status", "--job", cluster.job(), "--redis", cluster.redis().url(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto facts = nlohmann::json::parse(json.out);
  EXPECT_EQ(facts["job"], cluster.job());
  EXPECT_EQ(facts["generation"], cluster.generation());
  EXPECT_EQ(facts["world_size"], 2);
  EXPECT_EQ(facts["members"].size(), 2u);
  EXPECT_EQ(facts["state"]["status"], "running");
  EXPECT_GE(facts["state"]["step"].get<std::int64_t>(), 10);  // numbers as JSON numbers
  EXPECT_FALSE(facts["events"].empty());
  // The store's primary as the agents recorded it: a plain URL's server, no failover.
  const std::string primary = "127.0.0.1:" + std::to_string(cluster.redis().port());
  EXPECT_EQ(facts["store"], (nlohmann::json{{"primary", primary}, {"failovers", 0}})) << json.out;
  EXPECT_NE(table.out.find("store: primary " + primary + ", 0 failover(s)\n"), std::string::npos) << table.out;
}

TEST(ControlPlaneCli, GarbageWrittenIntoRedisIsNamedNeverActedOn) {
  AgentCluster cluster({.nproc = 1});
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_for_members({"n1"}, 15s), 0) << cluster.all_logs();
  const std::string good = cluster.get(elastic::keys::kGeneration).value();
  auto store = cluster.store();
  store->set(elastic::keys::kGeneration, "banana");
  auto r = hdp(cluster, {"status", "--job", cluster.job(), "--redis", cluster.redis().url()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'gen'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("banana"), std::string::npos) << r.err;
  std::this_thread::sleep_for(1s);  // the agent's leader sees the garbage for several ticks
  EXPECT_TRUE(cluster.agent("n1").running()) << cluster.all_logs();
  EXPECT_EQ(cluster.get(elastic::keys::kGeneration), "banana");  // and writes nothing over it
  store->set(elastic::keys::kGeneration, good);

  // Rank 0 reports `step` every few steps: stop the job's processes so that the garbage stays.
  cluster.agent("n1").kill();
  elastic::Transaction bad_state;
  bad_state.add(elastic::Write::hash_set(elastic::keys::kState, {{"step", "-12"}}));
  store->commit(bad_state);
  r = hdp(cluster, {"status", "--job", cluster.job(), "--redis", cluster.redis().url()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'step'"), std::string::npos) << r.err;
}

// Issue 13, defect 7: a field that is not UTF-8 made `hdp status --json` fail as "internal error
// ... invalid UTF-8" with exit 1; a key of the wrong type named no key.
TEST(ControlPlaneCli, StatusOnNonUtf8OrWrongTypeValuesExitsTwoNamingTheKeyAndField) {
  AgentCluster cluster({.nproc = 1});
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_for_members({"n1"}, 15s), 0) << cluster.all_logs();
  auto store = cluster.store();
  const std::vector<std::string> status = {"status", "--job", cluster.job(), "--redis", cluster.redis().url()};
  auto json = status;
  json.push_back("--json");

  store->commit(elastic::Transaction{}.add(elastic::Write::hash_set(elastic::keys::kState, {{"note", std::string("caf\xe9\0!", 6)}})));
  for (const auto& args : {json, status}) {
    auto r = hdp(cluster, args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("Redis key 'state': field 'note' is 'caf\\xe9\\0!', not UTF-8"), std::string::npos) << r.err;
  }
  store->erase(elastic::keys::kState);
  store->commit(elastic::Transaction{}.add(elastic::Write::stream_append(elastic::keys::kEvents, {{"type", "\xc3("}}, 1000)));
  auto r = hdp(cluster, json);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("Redis key 'events'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("field 'type'"), std::string::npos) << r.err;

  store->erase(elastic::keys::kEvents);
  // Writers erase a `state` of another type and write again (docs/redis-schema.md): stop the job's
  // processes first, so that `hdp status` meets the string.
  cluster.agent("n1").kill();
  store->set(elastic::keys::kState, "a string where a hash belongs");
  r = hdp(cluster, json);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(cluster.job() + ":state' failed: 'WRONGTYPE"), std::string::npos) << r.err;
}

TEST(ControlPlaneCli, RunStartsAPrivateRedisAndAgentsAndCleansUp) {
  auto r = run_command({AgentCluster().hdp(), "run", "--nodes", "2", "--nproc-per-node", "2", "--lease-ms", "2000",
                        "--", AgentCluster().hdp(), "train", "--smoke", "--steps", "40", "--step-ms", "10"},
                       {}, 90s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("hdp status --job run-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--redis-password-file"), std::string::npos) << "the private Redis has a password: " << r.out;
  EXPECT_NE(r.out.find("world size 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("completed"), std::string::npos) << r.out;
  // Everything it started is gone: no redis-server or agent of this run is left.
  const auto job = r.out.substr(r.out.find("job run-") + 4, 12);
  auto survivors = run_command({"pgrep", "-c", "-f", job});  // pgrep never counts itself
  EXPECT_EQ(std::stoi(survivors.out), 0) << "processes of " << job << " outlived hdp run";
}

// The whole of a file ("" when it cannot be read).
std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether `text` appears in the file within `timeout` (looked at every 100 ms).
bool wait_for_text(const std::string& path, const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (file_text(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(100ms);
  }
  return true;
}

// Every process of this user whose command line or environment holds `secret`: "PID: cmdline".
std::vector<std::string> processes_showing(const std::string& secret) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid())) continue;
    for (const char* file : {"cmdline", "environ"}) {
      std::ifstream in(entry.path() / file);  // another user's environ cannot be opened: not ours
      std::string text(std::istreambuf_iterator<char>(in), {});
      if (text.find(secret) == std::string::npos) continue;
      std::replace(text.begin(), text.end(), '\0', ' ');
      found.push_back(pid + " (" + file + "): " + text.substr(0, 200));
    }
  }
  return found;
}

// Issue 31: `hdp run --redis redis://:PASSWORD@…` (the password typed on its command line, as a
// user would) starts agents, their workers and a dashboard, and none of them, nor `hdp run`
// itself once started, shows the password in /proc/PID/cmdline (what `ps` reads) or its
// environment; nor does it appear in the logs, `hdp status --json`, /metrics or the dashboard's
// JSON. (hdp overwrites a URL's password in its own argv at start-up, cli/main.cc, so an `hdp
// agent` started with one is covered by the same code; the children get a password file.)
TEST(ControlPlaneCli, NoProcessOfARunShowsTheRedisPassword) {
  const std::string secret = "Pw-" + std::to_string(getpid()) + "-q7Zr";
  RedisServer server({.password = secret});
  TempDir dir;
  const std::string log_path = (dir.path() / "run.log").string();
  const std::string job = "secret-" + std::to_string(getpid());
  const std::string url = "redis://:" + secret + "@127.0.0.1:" + std::to_string(server.port());
  const int metrics = free_loopback_port(), dashboard = free_loopback_port();
  ChildProcess run({AgentCluster().hdp(), "run", "--redis", url, "--nodes", "1", "--nproc-per-node", "2", "--job", job,
                    "--lease-ms", "1000", "--metrics-port", std::to_string(metrics), "--dashboard-port",
                    std::to_string(dashboard), "--", AgentCluster().hdp(), "train", "--smoke", "--steps", "100000",
                    "--step-ms", "20"},
                   log_path);
  auto log = [&] { return file_text(log_path); };
  ASSERT_TRUE(wait_for_text(log_path, "world size 2, status running", 30s)) << log();
  EXPECT_EQ(processes_showing(secret), std::vector<std::string>{});
  const auto status = run_command({AgentCluster().hdp(), "status", "--job", job, "--redis", url, "--json"}, {}, 30s);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ((status.out + status.err).find(secret), std::string::npos) << status.out << status.err;
  const HttpResult scrape = http_get(metrics, "/metrics", 5s);
  EXPECT_EQ(scrape.status, 200);
  EXPECT_EQ(scrape.body.find(secret), std::string::npos);
  HttpResult api = http_get(dashboard, "/api/job", 2s);
  for (int i = 0; i < 100 && api.status != 200; ++i) {  // the dashboard starts beside the agents: 20 s at most
    std::this_thread::sleep_for(200ms);
    api = http_get(dashboard, "/api/job", 2s);
  }
  ASSERT_EQ(api.status, 200);
  EXPECT_NE(api.body.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << api.body;
  EXPECT_EQ(api.body.find(secret), std::string::npos) << api.body;
  run.signal(SIGTERM);  // drains: the job stops
  ASSERT_TRUE(run.wait_for(60s).has_value()) << log();
  EXPECT_EQ(log().find(secret), std::string::npos) << log();
  EXPECT_NE(log().find("--redis-password-file"), std::string::npos) << "the hint to watch the job: " << log();
}

TEST(ControlPlaneCli, RunExitsZeroWhenTheJobCompletesDespiteALostAgent) {
  TempDir dir;
  const std::string log_path = (dir.path() / "run.log").string();
  const std::string job = "lost-agent-" + std::to_string(getpid());
  ChildProcess run({AgentCluster().hdp(), "run", "--nodes", "3", "--nproc-per-node", "1", "--nnodes", "1:3", "--job",
                    job, "--lease-ms", "1000", "--", AgentCluster().hdp(), "train", "--smoke", "--steps", "300",
                    "--step-ms", "20"},
                   log_path);
  auto log = [&] { return file_text(log_path); };
  ASSERT_TRUE(wait_for_text(log_path, "world size 3, status running", 30s)) << log();
  auto victim = run_command({"pgrep", "-f", "--", "--job " + job + " .*--node-id node1 "});
  ASSERT_EQ(victim.exit_code, 0) << "no agent of node1";
  ASSERT_EQ(kill(std::stoi(victim.out), SIGKILL), 0);
  auto status = run.wait_for(90s);
  ASSERT_TRUE(status.has_value()) << "hdp run did not end: " << log();
  ASSERT_TRUE(WIFEXITED(*status)) << log();
  EXPECT_EQ(WEXITSTATUS(*status), 0) << log();
  EXPECT_NE(log().find("job " + job + " completed (1 agent(s) lost on the way)"), std::string::npos) << log();
  EXPECT_NE(log().find("world size 2"), std::string::npos) << log();  // it resized rather than stopped
}

// A node the running job refused (its agent exits 5, common/exit_codes.h) decides nothing: here
// node1's worker exits 5 at once, the other two train on, and SIGTERM drains them: `hdp run`
// exits 4 (drained), not with the refused agent's code, which came first.
TEST(ControlPlaneCli, RunDoesNotLetARefusedNodeDecideItsExitCode) {
  TempDir dir;
  const std::string log_path = (dir.path() / "run.log").string();
  const std::string job = "refused-" + std::to_string(getpid());
  const std::string worker = "if [ \"$HDP_NODE_ID\" = node1 ]; then exit 5; fi; exec " + AgentCluster().hdp() +
                             " train --smoke --steps 100000 --step-ms 20";
  ChildProcess run({AgentCluster().hdp(), "run", "--nodes", "3", "--nproc-per-node", "1", "--nnodes", "1:3", "--job",
                    job, "--lease-ms", "1000", "--", "/bin/sh", "-c", worker},
                   log_path);
  auto log = [&] { return file_text(log_path); };
  ASSERT_TRUE(wait_for_text(log_path, "agent node1 (pid ", 30s)) << log();
  ASSERT_TRUE(wait_for_text(log_path, "world size 2, status running", 30s)) << log();
  run.signal(SIGTERM);
  const auto status = run.wait_for(60s);
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status)) << log();
  EXPECT_EQ(WEXITSTATUS(*status), 4) << log();
  EXPECT_NE(log().find("agent node1 (pid "), std::string::npos);
  EXPECT_NE(log().find(") ended (exit 5)"), std::string::npos) << "node1's agent exits 5: " << log();
}

}  // namespace
}  // namespace hdp::test
