#include "tests/support/sentinel_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "agents/embedded_redis.h"
#include "agents/process.h"
#include "common/error.h"

namespace hdp::test {
namespace {

using Clock = std::chrono::steady_clock;
using elastic::RedisConnection;
using elastic::RedisEndpoint;
using elastic::RedisReply;

bool accepts_connections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// A config value in double quotes (the test passwords hold no quote or backslash).
std::string quoted(const std::string& text) { return "\"" + text + "\""; }

// The fields of a flat [name, value, name, value, ...] reply (SENTINEL master, SENTINEL replicas).
std::map<std::string, std::string> fields(const RedisReply& reply) {
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i + 1 < reply.elements.size(); i += 2) out[reply.elements[i].str] = reply.elements[i + 1].str;
  return out;
}

std::unique_ptr<RedisConnection> connect_to(int port, const std::string& password, std::chrono::milliseconds timeout) {
  RedisEndpoint endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = port;
  if (!password.empty()) endpoint.password = password;
  return std::make_unique<RedisConnection>(endpoint, timeout, timeout);
}

}  // namespace

SentinelCluster::SentinelCluster(SentinelClusterOptions options) : options_(std::move(options)) {
  if (const char* binary = std::getenv("HDP_REDIS_SERVER"); binary && *binary) binary_ = binary;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hdp-sentinel-XXXXXX";
  if (!mkdtemp(pattern.data())) throw Error("cannot create a directory for a sentinel cluster under " + pattern);
  dir_ = pattern;
  try {
    for (int i = 0; i <= options_.replicas; ++i) data_.push_back({"data-" + std::to_string(i), false, 0, -1, {}});
    for (int j = 0; j < options_.sentinels; ++j) sentinels_.push_back({"sentinel-" + std::to_string(j), true, 0, -1, {}});
    // The replicas first, and in sync before the sentinels start: a sentinel learns the replicas
    // from the primary's INFO, which it reads at once and then only every 10 s.
    for (auto& process : data_) launch(process, true);
    const auto deadline = Clock::now() + options_.ready_timeout;
    for (int i = 1; i < data_count(); ++i) {
      while (true) {
        try {
          if (connect_data(i)->command({"INFO", "replication"}).str.find("master_link_status:up") != std::string::npos) break;
        } catch (const Error&) {
        }
        if (Clock::now() >= deadline) throw Error("replica " + std::to_string(i) + " did not sync with its primary");
        std::this_thread::sleep_for(Duration(20));
      }
    }
    for (auto& process : sentinels_) launch(process, true);
    wait_ready();
  } catch (...) {
    for (auto& process : sentinels_) stop(process);
    for (auto& process : data_) stop(process);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

SentinelCluster::~SentinelCluster() {
  // Sentinels first, so that none reacts to the data nodes going away.
  for (auto& process : sentinels_) stop(process);
  for (auto& process : data_) stop(process);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string SentinelCluster::config_text(const Process& process) const {
  std::ostringstream text;
  text << "port " << process.port << "\n"
       << "bind 127.0.0.1\n"
       << "daemonize no\n"
       << "dir " << quoted((dir_ / process.name).string()) << "\n"
       << "logfile " << quoted((dir_ / (process.name + ".log")).string()) << "\n"
       << "loglevel notice\n";
  if (process.sentinel) {
    const std::string& name = options_.master_name;
    text << "sentinel resolve-hostnames no\n"
         << "sentinel monitor " << name << " 127.0.0.1 " << data_.front().port << " " << options_.quorum << "\n"
         << "sentinel down-after-milliseconds " << name << " " << options_.down_after.count() << "\n"
         << "sentinel failover-timeout " << name << " " << options_.failover_timeout.count() << "\n"
         << "sentinel parallel-syncs " << name << " 1\n";
    if (!options_.password.empty()) text << "sentinel auth-pass " << name << " " << quoted(options_.password) << "\n";
    if (!options_.sentinel_password.empty()) {
      // Sentinels talk to each other too: they need the password they require.
      text << "requirepass " << quoted(options_.sentinel_password) << "\n"
           << "sentinel sentinel-pass " << quoted(options_.sentinel_password) << "\n";
    }
  } else {
    text << "save \"\"\n"
         << "appendonly no\n"
         << "repl-diskless-sync yes\n"
         << "repl-diskless-sync-delay 0\n";
    if (options_.min_replicas_to_write > 0) {
      text << "min-replicas-to-write " << options_.min_replicas_to_write << "\n"
           << "min-replicas-max-lag " << options_.min_replicas_max_lag << "\n";
    }
    if (!options_.password.empty()) {
      text << "requirepass " << quoted(options_.password) << "\n"
           << "masterauth " << quoted(options_.password) << "\n";
    }
    if (&process != &data_.front()) text << "replicaof 127.0.0.1 " << data_.front().port << "\n";
    const auto index = static_cast<std::size_t>(&process - data_.data());
    if (index < options_.replica_priority.size()) text << "replica-priority " << options_.replica_priority[index] << "\n";
  }
  return text.str();
}

void SentinelCluster::launch(Process& process, bool first_start) {
  const int attempts = first_start ? 20 : 50;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (first_start) {
      process.port = agents::free_loopback_port();
      std::filesystem::create_directories(dir_ / process.name);
      process.config = agents::write_private_file(dir_ / (process.name + ".conf"), config_text(process));
    }
    if (try_launch(process)) return;
    // First start: the port was taken between choosing and binding it. Restart: the old socket
    // may linger a moment.
    if (!first_start) std::this_thread::sleep_for(Duration(20));
  }
  throw Error("could not start " + process.name + " (" + binary_ + ") on a loopback port; see " +
              (dir_ / (process.name + ".log")).string());
}

bool SentinelCluster::try_launch(Process& process) {
  std::vector<std::string> argv = {binary_, process.config.string()};
  if (process.sentinel) argv.push_back("--sentinel");
  process.pid = agents::spawn({argv, {}});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(process.pid, &status, WNOHANG) == process.pid) {
      process.pid = -1;
      return false;
    }
    if (accepts_connections(process.port)) return true;
    std::this_thread::sleep_for(Duration(5));
  }
  stop(process);
  throw Error(process.name + " did not start listening on port " + std::to_string(process.port) + " within 10 s");
}

void SentinelCluster::stop(Process& process) {
  if (process.pid <= 0) return;
  ::kill(process.pid, SIGKILL);
  int status = 0;
  waitpid(process.pid, &status, 0);
  process.pid = -1;
}

void SentinelCluster::signal(Process& process, int signo) {
  if (process.pid > 0) ::kill(process.pid, signo);
}

void SentinelCluster::wait_ready() const {
  const auto deadline = Clock::now() + options_.ready_timeout;
  std::string missing;
  while (true) {
    missing.clear();
    for (int j = 0; j < sentinel_count() && missing.empty(); ++j) {
      try {
        auto sentinel = connect_sentinel(j);
        const auto master = fields(sentinel->command({"SENTINEL", "master", options_.master_name}));
        const auto replicas = sentinel->command({"SENTINEL", "replicas", options_.master_name});
        int healthy = 0;
        for (const auto& replica : replicas.elements) {
          const auto replica_fields = fields(replica);
          if (replica_fields.count("flags") && replica_fields.at("flags") == "slave" &&
              replica_fields.count("master-link-status") && replica_fields.at("master-link-status") == "ok") {
            ++healthy;
          }
        }
        const std::string others = master.count("num-other-sentinels") ? master.at("num-other-sentinels") : "?";
        if (healthy != options_.replicas || others != std::to_string(sentinel_count() - 1)) {
          missing = "sentinel " + std::to_string(j) + " knows " + std::to_string(healthy) + " healthy replica(s) of " +
                    std::to_string(options_.replicas) + " and " + others + " other sentinel(s) of " +
                    std::to_string(sentinel_count() - 1);
        }
      } catch (const Error& e) {
        missing = "sentinel " + std::to_string(j) + ": " + e.what();
      }
    }
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      throw Error("the sentinel cluster was not ready within " + std::to_string(options_.ready_timeout.count()) +
                  " ms: " + missing);
    }
    std::this_thread::sleep_for(Duration(50));
  }
}

std::string SentinelCluster::url() const {
  std::string text = "redis+sentinel://";
  for (std::size_t j = 0; j < sentinels_.size(); ++j) {
    text += (j ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels_[j].port);
  }
  return text + "/" + options_.master_name;
}

RedisEndpoint SentinelCluster::endpoint() const {
  RedisEndpoint endpoint = elastic::parse_redis_url(url());
  if (!options_.password.empty()) endpoint.password = options_.password;
  if (!options_.sentinel_password.empty()) endpoint.sentinel_password = options_.sentinel_password;
  return endpoint;
}

std::string SentinelCluster::password_file() const {
  if (options_.password.empty()) return {};
  return agents::write_private_file(dir_ / "redis.password", options_.password + "\n").string();
}

std::string SentinelCluster::sentinel_password_file() const {
  if (options_.sentinel_password.empty()) return {};
  return agents::write_private_file(dir_ / "sentinel.password", options_.sentinel_password + "\n").string();
}

int SentinelCluster::data_port(int i) const { return data_.at(static_cast<std::size_t>(i)).port; }
int SentinelCluster::sentinel_port(int j) const { return sentinels_.at(static_cast<std::size_t>(j)).port; }
pid_t SentinelCluster::data_pid(int i) const { return data_.at(static_cast<std::size_t>(i)).pid; }

int SentinelCluster::data_index(int port) const {
  for (int i = 0; i < data_count(); ++i) {
    if (data_[static_cast<std::size_t>(i)].port == port) return i;
  }
  return -1;
}

std::unique_ptr<RedisConnection> SentinelCluster::connect_data(int i, Duration timeout) const {
  return connect_to(data_port(i), options_.password, timeout);
}

std::unique_ptr<RedisConnection> SentinelCluster::connect_sentinel(int j, Duration timeout) const {
  return connect_to(sentinel_port(j), options_.sentinel_password, timeout);
}

int SentinelCluster::primary_port() const {
  std::string last_error = "no sentinel is running";
  for (int j = 0; j < sentinel_count(); ++j) {
    if (sentinels_[static_cast<std::size_t>(j)].pid <= 0) continue;
    try {
      const RedisReply reply =
          connect_sentinel(j, Duration(500))->command({"SENTINEL", "get-master-addr-by-name", options_.master_name});
      if (reply.elements.size() == 2) return std::stoi(reply.elements[1].str);
      last_error = "sentinel " + std::to_string(j) + " names no primary";
    } catch (const Error& e) {
      last_error = e.what();
    }
  }
  throw Error("no sentinel named the primary: " + last_error);
}

int SentinelCluster::wait_for_primary_change(int old_port, Duration timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    try {
      const int port = primary_port();
      const int index = data_index(port);
      if (port != old_port && index >= 0 && role(index) == "master") return port;
    } catch (const Error&) {
    }
    std::this_thread::sleep_for(Duration(50));
  }
  throw Error("the sentinels did not replace the primary on port " + std::to_string(old_port) + " within " +
              std::to_string(timeout.count()) + " ms; sentinel-0's log ends with:\n" + sentinel_log_tail(0));
}

std::string SentinelCluster::role(int i) const {
  try {
    const RedisReply reply = connect_data(i, Duration(500))->command({"ROLE"});
    if (reply.type == RedisReply::Type::kArray && !reply.elements.empty()) return reply.elements[0].str;
  } catch (const Error&) {
  }
  return "";
}

bool SentinelCluster::wait_for_role(int i, const std::string& wanted, Duration timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (role(i) == wanted) return true;
    std::this_thread::sleep_for(Duration(50));
  }
  return false;
}

void SentinelCluster::kill_data(int i) { stop(data_.at(static_cast<std::size_t>(i))); }
void SentinelCluster::start_data(int i) { launch(data_.at(static_cast<std::size_t>(i)), false); }
void SentinelCluster::pause_data(int i) { signal(data_.at(static_cast<std::size_t>(i)), SIGSTOP); }
void SentinelCluster::resume_data(int i) { signal(data_.at(static_cast<std::size_t>(i)), SIGCONT); }
void SentinelCluster::kill_sentinel(int j) { stop(sentinels_.at(static_cast<std::size_t>(j))); }
void SentinelCluster::start_sentinel(int j) { launch(sentinels_.at(static_cast<std::size_t>(j)), false); }
void SentinelCluster::pause_sentinel(int j) { signal(sentinels_.at(static_cast<std::size_t>(j)), SIGSTOP); }
void SentinelCluster::resume_sentinel(int j) { signal(sentinels_.at(static_cast<std::size_t>(j)), SIGCONT); }

std::string SentinelCluster::sentinel_log_tail(int j, int lines) const {
  std::ifstream file(dir_ / (sentinels_.at(static_cast<std::size_t>(j)).name + ".log"));
  std::deque<std::string> tail;
  for (std::string line; std::getline(file, line);) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string text;
  for (const auto& line : tail) text += line + "\n";
  return text;
}

std::vector<std::string> SentinelCluster::primary_switches() const {
  // Line shape: "<pid>:X <date> <time> # +switch-master <name> <old-ip> <old-port> <new-ip> <new-port>".
  std::vector<std::string> switches;
  for (const auto& sentinel : sentinels_) {
    std::ifstream file(dir_ / (sentinel.name + ".log"));
    for (std::string line; std::getline(file, line);) {
      const auto at = line.find("+switch-master ");
      if (at == std::string::npos) continue;
      std::istringstream words(line.substr(at));
      std::string event, name, old_ip, old_port, new_ip, new_port;
      if (!(words >> event >> name >> old_ip >> old_port >> new_ip >> new_port)) continue;
      const std::string entry = old_port + " " + new_port;
      if (std::find(switches.begin(), switches.end(), entry) == switches.end()) switches.push_back(entry);
    }
  }
  return switches;
}

}  // namespace hdp::test
