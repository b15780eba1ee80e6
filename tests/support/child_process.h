// File: tests/support/child_process.h
//
// A child process started by a test: fork + exec, its own process group, killed with SIGKILL and
// reaped when the object dies (no orphan or zombie survives a failed test). Output goes to a file.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hdp::test {

class ChildProcess {
 public:
  // Starts argv[0] (looked up in PATH) with `env` added to the environment; stdout and stderr go
  // to `output_path` (or /dev/null when empty).
  ChildProcess(std::vector<std::string> argv, std::string output_path = {},
               std::vector<std::string> env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int signo);
  // Waits up to `timeout` for the exit; returns the wait status, or nullopt when still running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // SIGKILL and reap; no-op when it already exited.
  void kill();

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Runs a command to completion (bounded by `timeout`, then SIGKILL) and captures what it printed.
struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout
  std::string out;
  std::string err;
};
CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The lines `text` holds (its newlines): a refused command prints exactly one on stderr.
inline int line_count(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace hdp::test
