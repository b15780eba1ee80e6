#include "tests/support/redis_monitor.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/child_process.h"

namespace hdp::test {

std::vector<MonitorLine> parse_monitor(const std::string& text) {
  std::vector<MonitorLine> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    // 1795756057.618228 [0 127.0.0.1:51212] "get" "a"
    const auto open = line.find(" [");
    const auto close = line.find("] \"", open == std::string::npos ? 0 : open);
    if (open == std::string::npos || close == std::string::npos) continue;
    MonitorLine m;
    try {
      m.at = std::stod(line.substr(0, open));
    } catch (const std::exception&) {
      continue;
    }
    const std::string who = line.substr(open + 2, close - open - 2);  // "0 127.0.0.1:51212"
    const auto space = who.find(' ');
    m.client = space == std::string::npos ? who : who.substr(space + 1);
    const auto name_end = line.find('"', close + 3);
    if (name_end == std::string::npos) continue;
    m.command = line.substr(close + 3, name_end - close - 3);
    std::transform(m.command.begin(), m.command.end(), m.command.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    m.text = line;
    out.push_back(std::move(m));
  }
  return out;
}

bool is_data_command(const std::string& command) {
  static const std::set<std::string> control = {"AUTH",     "HELLO",     "ROLE",  "PING",  "INFO",  "CLIENT",
                                                "SELECT",   "COMMAND",   "SUBSCRIBE", "PSUBSCRIBE",
                                                "UNSUBSCRIBE", "PUBLISH", "QUIT", "ECHO", "RESET", "REPLCONF",
                                                "PSYNC",    "SYNC",      "MONITOR"};
  return !control.contains(command);
}

bool is_write_command(const std::string& command) {
  static const std::set<std::string> reads = {"GET",  "MGET", "HGET", "HGETALL", "HMGET", "EXISTS", "PTTL",
                                              "TTL",  "TYPE", "STRLEN", "SCAN", "KEYS", "XREAD", "XRANGE",
                                              "XREVRANGE", "XLEN", "XINFO"};
  return is_data_command(command) && !reads.contains(command);
}

RedisMonitor::RedisMonitor(int port, std::filesystem::path file, std::string password)
    : port_(port), file_(std::move(file)), password_(std::move(password)) {
  thread_ = std::thread([this] { run(); });
}

RedisMonitor::~RedisMonitor() { stop(); }

void RedisMonitor::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void RedisMonitor::run() {
  std::vector<std::string> env;
  if (!password_.empty()) env.push_back("REDISCLI_AUTH=" + password_);
  while (!stopping_) {
    ++starts_;
    ChildProcess cli({"redis-cli", "-p", std::to_string(port_), "monitor"}, file_.string(), env);
    // Polled, so that stop() ends the recording within 50 ms; a server that dropped the monitor
    // (or is down) makes redis-cli exit, and it starts again after a short pause.
    while (!stopping_ && !cli.wait_for(std::chrono::milliseconds(50))) {
    }
    if (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }  // ~ChildProcess: SIGKILL and reap (redis-cli flushes each line, so nothing recorded is lost)
}

std::vector<MonitorLine> RedisMonitor::lines() const {
  std::ifstream in(file_);
  std::stringstream text;
  text << in.rdbuf();
  return parse_monitor(text.str());
}

std::map<std::string, std::string> tcp_peers(int port) {
  static const std::map<std::string, std::string> states = {
      {"01", "ESTABLISHED"}, {"02", "SYN_SENT"}, {"03", "SYN_RECV"}, {"04", "FIN_WAIT1"}, {"05", "FIN_WAIT2"},
      {"06", "TIME_WAIT"},   {"07", "CLOSE"},    {"08", "CLOSE_WAIT"}, {"09", "LAST_ACK"}, {"0A", "LISTEN"},
      {"0B", "CLOSING"}};
  // "0100007F:1F90": an IPv4 address as the kernel stores it (network order read as a host-order
  // word, so little-endian machines show the bytes reversed) and the port in hex.
  auto decode = [](const std::string& field) {
    const auto colon = field.find(':');
    const unsigned long addr = std::stoul(field.substr(0, colon), nullptr, 16);
    const unsigned long p = std::stoul(field.substr(colon + 1), nullptr, 16);
    std::ostringstream out;
    out << (addr & 0xff) << '.' << ((addr >> 8) & 0xff) << '.' << ((addr >> 16) & 0xff) << '.' << ((addr >> 24) & 0xff)
        << ':' << p;
    return std::pair<std::string, int>(out.str(), static_cast<int>(p));
  };
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    if (!(fields >> slot >> local >> remote >> state)) continue;
    if (decode(local).second != port || state == "0A") continue;
    const auto known = states.find(state);
    out[decode(remote).first] = known == states.end() ? state : known->second;
  }
  return out;
}

}  // namespace hdp::test
