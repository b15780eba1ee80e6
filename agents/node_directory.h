// File: agents/node_directory.h
//
// The directory an agent keeps for its life, which its workers share (HDP_NODE_DIR,
// elastic/worker_env.h): each worker's metrics file (agents/agent_metrics.h) and a directory
// corpus's index (trainer/data/corpus_index_cache.h). It is created under the system's temporary
// directory as hdp-agent-<pid>-XXXXXX, readable by the agent's user only, and removed with
// everything in it when the agent ends. A SIGKILLed agent cannot remove its own: each agent, as it
// starts, removes every such directory whose agent (the pid in its name) is gone, and the
// hdp-agent-metrics-<pid>-XXXXXX directories of earlier versions likewise.
#pragma once

#include <filesystem>

namespace hdp::agents {

class NodeDirectory {
 public:
  // Throws hdp::Error when the directory cannot be created.
  NodeDirectory();
  ~NodeDirectory();
  NodeDirectory(const NodeDirectory&) = delete;
  NodeDirectory& operator=(const NodeDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // The directory's name prefix (followed by the pid, '-' and six characters).
  static constexpr const char* kPrefix = "hdp-agent-";

 private:
  static void remove_stale();

  std::filesystem::path path_;
};

}  // namespace hdp::agents
