// File: agents/node_directory.h
//
// The directory an agent keeps for its life, which its workers share (HDP_NODE_DIR,
// elastic/worker_env.h): each worker's metrics file (agents/agent_metrics.h) and a directory
// corpus's index (trainer/data/corpus_index_cache.h). It is created under the system's temporary
// directory as hdp-agent-<pid>-XXXXXX (an absolute path), readable by the agent's user only, and
// removed with everything in it when the agent ends. The agent holds an flock on its `lock` file
// for its life (close-on-exec: its workers do not hold it).
//
// A SIGKILLed agent cannot remove its own: each agent, as it starts, removes every such directory
// of its user whose agent is gone: the pid in its name names no process, and (a pid of another
// namespace, where agents share a temporary directory, may look gone) nobody holds its lock. An
// earlier version's hdp-agent-metrics-<pid>-XXXXXX directory, which has no lock, is removed on the
// pid alone, as that version did.
#pragma once

#include <filesystem>

namespace hdp::agents {

class NodeDirectory {
 public:
  // Throws hdp::Error when the directory cannot be created or locked (no temporary directory, a
  // read-only one).
  NodeDirectory();
  ~NodeDirectory();
  NodeDirectory(const NodeDirectory&) = delete;
  NodeDirectory& operator=(const NodeDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // The directory's name prefix (followed by the pid, '-' and six characters), and its lock file.
  static constexpr const char* kPrefix = "hdp-agent-";
  static constexpr const char* kLockFile = "lock";

 private:
  static void remove_stale(const std::filesystem::path& temporary);

  std::filesystem::path path_;
  int lock_ = -1;
};

}  // namespace hdp::agents
