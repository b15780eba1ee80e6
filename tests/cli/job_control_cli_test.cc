// `hdp drain|stop|checkpoint|cordon|uncordon` against real agents (smoke workers) and a real
// redis-server: requests that make no sense are refused, a drained node leaves and its agent exits
// 4, a cordoned node is not admitted until uncordoned, and a read-only ACL user can look but not
// act. (The trainer's side, with real training: tests/trainer/recovery_cluster_test.cc.)
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "elastic/control.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

CommandResult hdp(AgentCluster& cluster, std::vector<std::string> args, const std::string& url = {}) {
  args.insert(args.begin(), cluster.hdp());
  args.insert(args.end(), {"--redis", url.empty() ? cluster.redis().url() : url});
  return run_command(args, {}, 60s);
}

std::vector<std::map<std::string, std::string>> events(AgentCluster& cluster, const std::string& type) {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& e : elastic::JobState(cluster.store()).snapshot(elastic::kEventsKept).events) {
    std::map<std::string, std::string> fields(e.fields.begin(), e.fields.end());
    if (fields["type"] == type) out.push_back(std::move(fields));
  }
  return out;
}

int exit_code(ChildProcess& agent, std::chrono::milliseconds timeout) {
  const auto status = agent.wait_for(timeout);
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(JobControlCli, RequestsThatMakeNoSenseAreRefusedWithOneClearLine) {
  AgentCluster cluster;
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_for_members({"n1"}, 30s), 0) << cluster.all_logs();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"drain", "--job", "nosuch", "n1"}, "no job 'nosuch'"},
      {{"stop", "--job", "nosuch"}, "no job 'nosuch'"},
      {{"checkpoint", "--job", "nosuch"}, "no job 'nosuch'"},
      {{"cordon", "--job", "nosuch", "n1"}, "no job 'nosuch'"},
      {{"drain", "--job", cluster.job(), "n9"}, "node 'n9' is not registered"},
      {{"drain", "--job", cluster.job()}, "node is required"},
      {{"cordon", "--job", cluster.job()}, "node is required"},
  };
  for (const auto& [args, reason] : cases) {
    const CommandResult r = hdp(cluster, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args.back() << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  }
  // Garbage in `control` is named, never acted on: the agent keeps its workers.
  cluster.store()->set(elastic::keys::kControl, "{\"drain\": 7}");
  const CommandResult r = hdp(cluster, {"stop", "--job", cluster.job()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("'control'"), std::string::npos) << r.err;
  std::this_thread::sleep_for(cluster.options().lease);
  EXPECT_TRUE(cluster.agent("n1").running());
  EXPECT_NE(cluster.agent_log("n1").find("ignoring the pending requests"), std::string::npos) << cluster.all_logs();

  // A job that has ended has no rank to take up a stop, a checkpoint or (once completed) a setting:
  // refused, where it would otherwise stay pending for ever. A stopped job may still be given
  // settings for its resumption.
  cluster.store()->erase(elastic::keys::kControl);
  for (const std::string outcome : {"stopped", "completed"}) {
    cluster.store()->set(elastic::keys::kOutcome, outcome);
    std::vector<std::vector<std::string>> refused = {{"stop", "--job", cluster.job()},
                                                     {"checkpoint", "--job", cluster.job()}};
    if (outcome == "completed") refused.push_back({"config", "--job", cluster.job(), "set", "log_every=5"});
    for (const auto& args : refused) {
      const CommandResult ended = hdp(cluster, args);
      EXPECT_EQ(ended.exit_code, 2) << args[0] << " on a " << outcome << " job: " << ended.err;
      EXPECT_EQ(line_count(ended.err), 1) << ended.err;
      EXPECT_NE(ended.err.find("has " + outcome), std::string::npos) << ended.err;
    }
    if (outcome == "stopped") {
      const CommandResult set = hdp(cluster, {"config", "--job", cluster.job(), "set", "log_every=5"});
      EXPECT_EQ(set.exit_code, 0) << set.err;
    }
  }
  EXPECT_FALSE(cluster.get(elastic::keys::kControl).has_value()) << "a refused request was written";
}

// `hdp drain n2`: n2's agent acts at its next heartbeat (lease/3), its workers leave, it exits 4 and
// the job goes on with n1; the request and its outcome are events. An agent started again on n2
// is a new incarnation: the done request does not drain it, and it is admitted.
TEST(JobControlCli, ADrainedNodeLeavesItsAgentExitsFourAndANewIncarnationIsAdmitted) {
  AgentCluster cluster;
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 30s), 0) << cluster.all_logs();
  const auto asked = std::chrono::steady_clock::now();
  const CommandResult r = hdp(cluster, {"drain", "--job", cluster.job(), "n2", "--wait", "--timeout-s", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err << cluster.all_logs();
  EXPECT_NE(r.out.find("outcome=left"), std::string::npos) << r.out;
  EXPECT_EQ(exit_code(cluster.agent("n2"), 10s), 4) << cluster.all_logs();
  // Bound: the agent's next heartbeat (lease/3) plus its workers' exit; 2 leases leave room for load.
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 2 * cluster.options().lease + 2s);
  EXPECT_GE(cluster.wait_for_members({"n1"}, 20s), 0) << cluster.all_logs();
  EXPECT_TRUE(cluster.agent("n1").running());
  const auto requests = events(cluster, "request");
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].at("op"), "drain");
  EXPECT_EQ(requests[0].at("node"), "n2");
  EXPECT_NE(requests[0].at("by").find('@'), std::string::npos);
  const auto done = events(cluster, "request_done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].at("id"), requests[0].at("id"));
  EXPECT_EQ(done[0].at("outcome"), "left");
  EXPECT_FALSE(cluster.get(elastic::keys::kControl).has_value()) << "the done request stays pending";

  cluster.start_agent("n2");
  EXPECT_GE(cluster.wait_for_members({"n1", "n2"}, 30s), 0) << cluster.all_logs();
  EXPECT_TRUE(cluster.agent("n2").running());
}

// `hdp cordon n2`, then n2 killed and started again: the new incarnation registers but is not
// admitted (it shows as cordoned in `hdp status`); `hdp uncordon n2`: admitted within a lease.
TEST(JobControlCli, ACordonedNodeIsNotAdmittedUntilUncordoned) {
  ClusterOptions options;
  options.lease = 3000ms;
  AgentCluster cluster(options);
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 30s), 0) << cluster.all_logs();
  CommandResult r = hdp(cluster, {"cordon", "--job", cluster.job(), "n2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("n2 cordoned"), std::string::npos) << r.out;
  EXPECT_NE(hdp(cluster, {"cordon", "--job", cluster.job(), "n2"}).out.find("already cordoned"), std::string::npos);
  // A cordon does not take a member out.
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(cluster.current().has_value());
  EXPECT_EQ(cluster.current()->members.size(), 2u);

  cluster.agent("n2").kill();  // SIGKILL; its workers die with it (PDEATHSIG)
  ASSERT_GE(cluster.wait_for_members({"n1"}, 30s), 0) << cluster.all_logs();
  cluster.start_agent("n2");
  // Registered (a claim and a live lease) yet not admitted, for three leases.
  EXPECT_GE(cluster.wait_until([&] {
    const auto incarnation = cluster.get(elastic::keys::node("n2"));
    return incarnation && cluster.get(elastic::keys::lease("n2", *incarnation)).has_value();
  }, 30s), 0) << cluster.all_logs();
  std::this_thread::sleep_for(3 * options.lease);
  ASSERT_TRUE(cluster.current().has_value());
  EXPECT_EQ(cluster.current()->members.size(), 1u) << cluster.all_logs();
  r = hdp(cluster, {"status", "--job", cluster.job()});
  EXPECT_NE(r.out.find("cordoned"), std::string::npos) << r.out;
  const auto status = nlohmann::json::parse(hdp(cluster, {"status", "--job", cluster.job(), "--json"}).out);
  ASSERT_EQ(status["cordons"].size(), 1u) << status.dump();
  EXPECT_EQ(status["cordons"][0]["node"], "n2");

  const auto uncordoned = std::chrono::steady_clock::now();
  r = hdp(cluster, {"uncordon", "--job", cluster.job(), "n2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 30s), 0) << cluster.all_logs();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - uncordoned).count();
  std::cout << "admitted " << took << " s after the uncordon\n";
  EXPECT_LE(took, std::chrono::duration<double>(options.lease).count()) << "not admitted within a lease";
  EXPECT_EQ(events(cluster, "cordon").size(), 1u);
  EXPECT_EQ(events(cluster, "uncordon").size(), 1u);
}

// A Redis ACL user that may only read the job's keys: `hdp status` works, every acting subcommand
// exits 1 with one line naming the missing permission, and nothing was written.
TEST(JobControlCli, AReadOnlyAclUserCanLookButNotAct) {
  ClusterOptions options;
  options.redis_args = {"--user", "viewer", "on", ">viewer-pw", "~hdp:*", "+@read", "+@connection"};
  AgentCluster cluster(options);
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_for_members({"n1"}, 30s), 0) << cluster.all_logs();
  const std::string url = "redis://viewer:viewer-pw@127.0.0.1:" + std::to_string(cluster.redis().port());
  CommandResult r = hdp(cluster, {"status", "--job", cluster.job()}, url);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("n1"), std::string::npos) << r.out;
  const std::vector<std::vector<std::string>> acting = {{"drain", "--job", cluster.job(), "n1"},
                                                        {"stop", "--job", cluster.job()},
                                                        {"checkpoint", "--job", cluster.job()},
                                                        {"config", "--job", cluster.job(), "set", "log_every=5"},
                                                        {"cordon", "--job", cluster.job(), "n1"}};
  for (const auto& args : acting) {
    r = hdp(cluster, args, url);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("NOPERM"), std::string::npos) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err.find("viewer-pw"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(cluster.get(elastic::keys::kControl).has_value());
  EXPECT_FALSE(cluster.get(elastic::keys::kCordons).has_value());
  EXPECT_FALSE(cluster.get(elastic::keys::kSettings).has_value());
  EXPECT_TRUE(events(cluster, "request").empty());
  r = hdp(cluster, {"config", "--job", cluster.job()}, url);
  EXPECT_EQ(r.exit_code, 0) << "reading the settings needs no write: " << r.err;
  // The dashboard as the read-only user: the job and its member, read with the viewer's rights.
  TempDir dir;
  const int port = free_loopback_port();
  ChildProcess dashboard({cluster.hdp(), "dashboard", "--job", cluster.job(), "--redis", url, "--port",
                          std::to_string(port)},
                         (dir.path() / "dashboard.log").string());
  HttpResult api;
  const double served = cluster.wait_until(
      [&] {
        api = http_get(port, "/api/job", 1s);
        return api.status == 200;
      },
      20s);
  ASSERT_GE(served, 0) << "no /api/job from the dashboard";
  const auto job = nlohmann::json::parse(api.body, nullptr, false);
  ASSERT_TRUE(job.is_object()) << api.body;
  EXPECT_EQ(job.value("job", ""), cluster.job());
  ASSERT_EQ(job["members"].size(), 1u) << api.body;
  EXPECT_EQ(job["members"][0].value("node", ""), "n1");
  EXPECT_EQ(api.body.find("viewer-pw"), std::string::npos);
  EXPECT_TRUE(cluster.agent("n1").running());
}

}  // namespace
}  // namespace hdp::test
