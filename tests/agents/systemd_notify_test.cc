// The agent as a Type=notify service: a test plays systemd's side of sd_notify(3) on a unix
// datagram socket and checks READY=1 after registration, WATCHDOG=1 at half of WatchdogSec, and
// STOPPING=1 on a drain.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "elastic/job_keys.h"
#include "tests/agents/agent_cluster.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("bind " + path);
  }
  ~NotifySocket() { close(fd_); }
  // The next datagram, or "" after `timeout`.
  std::string receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char buffer[4096];
    ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(SystemdNotify, ReadyAfterRegistrationWatchdogAtHalfTheIntervalStoppingOnDrain) {
  AgentCluster cluster({.nproc = 1});
  TempDir dir("hdp-notify");
  const std::string path = (dir.path() / "notify.sock").string();
  NotifySocket systemd(path);
  // WatchdogSec=0.4 s: keep-alives are due every 200 ms.
  auto& agent = cluster.start_agent("n1", {}, {"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=400000"});

  const std::string ready = systemd.receive(10s);
  ASSERT_NE(ready.find("READY=1"), std::string::npos) << ready << cluster.all_logs();
  EXPECT_NE(ready.find("STATUS=registered as n1/"), std::string::npos) << ready;
  // READY comes after registration: the lease is already in Redis.
  EXPECT_TRUE(cluster.get(elastic::keys::node("n1")).has_value());

  int watchdogs = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 1s) {
    if (systemd.receive(300ms).find("WATCHDOG=1") != std::string::npos) ++watchdogs;
  }
  // 1 s at one keep-alive per 200 ms: 5, give or take scheduling; fewer than 3 would let
  // systemd's 400 ms watchdog fire.
  EXPECT_GE(watchdogs, 3);
  EXPECT_LE(watchdogs, 7);

  agent.signal(SIGTERM);
  bool stopping = false;
  for (int i = 0; i < 50 && !stopping; ++i) stopping = systemd.receive(200ms).find("STOPPING=1") != std::string::npos;
  EXPECT_TRUE(stopping);
  auto status = agent.wait_for(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 4) << *status;
}

}  // namespace
}  // namespace hdp::test
