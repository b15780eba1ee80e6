#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace hdp::test {
namespace {

bool can_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

std::string redis_server_binary() {
  const char* env = std::getenv("HDP_REDIS_SERVER");
  return env && *env ? env : "redis-server";
}

}  // namespace

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)), dir_("hdp-redis") {
  // Another test may take the port between our probe and redis' bind: try a few ports.
  for (int attempt = 0; attempt < 20; ++attempt) {
    port_ = free_loopback_port();
    if (try_start()) return;
  }
  throw std::runtime_error("could not start redis-server on a free port");
}

RedisServer::~RedisServer() { kill(); }

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

std::string RedisServer::socket_path() const { return (dir_.path() / "redis.sock").string(); }

bool RedisServer::try_start() {
  std::vector<std::string> argv = {redis_server_binary(), "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", dir_.path().string(),
                                   "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"};
  if (options_.unix_socket) {
    argv.insert(argv.end(), {"--unixsocket", socket_path(), "--unixsocketperm", "700"});
  }
  if (!options_.password.empty()) argv.insert(argv.end(), {"--requirepass", options_.password});
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  process_ = std::make_unique<ChildProcess>(argv, (dir_.path() / "redis.log").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!process_->running()) return false;  // most likely: the port was taken
    if (can_connect(port_)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  throw std::runtime_error("redis-server did not start listening within 10 s");
}

void RedisServer::kill() {
  if (process_) process_->kill();
}

void RedisServer::start() {
  // The port was ours a moment ago; retry briefly in case the old socket lingers.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (try_start()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("could not restart redis-server on port " + std::to_string(port_));
}

void RedisServer::pause() {
  if (process_) process_->signal(SIGSTOP);
}

void RedisServer::resume() {
  if (process_) process_->signal(SIGCONT);
}

}  // namespace hdp::test
