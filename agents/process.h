// File: agents/process.h
//
// Starting child processes that cannot outlive their parent: each child gets its own process
// group (so its own children are reached by one signal) and PR_SET_PDEATHSIG=SIGKILL (so it dies
// with the parent, even when the parent is killed with SIGKILL). A child inherits no file
// descriptor but stdin (or ProcessSpec::stdin_fd in its place), stdout and stderr: every other one
// is closed before exec, whether or not its opener marked it close-on-exec (the agent's Redis
// socket must never reach a worker).
// Reaping is the caller's job (the agent reaps on SIGCHLD).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace hdp::agents {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // The child's whole environment ("NAME=value" entries); nullopt: the parent's. To change some
  // variables, build the whole list from `environ`, replacing the inherited entries of the same
  // names (a name given twice is ambiguous: getenv returns the first), as
  // elastic/worker_env.h does for workers.
  std::optional<std::vector<std::string>> environment;
  // A descriptor of the parent's that becomes the child's standard input (a pipe's read end);
  // -1: the parent's standard input.
  int stdin_fd = -1;
};

// PR_SET_PDEATHSIG fires when the *thread* that forked exits, not only the process: spawn from a
// thread that lives as long as the child should (the agent's io thread, a program's main thread).
//
// Forks and execs; returns the child's pid (also its process group id). Throws hdp::Error when
// fork fails; an exec failure shows as the child exiting with status 127.
pid_t spawn(const ProcessSpec& spec);

// Sends `signo` to the child's whole process group.
void signal_group(pid_t pid, int signo);

// Describes a wait status: "exit 3", "signal 9 (Killed)".
std::string describe_status(int status);

}  // namespace hdp::agents
