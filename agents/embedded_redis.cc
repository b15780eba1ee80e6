#include "agents/embedded_redis.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <deque>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "agents/process.h"
#include "common/error.h"

namespace hdp::agents {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

bool accepts_connections(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = loopback(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// The socket file appears at bind(), before listen(): only a connection that succeeds says the
// server is ready on it.
bool accepts_connections(const std::filesystem::path& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = socket_path.string();
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::filesystem::path write_private_file(const std::filesystem::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
  const bool ok = fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  ::close(fd);
  if (!ok) throw Error("cannot write " + path.string() + ": " + std::strerror(error));
  return path;
}

int free_loopback_port() {
  // The kernel may hand out the port it handed out a moment ago, once that socket is closed: two
  // calls in a row once gave two agents the same metrics port. So this process does not return a
  // port it returned among its last kRemembered while the kernel offers others; after kAttempts
  // offers of remembered ports (a narrow ephemeral range) it returns the kernel's.
  constexpr std::size_t kRemembered = 256;
  constexpr int kAttempts = 64;
  static std::mutex mutex;
  static std::deque<int> returned;
  for (int attempt = 1;; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(std::string("cannot open a socket: ") + std::strerror(errno));
    sockaddr_in addr = loopback(0);
    socklen_t length = sizeof addr;
    const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                       getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
    close(fd);
    if (!bound) throw Error("cannot bind a loopback port");
    const int port = ntohs(addr.sin_port);
    std::lock_guard lock(mutex);
    if (attempt < kAttempts && std::find(returned.begin(), returned.end(), port) != returned.end()) continue;
    returned.push_back(port);
    if (returned.size() > kRemembered) returned.pop_front();
    return port;
  }
}

EmbeddedRedis::EmbeddedRedis(EmbeddedRedisOptions options) : options_(std::move(options)) {
  if (const char* binary = std::getenv("HDP_REDIS_SERVER"); binary && *binary) options_.binary = binary;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hdp-redis-XXXXXX";
  if (!mkdtemp(pattern.data())) throw Error("cannot create a directory for redis-server under " + pattern);
  dir_ = pattern;
  for (int attempt = 0; attempt < 20; ++attempt) {
    port_ = free_loopback_port();
    if (try_start()) return;
  }
  std::filesystem::remove_all(dir_);
  throw Error("could not start " + options_.binary + " on a free loopback port (see its log under " + dir_.string() + ")");
}

EmbeddedRedis::~EmbeddedRedis() {
  kill();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string EmbeddedRedis::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

std::string EmbeddedRedis::password_file() const {
  if (options_.password.empty()) return {};
  return write_private_file(dir_ / "redis.password", options_.password + "\n").string();
}

std::string EmbeddedRedis::socket_path() const { return (dir_ / "redis.sock").string(); }

bool EmbeddedRedis::try_start() {
  std::vector<std::string> argv = {options_.binary, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", dir_.string(), "--daemonize", "no",
                                   "--logfile", (dir_ / "redis.log").string(), "--loglevel", "warning"};
  if (options_.unix_socket) argv.insert(argv.end(), {"--unixsocket", socket_path(), "--unixsocketperm", "700"});
  // The password goes in a file only this user can read, never on redis-server's command line.
  if (!options_.password.empty()) argv.insert(argv.begin() + 1, write_private_file(dir_ / "redis.conf", "requirepass \"" + options_.password + "\"\n").string());
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  pid_ = spawn({argv, {}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;  // it exited: most likely the port was taken
    }
    // Ready once every listener it was given accepts a connection.
    if (accepts_connections(port_) && (!options_.unix_socket || accepts_connections(socket_path()))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill();
  throw Error("redis-server did not start listening on port " + std::to_string(port_) + " within 10 s");
}

void EmbeddedRedis::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void EmbeddedRedis::start() {
  // The port was ours a moment ago; retry briefly in case the old socket lingers.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (try_start()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw Error("could not restart redis-server on port " + std::to_string(port_));
}

void EmbeddedRedis::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void EmbeddedRedis::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

}  // namespace hdp::agents
