// The agent/worker environment contract (elastic/worker_env.h): the agent's values replace any
// inherited variable of the contract, and the worker reads back exactly what the agent wrote
// (issue 13, defect 10; tests/agents/worker_launch_test.cc checks it between real processes).
#include "elastic/worker_env.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    "LOCAL_RANK=5",
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
}

TEST(WorkerEnvironment, NullInheritedEnvironmentGivesOnlyTheContract) {
  const auto env = worker_environment(agent_values(), nullptr);
  EXPECT_EQ(env.size(), worker_env::kAll.size() - 3);  // all but the two password files and the metrics file
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

}  // namespace
}  // namespace hdp::elastic
