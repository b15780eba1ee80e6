// File: tests/support/redis_server.h
//
// A private redis-server for one test: a free loopback port chosen at run time (tests run in
// parallel), persistence off, state in a temp dir. Tests can kill it (SIGKILL), pause it
// (SIGSTOP), and start it again on the same port to simulate a crash and a restart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {

struct RedisServerOptions {
  std::string password;                 // requirepass for the default user, when not empty
  std::vector<std::string> extra_args;  // more redis-server arguments, e.g. {"--user", "alice", "on", ">pw", "~*", "+@all"}
  bool unix_socket = false;             // also listen on a unix socket in the temp dir
};

class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();

  int port() const { return port_; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // redis://127.0.0.1:<port>, with no credentials.
  std::string url() const;
  std::string socket_path() const;

  void kill();     // SIGKILL and reap
  void start();    // start on the same port (after kill)
  void restart() { kill(); start(); }
  void pause();    // SIGSTOP
  void resume();   // SIGCONT

 private:
  bool try_start();  // false when the port was taken

  RedisServerOptions options_;
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// A free TCP port on 127.0.0.1 (bound and released; the caller must cope with losing a race).
int free_loopback_port();

}  // namespace hdp::test
