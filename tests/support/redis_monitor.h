// File: tests/support/redis_monitor.h
//
// What a redis-server executed, as MONITOR sees it: a RedisMonitor runs `redis-cli -p PORT monitor`
// (the password through REDISCLI_AUTH, never argv) from its own thread into a file, from
// construction to destruction, and starts it again whenever it ends: Sentinel's reconfiguration of
// a node (`CLIENT KILL TYPE normal`) drops monitors with the other clients, so the record has a gap
// of a few milliseconds around each role change, right after the node changed role.
//
// What MONITOR shows on Redis 7.0 (checked on Debian's 7.0.15): commands after they ran, with the
// client's address or `lua` for a script's own calls, and on a replica what it applies from its
// primary's stream, as commands of a client whose address is the primary's (its host:port); never a
// command the server refused (READONLY, NOREPLICAS, NOAUTH) or an admin command (REPLICAOF, CONFIG,
// DEBUG).
//
// tcp_peers(port): the clients connected to a local server port as the kernel sees them, with the
// server side's state: ESTABLISHED while the client keeps its end, CLOSE_WAIT once the client closed
// its end and the server has not yet. Read while a server is paused (SIGSTOP), it tells which
// clients gave up on it: whatever it then executes for them reaches nobody.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace hdp::test {

struct MonitorLine {
  double at = 0;       // Unix seconds, the server's clock
  std::string client;  // "127.0.0.1:PORT", "lua", "unix:..."
  std::string command;  // upper case
  std::string text;     // the whole line
};

// Parses MONITOR output; lines that are not commands ("OK") are skipped.
std::vector<MonitorLine> parse_monitor(const std::string& text);

// Commands that read or write the keyspace, as opposed to connection handling, introspection and
// Sentinel's own traffic (AUTH HELLO ROLE PING INFO CLIENT SELECT COMMAND SUBSCRIBE PUBLISH QUIT
// ECHO RESET and replication's REPLCONF/PSYNC/SYNC).
bool is_data_command(const std::string& command);

// Data commands that write (anything but the reads hdp's clients make: GET MGET HGET HGETALL HMGET
// EXISTS PTTL TTL TYPE STRLEN SCAN KEYS XREAD XRANGE XREVRANGE XLEN XINFO).
bool is_write_command(const std::string& command);

class RedisMonitor {
 public:
  RedisMonitor(int port, std::filesystem::path file, std::string password = {});
  ~RedisMonitor();  // stop()
  RedisMonitor(const RedisMonitor&) = delete;
  RedisMonitor& operator=(const RedisMonitor&) = delete;

  void stop();  // ends the recording (idempotent)
  std::vector<MonitorLine> lines() const;  // what was recorded so far
  int restarts() const { return starts_.load() - 1; }

 private:
  void run();

  int port_;
  std::filesystem::path file_;
  std::string password_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> starts_{0};
  std::thread thread_;
};

// Remote "ip:port" -> state ("ESTABLISHED", "CLOSE_WAIT", ...) of every IPv4 TCP socket whose local
// port is `port`, except the listening one.
std::map<std::string, std::string> tcp_peers(int port);

}  // namespace hdp::test
