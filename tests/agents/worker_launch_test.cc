// What a worker gets from its agent, between real processes (a real `hdp agent`, `hdp train
// --smoke` workers, a private redis-server; issue 13, defects 10 and 13):
//   - its identity comes from the agent's flags, never from variables the agent inherited
//     (elastic/worker_env.h);
//   - it shares no open file or socket with its agent beyond stdin, stdout and stderr;
//   - the node's directory (HDP_NODE_DIR) lives as long as its agent;
//   - a worker asking for a device it cannot have fails once, with one line, and is not restarted.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "elastic/worker_env.h"
#include "ops/tensor.h"
#include "tests/agents/agent_cluster.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

// The pid of each slot's last worker, from the agent's log.
std::map<int, pid_t> worker_pids(const std::string& log) {
  std::map<int, pid_t> pids;
  for (const auto& [slot, pid] : started_workers(log)) pids[slot] = pid;
  return pids;
}

// A process's initial environment, entry by entry (/proc/<pid>/environ).
std::vector<std::string> environment_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::vector<std::string> entries;
  for (std::string entry; std::getline(in, entry, '\0');) entries.push_back(entry);
  return entries;
}

std::vector<std::string> values_of(const std::vector<std::string>& env, const std::string& name) {
  std::vector<std::string> values;
  for (const auto& e : env) {
    if (e.starts_with(name + "=")) values.push_back(e.substr(name.size() + 1));
  }
  return values;
}

// What each descriptor >= `from` of a process refers to ("socket:[123]", "pipe:[45]", a path),
// leaving out anonymous inodes (every eventfd reads "anon_inode:[eventfd]", so two processes'
// cannot be told apart by name).
std::map<int, std::string> descriptors_of(pid_t pid, int from) {
  std::map<int, std::string> result;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    const int fd = std::stoi(entry.path().filename().string());
    std::error_code ignored;
    const std::string target = std::filesystem::read_symlink(entry.path(), ignored).string();
    if (fd >= from && !target.empty() && !target.starts_with("anon_inode:")) result[fd] = target;
  }
  return result;
}

bool is_train_worker(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), {});
  return cmdline.find(std::string("train") + '\0' + "--smoke") != std::string::npos;
}

// Starts one agent with two workers and waits until they train; returns its workers' pids.
std::map<int, pid_t> train_one_node(AgentCluster& cluster, const std::string& node, std::vector<std::string> extra,
                                    std::vector<std::string> env) {
  cluster.start_agent(node, std::move(extra), std::move(env));
  EXPECT_GE(cluster.wait_for_members({node}, 15s), 0) << cluster.all_logs();
  const std::int64_t from = cluster.step();
  EXPECT_GE(cluster.wait_until([&] { return cluster.step() >= from + 10; }, 10s), 0)
      << "the workers do not train\n" << cluster.all_logs();
  auto pids = worker_pids(cluster.agent_log(node));
  EXPECT_EQ(pids.size(), 2u) << cluster.agent_log(node);
  for (const auto& [slot, pid] : pids) EXPECT_TRUE(is_train_worker(pid)) << "slot " << slot << " pid " << pid;
  return pids;
}

// Issue 13, defect 10: with HDP_NODE_ID=x in the agent's environment and --node-id e1, workers ran
// as x/0 and never trained (the agent appended its variables after the inherited ones, and getenv
// returns the first). Every variable of the worker contract is planted in the agent's environment
// with a wrong value; the agent's flags give the right ones.
TEST(WorkerLaunch, AgentFlagsWinOverVariablesTheAgentInherited) {
  AgentCluster cluster({.nproc = 2});
  const std::vector<std::string> planted = {
      "HDP_NODE_ID=x",         "HDP_JOB_ID=some-other-job", "HDP_REDIS_URL=redis://127.0.0.1:1",
      "HDP_LOCAL_RANK=7",      "HDP_NODE_INCARNATION=dead", "HDP_NPROC_PER_NODE=9",
      "HDP_ADVERTISE_ADDR=192.0.2.1", "HDP_AGENT_PID=1",    "HDP_WORKER_LAUNCH_TEST=passes-through",
      "LOCAL_RANK=7"};
  // --advertise-addr too: HDP_ADVERTISE_ADDR is also the agent's own fallback for that flag.
  const auto pids = train_one_node(cluster, "e1", {"--advertise-addr", "127.0.0.1"}, planted);
  ASSERT_FALSE(HasFailure());
  const pid_t agent = cluster.agent("e1").pid();
  for (const auto& [slot, pid] : pids) {
    const auto env = environment_of(pid);
    ASSERT_FALSE(env.empty()) << "cannot read the environment of worker " << pid;
    for (const char* name : elastic::worker_env::kAll) {
      EXPECT_LE(values_of(env, name).size(), 1u) << name << " is set more than once for worker " << slot;
    }
    EXPECT_EQ(values_of(env, "HDP_NODE_ID"), std::vector<std::string>{"e1"});
    EXPECT_EQ(values_of(env, "HDP_JOB_ID"), std::vector<std::string>{cluster.job()});
    EXPECT_EQ(values_of(env, "HDP_REDIS_URL"), std::vector<std::string>{cluster.redis().url()});
    EXPECT_EQ(values_of(env, "HDP_LOCAL_RANK"), std::vector<std::string>{std::to_string(slot)});
    EXPECT_EQ(values_of(env, "LOCAL_RANK"), std::vector<std::string>{std::to_string(slot)});
    EXPECT_EQ(values_of(env, "HDP_NPROC_PER_NODE"), std::vector<std::string>{"2"});
    EXPECT_EQ(values_of(env, "HDP_ADVERTISE_ADDR"), std::vector<std::string>{"127.0.0.1"});
    EXPECT_EQ(values_of(env, "HDP_AGENT_PID"), std::vector<std::string>{std::to_string(agent)});
    EXPECT_EQ(values_of(env, "HDP_WORKER_LAUNCH_TEST"), std::vector<std::string>{"passes-through"});
    const auto incarnation = values_of(env, "HDP_NODE_INCARNATION");
    ASSERT_EQ(incarnation.size(), 1u);
    EXPECT_NE(incarnation[0], "dead");
  }
  // And the generation holds the node under its flag's id, with both workers.
  const auto g = cluster.current();
  ASSERT_TRUE(g);
  EXPECT_EQ(node_names(*g), std::vector<std::string>{"e1"});
  EXPECT_EQ(g->world_size(), 2);
}

// Issue 13, defect 13: the agent's Redis socket was inherited by every worker. A worker must share
// no open file, socket or pipe with its agent beyond stdin, stdout and stderr: none of the agent's
// own (its Redis connection) and none the agent inherited from whatever started it.
TEST(WorkerLaunch, WorkersInheritNoDescriptorOfTheirAgentButStdio) {
  AgentCluster cluster({.nproc = 2});
  const auto pids = train_one_node(cluster, "n1", {}, {});
  ASSERT_FALSE(HasFailure());
  const auto agent = descriptors_of(cluster.agent("n1").pid(), 0);
  std::set<std::string> agent_objects;
  int agent_sockets = 0;
  for (const auto& [fd, target] : agent) {
    agent_objects.insert(target);
    if (target.starts_with("socket:")) ++agent_sockets;
  }
  // Not vacuous: the agent holds at least its Redis connection while it runs.
  ASSERT_GE(agent_sockets, 1) << "the agent has no socket open";
  for (const auto& [slot, pid] : pids) {
    for (const auto& [fd, target] : descriptors_of(pid, 3)) {
      EXPECT_EQ(agent_objects.count(target), 0u)
          << "worker " << slot << " (pid " << pid << ") holds its agent's " << target << " as fd " << fd;
    }
  }
}

// The node's directory (agents/node_directory.h, HDP_NODE_DIR): one per agent, shared by its
// workers, not inherited, present while the agent runs and gone when it ends; a SIGKILLed agent's
// (it cannot remove its own) and an earlier version's metrics directory of an agent gone are removed
// by the next agent on the machine; a directory of a live process, or one whose lock is held (an
// agent of another pid namespace), is left alone.
TEST(WorkerLaunch, TheNodesDirectoryLivesAsLongAsItsAgent) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path();
  // A pid whose process is gone: a child that exited and was reaped.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const fs::path stale = tmp / ("hdp-agent-" + std::to_string(gone) + "-AbCdEf");
  const fs::path stale_metrics = tmp / ("hdp-agent-metrics-" + std::to_string(gone) + "-AbCdEf");
  const fs::path alive = tmp / ("hdp-agent-" + std::to_string(::getpid()) + "-AbCdEf");
  const fs::path locked = tmp / ("hdp-agent-" + std::to_string(gone) + "-LoCkEd");
  struct Cleanup {
    std::vector<fs::path> dirs;
    ~Cleanup() {
      std::error_code ignored;
      for (const auto& dir : dirs) fs::remove_all(dir, ignored);
    }
  } keep_clean{{stale, stale_metrics, alive, locked}};
  for (const fs::path& dir : {stale, stale_metrics, alive, locked}) {
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "sub" / "file") << "x";
  }
  const int lock = ::open((locked / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);

  AgentCluster cluster({.nproc = 2});
  const auto pids = train_one_node(cluster, "d1", {}, {"HDP_NODE_DIR=/planted/by/the/shell"});
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE(fs::exists(stale)) << "a SIGKILLed agent's directory is removed by the next agent";
  EXPECT_FALSE(fs::exists(stale_metrics)) << "and an earlier version's metrics directory";
  EXPECT_TRUE(fs::exists(alive / "sub" / "file")) << "a live process's directory is left alone";
  EXPECT_TRUE(fs::exists(locked / "sub" / "file")) << "and one whose lock is held";
  ::close(lock);
  std::set<std::string> dirs;
  for (const auto& [slot, pid] : pids) {
    const auto values = values_of(environment_of(pid), "HDP_NODE_DIR");
    ASSERT_EQ(values.size(), 1u) << "worker " << slot;
    dirs.insert(values[0]);
  }
  ASSERT_EQ(dirs.size(), 1u) << "one directory for the node's workers";
  const fs::path dir = *dirs.begin();
  const pid_t agent = cluster.agent("d1").pid();
  EXPECT_TRUE(dir.is_absolute()) << dir;
  EXPECT_TRUE(fs::equivalent(dir.parent_path(), tmp)) << dir;
  EXPECT_TRUE(dir.filename().string().starts_with("hdp-agent-" + std::to_string(agent) + "-")) << dir;
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the agent's user's only";

  // SIGKILL: the directory stays behind, and the next agent on the machine removes it.
  cluster.agent("d1").kill();
  EXPECT_TRUE(fs::exists(dir));
  cluster.start_agent("d2");
  EXPECT_GE(cluster.wait_until([&] { return !fs::exists(dir); }, 15s), 0) << cluster.all_logs();
  ASSERT_GE(cluster.wait_for_members({"d2"}, 15s), 0) << cluster.all_logs();
  const auto d2_pids = worker_pids(cluster.agent_log("d2"));
  ASSERT_FALSE(d2_pids.empty());
  const auto d2_dirs = values_of(environment_of(d2_pids.begin()->second), "HDP_NODE_DIR");
  ASSERT_EQ(d2_dirs.size(), 1u);
  ASSERT_TRUE(fs::is_directory(d2_dirs[0]));
  // An agent that leaves (SIGTERM) removes its own.
  cluster.agent("d2").signal(SIGTERM);
  ASSERT_TRUE(cluster.agent("d2").wait_for(20s)) << cluster.agent_log("d2");
  EXPECT_FALSE(fs::exists(d2_dirs[0])) << cluster.agent_log("d2");
}

// Without a temporary directory (TMPDIR names none) the agent runs, and its workers get no
// HDP_NODE_DIR: the directory is a saving, not a need (with --metrics-port it is one).
TEST(WorkerLaunch, AnAgentWithoutATemporaryDirectoryRunsWithoutTheNodesDirectory) {
  AgentCluster cluster({.nproc = 2});
  const auto pids = train_one_node(cluster, "t1", {}, {"TMPDIR=/nonexistent/hdp-worker-launch-test"});
  ASSERT_FALSE(HasFailure());
  for (const auto& [slot, pid] : pids) {
    EXPECT_TRUE(values_of(environment_of(pid), "HDP_NODE_DIR").empty()) << "worker " << slot;
  }
  EXPECT_NE(cluster.agent_log("t1").find("its workers share no directory"), std::string::npos)
      << cluster.agent_log("t1");
}

// `hdp train --device cuda` on a node where it cannot have one (the suite's machines have no GPU;
// the test is skipped where the worker would see one): the worker exits 2 at its start with one line naming the device and what was found,
// and its agent does not restart it in a loop (exit 2 is the job's failure,
// agents/worker_supervisor.h): the agent exits 3, do not requeue. Bound: the agent's start,
// registration and settle (0.3 s), one worker's start (~0.5 s, it loads CUDA), and the agent's
// exit: 30 s leaves room for two loaded cores; the restart count is what is asserted.
TEST(WorkerLaunch, AWorkerAskingForADeviceItCannotHaveFailsOnceAndIsNotRestarted) {
  if (ops::cuda_available()) GTEST_SKIP() << "this machine has a CUDA device: the worker would train on it";
  AgentCluster cluster({.nproc = 1,
                        .train_args = {"--model", "tiny", "--steps", "5", "--context", "128", "--capacity", "128",
                                       "--batch-tokens", "256", "--data", "synthetic:github", "--threads", "1",
                                       "--device", "cuda"}});
  ChildProcess& agent = cluster.start_agent("g1");
  const auto status = agent.wait_for(30s);
  const std::string log = cluster.agent_log("g1");
  ASSERT_TRUE(status) << "the agent still runs 30 s later\n" << log;
  ASSERT_TRUE(WIFEXITED(*status)) << log;
  EXPECT_EQ(WEXITSTATUS(*status), 3) << "the job failed permanently: do not requeue\n" << log;
  EXPECT_EQ(worker_pids(log).size(), 1u) << log;
  std::size_t starts = 0, errors = 0;
  for (std::size_t at = 0; (at = log.find("worker 0 started", at)) != std::string::npos; ++at) ++starts;
  for (std::size_t at = 0; (at = log.find("hdp: error: --device", at)) != std::string::npos; ++at) ++errors;
  EXPECT_EQ(starts, 1u) << "the worker was restarted\n" << log;
  EXPECT_EQ(errors, 1u) << log;
  EXPECT_TRUE(log.find("hdp: error: --device cuda: ") != std::string::npos &&
              (log.find("no CUDA device visible to this worker") != std::string::npos ||
               log.find("this build of hdp has no CUDA") != std::string::npos))
      << log;
}

}  // namespace
}  // namespace hdp::test
