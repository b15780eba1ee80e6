#include "agents/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace hdp::agents {

pid_t spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw InvalidArgument("spawn: empty command");
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<std::string> args = spec.argv, env = spec.environment.value_or(std::vector<std::string>{});
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (spec.environment) {
    for (auto& e : env) envp.push_back(e.data());
  } else {
    for (char** e = environ; *e; ++e) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  // Where close_range(2) is missing (kernels before 5.9), descriptors up to the soft limit are
  // closed one by one.
  rlimit files{};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20))
                         : 1 << 16;

  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    // Signal handlers are reset by exec, but a blocked mask is inherited: unblock everything.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // dup2 onto itself would keep the descriptor's close-on-exec flag: clear it instead.
    if (spec.stdin_fd == STDIN_FILENO && fcntl(STDIN_FILENO, F_SETFD, 0) != 0) _exit(127);
    if (spec.stdin_fd > STDIN_FILENO && dup2(spec.stdin_fd, STDIN_FILENO) < 0) _exit(127);
    // Nothing but stdio crosses exec, even a descriptor opened without close-on-exec by a library
    // or by another thread between its open and its fcntl.
    if (close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < max_fd; ++fd) close(fd);
    }
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before we ever signal it
  return pid;
}

void signal_group(pid_t pid, int signo) {
  if (pid > 0) kill(-pid, signo);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

}  // namespace hdp::agents
