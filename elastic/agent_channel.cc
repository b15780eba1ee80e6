#include "elastic/agent_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"

namespace hdp::elastic {
namespace agent_channel {
namespace {

std::optional<std::int64_t> parse_number(std::string_view text) {
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::string hello_line(std::chrono::milliseconds keepalive) {
  return std::string(kMagic) + " " + std::to_string(kVersion) + " " + std::to_string(keepalive.count()) + "\n";
}

std::string generation_line(std::int64_t generation) { return "gen " + std::to_string(generation) + "\n"; }

std::string record_line(std::int64_t generation, std::size_t bytes) {
  return "record " + std::to_string(generation) + " " + std::to_string(bytes) + "\n";
}

std::string broken_line(std::int64_t generation) { return "broken " + std::to_string(generation) + "\n"; }

std::string preparing_line() { return "preparing\n"; }
std::string ready_line() { return "ready\n"; }

WorkerLine parse_worker_line(std::string_view line) {
  if (line == "preparing") return WorkerLine{.kind = WorkerLine::Kind::kPreparing};
  if (line == "ready") return WorkerLine{.kind = WorkerLine::Kind::kReady};
  const auto generation = line.size() <= kMaxLine && line.starts_with("broken ") ? parse_number(line.substr(7))
                                                                                 : std::nullopt;
  if (!generation || *generation < 1) {
    throw InvalidArgument("agent channel: unexpected line from a worker " + quote_value(line.substr(0, kMaxLine)));
  }
  return WorkerLine{.kind = WorkerLine::Kind::kBroken, .generation = *generation};
}

Line parse_line(std::string_view line) {
  auto bad = [&] {
    return InvalidArgument("agent channel: unexpected line " + quote_value(line.substr(0, kMaxLine)));
  };
  if (line.size() > kMaxLine) throw bad();
  const std::string hello_prefix = std::string(kMagic) + " " + std::to_string(kVersion) + " ";
  if (line.starts_with(hello_prefix)) {
    auto keepalive = parse_number(line.substr(hello_prefix.size()));
    if (!keepalive || *keepalive < 1 || *keepalive > 3600000) throw bad();
    return Line{.kind = Line::Kind::kHello, .keepalive = std::chrono::milliseconds(*keepalive)};
  }
  if (line.starts_with("gen ")) {
    auto generation = parse_number(line.substr(4));
    if (!generation) throw bad();
    return Line{.kind = Line::Kind::kGeneration, .generation = *generation};
  }
  if (line.starts_with("record ")) {
    const std::string_view rest = line.substr(7);
    const std::size_t space = rest.find(' ');
    if (space == std::string_view::npos) throw bad();
    auto generation = parse_number(rest.substr(0, space)), bytes = parse_number(rest.substr(space + 1));
    if (!generation || *generation < 1 || !bytes || static_cast<std::uint64_t>(*bytes) > kMaxRecordBytes) throw bad();
    return Line{.kind = Line::Kind::kRecord, .generation = *generation, .bytes = static_cast<std::size_t>(*bytes)};
  }
  throw bad();
}

}  // namespace agent_channel

namespace {

using namespace std::chrono_literals;

// The channel is silent, hence lost, once no line came for this long.
std::chrono::milliseconds silence_bound(std::chrono::milliseconds keepalive) {
  return agent_channel::kSilenceKeepalives * keepalive + 1s;
}

// Connects to the abstract unix socket `name` ("@..."); -1 with errno set when it cannot.
int connect_abstract(const std::string& name) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string_view abstract = std::string_view(name).substr(1);  // without '@'
  if (name.empty() || name[0] != '@' || abstract.size() + 1 > sizeof(address.sun_path)) {
    errno = EINVAL;
    return -1;
  }
  address.sun_path[0] = '\0';
  std::memcpy(address.sun_path + 1, abstract.data(), abstract.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

AgentChannel::AgentChannel(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

AgentChannel::~AgentChannel() {
  stop_ = true;
  changed_.notify_all();
  thread_.join();
}

std::optional<std::int64_t> AgentChannel::generation() const {
  std::lock_guard lock(mutex_);
  if (!connected_ || Clock::now() - last_line_ > silence_bound(keepalive_)) return std::nullopt;
  return generation_;
}

std::chrono::milliseconds AgentChannel::lost_for() const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  Clock::time_point since;
  if (!connected_) {
    since = lost_since_;
  } else if (now - last_line_ > silence_bound(keepalive_)) {
    since = last_line_ + silence_bound(keepalive_);
  } else {
    return 0ms;
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
}

std::string AgentChannel::lost_because() const {
  std::lock_guard lock(mutex_);
  if (!connected_) return lost_because_;
  if (Clock::now() - last_line_ > silence_bound(keepalive_)) {
    return "the agent has been silent for more than " + std::to_string(silence_bound(keepalive_).count()) +
           " ms (stopped or hung)";
  }
  return "";
}

std::shared_ptr<const std::string> AgentChannel::record(std::int64_t g) const {
  std::lock_guard lock(mutex_);
  return record_generation_ == g ? record_ : nullptr;
}

void AgentChannel::wait_for_change(std::int64_t known, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return stop_ || (connected_ && generation_ && *generation_ != known); });
}

void AgentChannel::lose(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (connected_) {
    // Lost since the last line if the agent was already silent before the connection broke.
    lost_since_ = std::min(Clock::now(), last_line_ + silence_bound(keepalive_));
    connected_ = false;
  }
  lost_because_ = why;
  changed_.notify_all();
}

void AgentChannel::heard(std::optional<std::int64_t> generation) {
  std::lock_guard lock(mutex_);
  last_line_ = Clock::now();
  if (generation) generation_ = generation;
  changed_.notify_all();
}

void AgentChannel::run() {
  std::chrono::milliseconds pause = 100ms;
  bool logged = false;
  while (!stop_) {
    const int fd = connect_abstract(name_);
    if (fd < 0) {
      const std::string why = "cannot connect to the agent's channel " + name_ + ": " + std::strerror(errno);
      if (!logged) log()->warn("{}; retrying", why);
      logged = true;
      lose(why);
      for (auto slept = 0ms; slept < pause && !stop_; slept += 50ms) std::this_thread::sleep_for(50ms);
      pause = std::min(pause * 2, std::chrono::milliseconds(1000));
      continue;
    }
    pause = 100ms;
    if (logged) log()->info("connected to the agent's channel {}", name_);
    logged = false;
    {
      std::lock_guard lock(mutex_);
      connected_ = true;
      generation_.reset();  // until the agent says
      last_line_ = Clock::now();
    }
    {
      std::lock_guard lock(mutex_);
      socket_ = fd;
      // Where this worker stands, at every connection: a restarted agent (or one that lost the
      // connection) learns it again.
      send_locked(ready_ ? agent_channel::ready_line() : agent_channel::preparing_line(), true);
    }
    serve(fd);
    {
      std::lock_guard lock(mutex_);
      socket_ = -1;
      unsent_.clear();  // the next connection starts with where this worker stands
    }
    ::close(fd);
  }
}

void AgentChannel::serve(int socket) {
  std::string buffer;
  // After a record line: its bytes are still coming.
  bool in_record = false;
  std::int64_t record_generation = 0;
  std::size_t record_bytes = 0;
  char chunk[64 * 1024];
  while (!stop_) {
    pollfd entry{.fd = socket, .events = POLLIN, .revents = 0};
    {
      std::lock_guard lock(mutex_);
      flush_locked();  // what the connection's buffer could not take before
    }
    const int ready = ::poll(&entry, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // silence is judged by readers from last_line_
    const ssize_t got = ready < 0 ? -1 : ::recv(socket, chunk, sizeof chunk, 0);
    if (got <= 0) {
      lose(got == 0 ? "the agent closed its channel " + name_
                    : "the agent's channel " + name_ + " failed: " + std::strerror(errno));
      return;
    }
    buffer.append(chunk, static_cast<std::size_t>(got));
    for (;;) {
      if (in_record) {  // the record's bytes, then lines again
        if (buffer.size() < record_bytes) break;
        auto bytes = std::make_shared<const std::string>(buffer.substr(0, record_bytes));
        buffer.erase(0, record_bytes);
        {
          std::lock_guard lock(mutex_);
          record_generation_ = record_generation;
          record_ = std::move(bytes);
        }
        heard(std::nullopt);
        in_record = false;
        continue;
      }
      const std::size_t newline = buffer.find('\n');
      if (newline == std::string::npos) break;
      const std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      try {
        const agent_channel::Line parsed = agent_channel::parse_line(line);
        if (parsed.kind == agent_channel::Line::Kind::kHello) {
          {
            std::lock_guard lock(mutex_);
            keepalive_ = parsed.keepalive;
          }
          heard(std::nullopt);
        } else if (parsed.kind == agent_channel::Line::Kind::kRecord) {
          in_record = true;
          record_generation = parsed.generation;
          record_bytes = parsed.bytes;
        } else {
          heard(parsed.generation);
        }
      } catch (const InvalidArgument& e) {
        ++bad_lines_;
        const auto now = Clock::now();
        if (now - bad_logged_ >= 5s) {
          bad_logged_ = now;
          log()->warn("{} ({} bad line(s) so far; ignored)", e.what(), bad_lines_.load());
        }
      }
    }
    // A line without its end beyond the limit: drop what came so far (it is garbage).
    if (!in_record && buffer.size() > agent_channel::kMaxLine) {
      ++bad_lines_;
      buffer.clear();
    }
  }
}

void AgentChannel::report_broken(std::int64_t g) {
  std::lock_guard lock(mutex_);
  send_locked(agent_channel::broken_line(g));
}

void AgentChannel::report_ready() {
  std::lock_guard lock(mutex_);
  if (std::exchange(ready_, true)) return;
  send_locked(agent_channel::ready_line(), true);
}

std::size_t AgentChannel::unsent() const {
  std::lock_guard lock(mutex_);
  return unsent_.size();
}

void AgentChannel::send_locked(const std::string& line, bool essential) {
  if (socket_ < 0 || (!essential && unsent_.size() + line.size() > agent_channel::kMaxUnsent)) {
    log()->debug("agent channel {}: dropped {}: {}", name_, quote_value(line.substr(0, line.size() - 1)),
                 socket_ < 0 ? "not connected" : "the agent reads nothing");
    return;
  }
  unsent_ += line;
  flush_locked();
}

void AgentChannel::flush_locked() {
  while (socket_ >= 0 && !unsent_.empty()) {
    const ssize_t sent = ::send(socket_, unsent_.data(), unsent_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return;  // the buffer is full (or the connection broke: serve() sees it)
    unsent_.erase(0, static_cast<std::size_t>(sent));
  }
}

}  // namespace hdp::elastic
