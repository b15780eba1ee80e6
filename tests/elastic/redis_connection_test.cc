// RedisConnection's socket against a real redis-server: it must be close-on-exec, or every process
// its owner starts (an agent's workers, the agents of `hdp run`) holds the connection open
// (issue 13, defect 13). tests/agents/worker_launch_test.cc checks the same between real processes.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "elastic/redis_connection.h"
#include "tests/support/redis_server.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::stoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

// This process's sockets connected to 127.0.0.1:`port` (TCP) or to `path` (unix).
std::vector<int> sockets_to(int port, const std::string& path) {
  std::vector<int> found;
  for (int fd : open_fds()) {
    struct stat info {};
    if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
    if (peer.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
      if (ntohs(in->sin_port) == port && ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK) found.push_back(fd);
    } else if (peer.ss_family == AF_UNIX && !path.empty()) {
      const auto* un = reinterpret_cast<const sockaddr_un*>(&peer);
      if (path == un->sun_path) found.push_back(fd);
    }
  }
  return found;
}

void expect_close_on_exec(const std::vector<int>& fds) {
  for (int fd : fds) {
    const int flags = fcntl(fd, F_GETFD);
    ASSERT_GE(flags, 0);
    EXPECT_TRUE(flags & FD_CLOEXEC) << "the connection's socket (fd " << fd << ") is inherited across exec";
  }
}

TEST(RedisConnection, TcpSocketIsCloseOnExec) {
  RedisServer server;
  ASSERT_TRUE(sockets_to(server.port(), "").empty());
  elastic::RedisConnection connection(elastic::parse_redis_url(server.url()), 2s, 2s);
  const auto fds = sockets_to(server.port(), "");
  ASSERT_EQ(fds.size(), 1u) << "expected the connection's one socket to the server";
  expect_close_on_exec(fds);
}

TEST(RedisConnection, UnixSocketIsCloseOnExec) {
  RedisServer server({.unix_socket = true});
  elastic::RedisConnection connection(elastic::parse_redis_url("unix://" + server.socket_path()), 2s, 2s);
  const auto fds = sockets_to(0, server.socket_path());
  ASSERT_EQ(fds.size(), 1u) << "expected the connection's one socket to " << server.socket_path();
  expect_close_on_exec(fds);
}

}  // namespace
}  // namespace hdp::test
