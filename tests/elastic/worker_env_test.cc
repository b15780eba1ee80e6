// The agent/worker environment contract (elastic/worker_env.h): the agent's values replace any
// inherited variable of the contract, and the worker reads back exactly what the agent wrote
// (issue 13, defect 10; tests/agents/worker_launch_test.cc checks it between real processes).
#include "elastic/worker_env.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"

namespace hdp::elastic {
namespace {

WorkerEnvironment agent_values() {
  WorkerEnvironment values;
  values.job = "job-1";
  values.redis_url = "redis://10.0.0.5:6379/2";
  values.node_id = "e1";
  values.incarnation = "00ff00ff00ff00ff";
  values.local_rank = 1;
  values.nproc_per_node = 2;
  values.advertise_address = "10.0.0.7";
  values.agent_pid = 4242;
  values.agent_channel = "@hdp-agent-4242-0123456789abcdef";
  values.node_dir = "/tmp/hdp-agent-4242-Ab12Cd";
  return values;
}

// What a systemd unit, a Slurm step or a shell may leave in the agent's environment.
const std::vector<std::string> kInherited = {
    "PATH=/usr/bin:/bin",          "HDP_NODE_ID=x",
    "HDP_JOB_ID=stale-job",        "HDP_REDIS_URL=redis://stale:1",
    "HDP_REDIS_PASSWORD_FILE=/stale/password", "HDP_LOCAL_RANK=7",
    "HDP_NODE_INCARNATION=dead",   "HDP_NPROC_PER_NODE=8",
    "HDP_ADVERTISE_ADDR=192.0.2.1", "HDP_AGENT_PID=1",
    "HDP_LOG_LEVEL=debug",         "HDP_NODE_ID_SUFFIX=not-a-contract-name",
    "LOCAL_RANK=5",                "HDP_NODE_DIR=/tmp/hdp-agent-1-stale",
    "NO_EQUALS_SIGN"};

std::vector<const char*> as_environ(const std::vector<std::string>& entries) {
  std::vector<const char*> pointers;
  for (const auto& e : entries) pointers.push_back(e.c_str());
  pointers.push_back(nullptr);
  return pointers;
}

// getenv's rule: the first entry of that name.
const char* first_match(const std::vector<std::string>& env, const char* name) {
  const std::size_t length = std::strlen(name);
  for (const auto& e : env) {
    if (e.size() > length && e.compare(0, length, name) == 0 && e[length] == '=') return e.c_str() + length + 1;
  }
  return nullptr;
}

int count_named(const std::vector<std::string>& env, const std::string& name) {
  return static_cast<int>(std::count_if(env.begin(), env.end(), [&](const std::string& e) {
    return e.compare(0, name.size() + 1, name + "=") == 0;
  }));
}

TEST(WorkerEnvironment, AgentValuesReplaceEveryInheritedContractVariable) {
  const auto inherited = as_environ(kInherited);
  const auto env = worker_environment(agent_values(), inherited.data());
  for (const char* name : worker_env::kAll) {
    EXPECT_LE(count_named(env, name), 1) << name << " appears more than once";
  }
  EXPECT_STREQ(first_match(env, "HDP_NODE_ID"), "e1");
  EXPECT_STREQ(first_match(env, "HDP_JOB_ID"), "job-1");
  EXPECT_STREQ(first_match(env, "HDP_REDIS_URL"), "redis://10.0.0.5:6379/2");
  EXPECT_STREQ(first_match(env, "HDP_LOCAL_RANK"), "1");
  EXPECT_STREQ(first_match(env, "LOCAL_RANK"), "1") << "torchrun's name, for workers written for torchrun";
  EXPECT_STREQ(first_match(env, "HDP_NODE_INCARNATION"), "00ff00ff00ff00ff");
  EXPECT_STREQ(first_match(env, "HDP_NPROC_PER_NODE"), "2");
  EXPECT_STREQ(first_match(env, "HDP_ADVERTISE_ADDR"), "10.0.0.7");
  EXPECT_STREQ(first_match(env, "HDP_AGENT_PID"), "4242");
  EXPECT_STREQ(first_match(env, "HDP_NODE_DIR"), "/tmp/hdp-agent-4242-Ab12Cd");
  // The agent has no password file: the inherited one must not reach the worker.
  EXPECT_EQ(first_match(env, "HDP_REDIS_PASSWORD_FILE"), nullptr);
  // Everything else passes through, once, in its order; an entry without '=' is dropped.
  EXPECT_STREQ(first_match(env, "PATH"), "/usr/bin:/bin");
  EXPECT_STREQ(first_match(env, "HDP_LOG_LEVEL"), "debug");
  EXPECT_STREQ(first_match(env, "HDP_NODE_ID_SUFFIX"), "not-a-contract-name");
  EXPECT_EQ(std::count(env.begin(), env.end(), "NO_EQUALS_SIGN"), 0);
}

TEST(WorkerEnvironment, PasswordFileIsWrittenWhenTheAgentHasOne) {
  WorkerEnvironment values = agent_values();
  values.redis_password_file = "/etc/hdp/redis.password";
  const auto inherited = as_environ(kInherited);
  const auto env = worker_environment(values, inherited.data());
  EXPECT_EQ(count_named(env, "HDP_REDIS_PASSWORD_FILE"), 1);
  EXPECT_STREQ(first_match(env, "HDP_REDIS_PASSWORD_FILE"), "/etc/hdp/redis.password");
}

TEST(WorkerEnvironment, WorkerReadsBackWhatTheAgentWrote) {
  WorkerEnvironment values = agent_values();
  values.redis_password_file = "/etc/hdp/redis.password";
  values.metrics_file = "/run/hdp/metrics/worker-1.json";
  const auto inherited = as_environ(kInherited);
  const auto env = worker_environment(values, inherited.data());
  const WorkerEnvironment read = read_worker_environment([&](const char* name) { return first_match(env, name); });
  EXPECT_EQ(read.job, values.job);
  EXPECT_EQ(read.redis_url, values.redis_url);
  EXPECT_EQ(read.redis_password_file, values.redis_password_file);
  EXPECT_EQ(read.node_id, values.node_id);
  EXPECT_EQ(read.incarnation, values.incarnation);
  EXPECT_EQ(read.local_rank, values.local_rank);
  EXPECT_EQ(read.nproc_per_node, values.nproc_per_node);
  EXPECT_EQ(read.advertise_address, values.advertise_address);
  EXPECT_EQ(read.agent_pid, values.agent_pid);
  EXPECT_EQ(read.metrics_file, values.metrics_file);
  EXPECT_EQ(read.node_dir, values.node_dir);
}

TEST(WorkerEnvironment, NullInheritedEnvironmentGivesOnlyTheContractAndTheHeapTunable) {
  const auto env = worker_environment(agent_values(), nullptr);
  // All but the two password files, the metrics file and the standby's marker; and GLIBC_TUNABLES.
  EXPECT_EQ(env.size(), worker_env::kAll.size() - 4 + 1);
  EXPECT_STREQ(first_match(env, "GLIBC_TUNABLES"), "glibc.malloc.hugetlb=1");
}

// glibc.malloc.hugetlb=1 is added to what the agent inherited, once, and never overrides a value of
// that tunable the agent was given (a tunable whose name only starts alike is another tunable).
// Every inherited GLIBC_TUNABLES entry is kept, in order (glibc reads them all, a later setting
// winning), as one; empty tunables are left out.
TEST(WorkerEnvironment, TheHeapTunableIsAddedUnlessTheAgentSetsIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"glibc.malloc.arena_max=2"}, "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"},
      {{"glibc.malloc.hugetlb=0"}, "glibc.malloc.hugetlb=0"},
      {{"glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"}, "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"},
      {{"glibc.malloc.hugetlbx=1"}, "glibc.malloc.hugetlbx=1:glibc.malloc.hugetlb=1"},
      {{""}, "glibc.malloc.hugetlb=1"},
      {{"glibc.malloc.arena_max=2::"}, "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"},
      {{"glibc.malloc.arena_max=2", "glibc.malloc.hugetlb=0"}, "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0"},
      {{"a=1", "", "b=2"}, "a=1:b=2:glibc.malloc.hugetlb=1"},
  };
  for (const auto& [given, expected] : cases) {
    std::vector<std::string> entries = {"PATH=/bin"};
    for (const std::string& value : given) entries.push_back("GLIBC_TUNABLES=" + value);
    const auto inherited = as_environ(entries);
    const auto env = worker_environment(agent_values(), inherited.data());
    EXPECT_EQ(count_named(env, "GLIBC_TUNABLES"), 1) << expected;
    EXPECT_STREQ(first_match(env, "GLIBC_TUNABLES"), expected.c_str());
    EXPECT_STREQ(first_match(env, "PATH"), "/bin");
  }
}

TEST(WorkerEnvironment, AnAgentChannelThatIsNotAnAbstractSocketNameIsRefused) {
  const auto inherited = as_environ({});
  const auto complete = worker_environment(agent_values(), inherited.data());
  EXPECT_EQ(read_worker_environment([&](const char* name) { return first_match(complete, name); }).agent_channel,
            "@hdp-agent-4242-0123456789abcdef");
  for (const char* bad : {"/run/hdp.sock", "@", "hdp-agent"}) {
    try {
      read_worker_environment([&](const char* name) {
        return std::strcmp(name, "HDP_AGENT_CHANNEL") == 0 ? bad : first_match(complete, name);
      });
      ADD_FAILURE() << "accepted HDP_AGENT_CHANNEL='" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("HDP_AGENT_CHANNEL"), std::string::npos) << e.what();
    }
  }
}

TEST(WorkerEnvironment, MissingOrMalformedVariablesAreNamed) {
  const auto inherited = as_environ({});
  const auto complete = worker_environment(agent_values(), inherited.data());
  for (const char* required : {"HDP_JOB_ID", "HDP_REDIS_URL", "HDP_NODE_ID", "HDP_NODE_INCARNATION", "HDP_LOCAL_RANK"}) {
    try {
      read_worker_environment([&](const char* name) {
        return std::strcmp(name, required) == 0 ? nullptr : first_match(complete, name);
      });
      ADD_FAILURE() << "accepted an environment without " << required;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(required) + " is not set"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"-1", "1x", "", "99999999999"}) {
    try {
      read_worker_environment([&](const char* name) {
        return std::strcmp(name, "HDP_LOCAL_RANK") == 0 ? bad : first_match(complete, name);
      });
      ADD_FAILURE() << "accepted HDP_LOCAL_RANK='" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("HDP_LOCAL_RANK"), std::string::npos) << e.what();
    }
  }
}


// A standby worker's assignment (StandbyAssignment): the slot's contract variables, nothing else,
// through the text the agent writes and the standby reads.
TEST(StandbyAssignment, CarriesTheSlotsContractVariablesOnly) {
  WorkerEnvironment values = agent_values();
  const char* inherited[] = {"PATH=/usr/bin", "HDP_LOG_LEVEL=debug", nullptr};
  const auto slot_environment = worker_environment(values, inherited);
  const StandbyAssignment assignment = StandbyAssignment::of(slot_environment);
  const std::string text = assignment.encode();
  EXPECT_EQ(text.find("PATH="), std::string::npos) << "an inherited variable is the standby's own already";
  EXPECT_EQ(text.find("HDP_LOG_LEVEL"), std::string::npos);
  EXPECT_NE(text.find("HDP_LOCAL_RANK=1\n"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("\n\n"));
  const StandbyAssignment back = StandbyAssignment::decode(std::string_view(text).substr(0, text.size() - 1));
  EXPECT_EQ(back.variables, assignment.variables);
  // Every variable the slot's worker would read is there, with the agent's value.
  std::vector<std::pair<std::string, std::string>> expected;
  for (const std::string& entry : slot_environment) {
    const auto eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (name.starts_with("HDP_") && name != "HDP_LOG_LEVEL") expected.emplace_back(name, entry.substr(eq + 1));
    if (name == worker_env::kTorchLocalRank) expected.emplace_back(name, entry.substr(eq + 1));
  }
  EXPECT_EQ(back.variables, expected);
  // A standby's own marker is never part of an assignment.
  values.standby = true;
  EXPECT_EQ(StandbyAssignment::of(worker_environment(values, nullptr)).encode().find(worker_env::kStandby),
            std::string::npos);
}

TEST(StandbyAssignment, MalformedTextIsRefusedNamingTheLine) {
  auto refused = [](std::string_view text, const std::string& part) {
    try {
      StandbyAssignment::decode(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused("HDP_LOCAL_RANK\n", "has no '='");
  refused("PATH=/bin\n", "'PATH=/bin' is not a slot's variable");
  refused("HDP_STANDBY=1\n", "not a slot's variable");
  refused("HDP_LOCAL_RANK=1\nHDP_LOCAL_RANK=2\n", "HDP_LOCAL_RANK is given twice");
  EXPECT_TRUE(StandbyAssignment::decode("").variables.empty());
}

// The worker's side over a real pipe: the environment becomes the slot's, every other variable
// of the contract (HDP_STANDBY included) unset; end of input or a cancellation changes nothing.
class StandbyPipe : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    setenv(worker_env::kStandby, "1", 1);
    setenv(worker_env::kMetricsFile, "/tmp/not-this-slots", 1);
    setenv(worker_env::kLocalRank, "0", 1);
  }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
    for (const char* name : worker_env::kAll) unsetenv(name);
  }
  void write_text(std::string_view text) { ASSERT_EQ(write(fds_[1], text.data(), text.size()), static_cast<ssize_t>(text.size())); }
  void close_writer() {
    close(fds_[1]);
    fds_[1] = -1;
  }
  int reader() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

TEST_F(StandbyPipe, AnAssignmentBecomesTheEnvironment) {
  // In pieces, as a pipe may deliver it.
  std::thread writer([this] {
    write_text("HDP_LOCAL_RANK=1\nHDP_JOB_");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    write_text("ID=j\n\n");
  });
  std::atomic<bool> cancelled{false};
  EXPECT_TRUE(await_standby_assignment(reader(), cancelled));
  writer.join();
  EXPECT_STREQ(std::getenv(worker_env::kLocalRank), "1");
  EXPECT_STREQ(std::getenv(worker_env::kJobId), "j");
  EXPECT_EQ(std::getenv(worker_env::kStandby), nullptr);
  EXPECT_EQ(std::getenv(worker_env::kMetricsFile), nullptr) << "the slot has none: the standby's is dropped";
}

TEST_F(StandbyPipe, EndOfInputBeforeTheEmptyLineChangesNothing) {
  write_text("HDP_LOCAL_RANK=1\n");
  close_writer();
  std::atomic<bool> cancelled{false};
  EXPECT_FALSE(await_standby_assignment(reader(), cancelled));
  EXPECT_STREQ(std::getenv(worker_env::kLocalRank), "0");
  EXPECT_STREQ(std::getenv(worker_env::kStandby), "1");
}

TEST_F(StandbyPipe, ACancellationEndsTheWaitWithinItsPollSlice) {
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancelled = true;
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(await_standby_assignment(reader(), cancelled));
  const auto took = std::chrono::steady_clock::now() - started;
  canceller.join();
  // 100 ms to the cancellation, then at most one 200 ms poll slice; 1 s leaves room for a loaded
  // machine.
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_STREQ(std::getenv(worker_env::kStandby), "1");
}

TEST_F(StandbyPipe, GarbageIsRefusedAndChangesNothing) {
  write_text("\x01\x02 no equals sign\n\n");
  std::atomic<bool> cancelled{false};
  EXPECT_THROW(await_standby_assignment(reader(), cancelled), InvalidArgument);
  EXPECT_STREQ(std::getenv(worker_env::kStandby), "1");
  // 64 KiB and more without an empty line is not an assignment either.
  std::thread writer([this] {
    const std::string line = "HDP_LOCAL_RANK=" + std::string(1000, '1') + "\n";
    for (int i = 0; i < 70; ++i) write_text(line);
  });
  EXPECT_THROW(await_standby_assignment(reader(), cancelled), InvalidArgument);
  writer.join();
}

}  // namespace
}  // namespace hdp::elastic
