// File: agents/embedded_redis.h
//
// A private redis-server for `hdp run` and for tests: a free loopback port chosen at run time
// (retrying when another process wins the race for it), persistence off, state in a temp dir
// removed at the end. It can be killed (SIGKILL), restarted on the same port, paused (SIGSTOP)
// and resumed, which is how tests simulate a Redis crash or a stall. The server dies with its
// owner (PR_SET_PDEATHSIG), so it is never left behind.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hdp::agents {

struct EmbeddedRedisOptions {
  std::string binary = "redis-server";  // or $HDP_REDIS_SERVER when set
  std::string password;                 // requirepass for the default user, when not empty
  std::vector<std::string> extra_args;  // more redis-server arguments (ACL users, ...)
  bool unix_socket = false;             // also listen on <dir>/redis.sock
};

class EmbeddedRedis {
 public:
  explicit EmbeddedRedis(EmbeddedRedisOptions options = {});  // starts it; throws hdp::Error
  ~EmbeddedRedis();
  EmbeddedRedis(const EmbeddedRedis&) = delete;
  EmbeddedRedis& operator=(const EmbeddedRedis&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const;  // redis://127.0.0.1:<port>, without credentials
  // A file (mode 0600, in the server's private directory) holding the password, for
  // --redis-password-file; empty without a password. The server reads it from a file too.
  std::string password_file() const;
  std::string socket_path() const;

  void kill();   // SIGKILL and reap
  void start();  // again on the same port, after kill()
  void restart() { kill(); start(); }
  void pause();   // SIGSTOP
  void resume();  // SIGCONT

 private:
  bool try_start();  // false when the port was taken

  EmbeddedRedisOptions options_;
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Writes `text` to `path`, readable and writable by this user only (0600); throws hdp::Error.
std::filesystem::path write_private_file(const std::filesystem::path& path, std::string_view text);

// A free TCP port on 127.0.0.1 (bound, then released: callers must cope with losing a race to
// another process). Not one this process returned among its last 256 calls while the kernel offers
// others (thread-safe; the memory is the process's: a forked child starts with a copy).
int free_loopback_port();

}  // namespace hdp::agents
