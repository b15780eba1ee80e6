// File: tests/support/sentinel_cluster.h
//
// A private Redis Sentinel deployment for tests: one primary, `replicas` replicas
// (`replicaof 127.0.0.1 P`) and `sentinels` sentinels (`redis-server <conf> --sentinel`)
// monitoring it under `master_name` with `quorum`, each on a free loopback port, each with its own
// writable config file and directory in a private temp dir (Sentinel and failovers rewrite the
// config files). The binary is $HDP_REDIS_SERVER, else "redis-server". Persistence is off
// (`save ""`, `appendonly no`); sentinels use `resolve-hostnames no`, so they announce 127.0.0.1.
//
// The constructor returns once the deployment can fail over: every replica is in sync and every
// sentinel knows all replicas and all other sentinels (bounded by `ready_timeout`; throws
// hdp::Error otherwise). Every process dies with the test (PR_SET_PDEATHSIG, agents/process.h:
// start them from the test's own thread) and is SIGKILLed by PID and reaped by the destructor.
//
// Data nodes and sentinels are named by index (data node 0 is the first primary; after a failover
// the primary is whichever the sentinels name: primary_port()). kill / start (same port, same
// config file: a restarted sentinel keeps what it had written) / pause (SIGSTOP) / resume.
//
// Timing notes for tests: a failover takes down_after plus an election and a promotion, about 1-4 s
// with the defaults; a failed election is retried only after 2 x failover_timeout. A demoted primary
// that comes back (SIGCONT, restart) is turned into a replica by the sentinels only some seconds
// later (they wait about 8 s of it reporting master). A sentinel paused or starved for 2 s or more
// enters TILT mode (no action for 30 s): do not pause sentinels in tests that need a failover.
// Bound every wait.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"

namespace hdp::test {

struct SentinelClusterOptions {
  int replicas = 2;
  int sentinels = 3;
  int quorum = 2;
  std::string master_name = "hdp";
  std::chrono::milliseconds down_after{1000};        // sentinel down-after-milliseconds
  std::chrono::milliseconds failover_timeout{5000};  // sentinel failover-timeout
  // The primary refuses writes unless this many replicas acknowledged within
  // min_replicas_max_lag (Redis's min-replicas-to-write / min-replicas-max-lag; 0: off).
  int min_replicas_to_write = 0;
  int min_replicas_max_lag = 10;
  // replica-priority of data node i (index 0 is the first primary); missing: Redis's default, 100.
  // 0: the sentinels never promote it; otherwise the lowest promotable value wins.
  std::vector<int> replica_priority;
  std::string password;           // data nodes: requirepass + masterauth (+ sentinel auth-pass)
  std::string sentinel_password;  // sentinels: requirepass (+ sentinel sentinel-pass)
  std::chrono::milliseconds ready_timeout{30000};
};

class SentinelCluster {
 public:
  using Duration = std::chrono::milliseconds;

  explicit SentinelCluster(SentinelClusterOptions options = {});  // starts it; throws hdp::Error
  ~SentinelCluster();
  SentinelCluster(const SentinelCluster&) = delete;
  SentinelCluster& operator=(const SentinelCluster&) = delete;

  const SentinelClusterOptions& options() const { return options_; }
  // redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,.../<master_name>, without credentials.
  std::string url() const;
  // url() parsed, with the data password and the sentinel password set (when the cluster has them).
  elastic::RedisEndpoint endpoint() const;
  // Files (0600) holding the passwords, for --redis-password-file / --sentinel-password-file;
  // empty without that password.
  std::string password_file() const;
  std::string sentinel_password_file() const;
  const std::filesystem::path& dir() const { return dir_; }

  int data_count() const { return static_cast<int>(data_.size()); }
  int sentinel_count() const { return static_cast<int>(sentinels_.size()); }
  int data_port(int i) const;
  int sentinel_port(int j) const;
  pid_t data_pid(int i) const;
  int data_index(int port) const;  // -1 when no data node listens there
  std::string data_display(int i) const { return "127.0.0.1:" + std::to_string(data_port(i)); }

  // The primary's port as the first sentinel that answers says; throws hdp::Error when none does.
  int primary_port() const;
  // Waits until a sentinel names another primary than `old_port` and that node answers ROLE master;
  // returns its port. Throws hdp::Error after `timeout`, with the end of a sentinel's log.
  int wait_for_primary_change(int old_port, Duration timeout) const;
  // ROLE of data node i ("master", "slave"), or "" when it does not answer within 500 ms.
  std::string role(int i) const;
  // Waits until data node i answers ROLE `role`; false after `timeout`.
  bool wait_for_role(int i, const std::string& role, Duration timeout) const;
  // A connection to data node i, logged in with the data password.
  std::unique_ptr<elastic::RedisConnection> connect_data(int i, Duration timeout = Duration(1000)) const;
  // A connection to sentinel j, logged in with the sentinel password.
  std::unique_ptr<elastic::RedisConnection> connect_sentinel(int j, Duration timeout = Duration(1000)) const;

  void kill_data(int i);    // SIGKILL and reap
  void start_data(int i);   // again on the same port and config file, after kill_data()
  void pause_data(int i);   // SIGSTOP
  void resume_data(int i);  // SIGCONT
  void kill_sentinel(int j);
  void start_sentinel(int j);
  void pause_sentinel(int j);
  void resume_sentinel(int j);

  // The last `lines` lines of sentinel j's log (for failure messages).
  std::string sentinel_log_tail(int j, int lines = 30) const;
  // The failovers the sentinels have carried out so far, in order, each as "old-port new-port":
  // the distinct `+switch-master` events of all sentinels' logs (each sentinel logs the switch
  // it takes part in or learns of, so one failover appears in up to every log, once per pair).
  std::vector<std::string> primary_switches() const;

 private:
  struct Process {
    std::string name;  // "data-0", "sentinel-2"
    bool sentinel = false;
    int port = 0;
    pid_t pid = -1;
    std::filesystem::path config;
  };
  std::string config_text(const Process& process) const;
  // Writes the config (first start only) and starts the process; on a first start, retries on
  // other free ports when the port was taken. Throws hdp::Error.
  void launch(Process& process, bool first_start);
  bool try_launch(Process& process);  // false when it exited (port taken)
  void stop(Process& process);
  void signal(Process& process, int signo);
  void wait_ready() const;

  SentinelClusterOptions options_;
  std::string binary_ = "redis-server";
  std::filesystem::path dir_;
  std::vector<Process> data_;
  std::vector<Process> sentinels_;
};

}  // namespace hdp::test
