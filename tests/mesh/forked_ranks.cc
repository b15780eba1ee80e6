#include "tests/mesh/forked_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <thread>

namespace hdp::mesh::test {

bool ForkedRanks::all_exited_zero() const {
  for (int s : statuses) {
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) return false;
  }
  return true;
}

ForkedRanks run_forked_ranks(int n, const std::function<int(int rank)>& fn, std::chrono::milliseconds bound) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      throw std::runtime_error("fork failed");
    }
    if (pid == 0) {
      int code = 3;
      try {
        code = fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ForkedRanks result;
  result.statuses.assign(static_cast<std::size_t>(n), -1);
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; ++r) {
      if (done[static_cast<std::size_t>(r)]) continue;
      int status = 0;
      if (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) == pids[static_cast<std::size_t>(r)]) {
        result.statuses[static_cast<std::size_t>(r)] = status;
        done[static_cast<std::size_t>(r)] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int r = 0; r < n; ++r) {
        if (done[static_cast<std::size_t>(r)]) continue;
        ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
        int status = 0;
        ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
        result.statuses[static_cast<std::size_t>(r)] = status;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

}  // namespace hdp::mesh::test
