#include "tests/checkpoint/process_group.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "common/error.h"

namespace hdp::checkpoint::test {
namespace {

bool send_byte(int fd, char byte) { return ::write(fd, &byte, 1) == 1; }

// False on EOF or error: the peer is gone.
bool receive_byte(int fd, char& byte) { return ::read(fd, &byte, 1) == 1; }

// Answers rounds of votes until every child has closed its end.
void coordinate(const std::vector<int>& fds) {
  std::vector<bool> alive(fds.size(), true);
  bool anyone_died = false;
  for (;;) {
    bool result = !anyone_died, someone_voted = false;
    std::vector<bool> voted(fds.size(), false);
    for (std::size_t r = 0; r < fds.size(); ++r) {
      char vote = 0;
      if (alive[r] && receive_byte(fds[r], vote)) {
        voted[r] = someone_voted = true;
        result = result && vote == 1;
      } else if (alive[r]) {
        alive[r] = false;
        anyone_died = true;
        result = false;
      }
    }
    if (!someone_voted) return;
    for (std::size_t r = 0; r < fds.size(); ++r) {
      if (voted[r]) send_byte(fds[r], result ? 1 : 0);
    }
  }
}

}  // namespace

void PipeGroup::barrier() {
  if (!all_true(true)) throw PeerLost("rank " + std::to_string(rank_) + ": a peer left during a barrier");
}

bool PipeGroup::all_true(bool local) {
  char answer = 0;
  if (!send_byte(fd_, local ? 1 : 0) || !receive_byte(fd_, answer)) throw PeerLost("the coordinator is gone");
  return answer == 1;
}

std::vector<int> run_process_ranks(int world_size, const std::function<void(Group&)>& fn,
                                   const std::function<void(const std::vector<pid_t>&)>& on_started) {
  std::vector<int> parent_fds;
  std::vector<pid_t> pids;
  for (int r = 0; r < world_size; ++r) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) throw std::runtime_error("socketpair failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(pair[0]);
      for (int fd : parent_fds) ::close(fd);
      PipeGroup group(pair[1], r, world_size);
      int code = 0;
      try {
        fn(group);
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    ::close(pair[1]);
    parent_fds.push_back(pair[0]);
    pids.push_back(pid);
  }
  std::thread coordinator([&] { coordinate(parent_fds); });
  if (on_started) on_started(pids);
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  coordinator.join();
  for (int fd : parent_fds) ::close(fd);
  return statuses;
}

}  // namespace hdp::checkpoint::test
