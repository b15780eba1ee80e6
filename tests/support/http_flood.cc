#include "tests/support/http_flood.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <thread>
#include <utility>

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

template <typename Duration>
milliseconds to_ms(Duration d) { return std::chrono::duration_cast<milliseconds>(d); }

}  // namespace

Fd::Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Fd connect_from(const std::string& from, int port, milliseconds timeout) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return fd;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  if (::inet_pton(AF_INET, from.c_str(), &local.sin_addr) != 1 ||
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    return Fd();
  }
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<std::uint16_t>(port));
  remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0 && errno != EINPROGRESS) {
    return Fd();
  }
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return Fd();
  int error = 0;
  socklen_t size = sizeof error;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error != 0) return Fd();
  return fd;
}

bool send_all(int fd, std::string_view data, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_left(deadline)) != 1) return false;
  }
  return true;
}

Read read_some(int fd, std::string& into) {
  char buffer[16384];
  const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
  if (n > 0) {
    into.append(buffer, static_cast<std::size_t>(n));
    return Read::kData;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Read::kNothing;
  return Read::kClosed;
}

Drained read_until_closed(int fd, milliseconds timeout) {
  Drained out;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) != 1) continue;
    while (true) {
      const Read r = read_some(fd, out.data);
      if (r == Read::kClosed) {
        out.closed = Clock::now();
        return out;
      }
      if (r == Read::kNothing) break;
    }
  }
  return out;
}

std::string read_response(int fd, milliseconds timeout) {
  std::string data;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const auto end = data.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto at = data.find("Content-Length: ");
      const std::size_t length = at < end ? std::strtoul(data.c_str() + at + 16, nullptr, 10) : 0;
      if (data.size() >= end + 4 + length) return data;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) != 1) continue;
    if (read_some(fd, data) == Read::kClosed) break;
  }
  return "";
}

std::string request_from(const std::string& from, int port, std::string_view request, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Fd fd = connect_from(from, port, timeout);
  if (!fd.ok() || !send_all(fd.get(), request, timeout)) return "";
  return read_until_closed(fd.get(), milliseconds(ms_left(deadline))).data;
}

Pushed push(int fd, std::string_view data, milliseconds timeout) {
  Pushed out;
  const auto deadline = Clock::now() + timeout;
  std::size_t sent = 0;
  bool sending = true;
  while (Clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, std::min(ms_left(deadline), 100)) != 1) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const Read r = read_some(fd, out.answer);
      if (r == Read::kData && sending) {
        sending = false;
        out.sent_before_answer = sent;
      }
      if (r == Read::kClosed) {
        out.closed = true;
        if (sending) out.sent_before_answer = sent;
        return out;
      }
    }
    if (sending && (p.revents & POLLOUT)) {
      const std::size_t chunk = std::min<std::size_t>(data.size() - sent, 256 * 1024);
      const ssize_t n = ::send(fd, data.data() + sent, chunk, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      if (sent == data.size() || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) sending = false;
    }
  }
  return out;
}

std::string request_with_head_of(std::size_t bytes, std::string_view path) {
  std::string request = "GET " + std::string(path) + " HTTP/1.1\r\nHost: x\r\n";
  const std::string pad = "X-Pad: " + std::string(1000, 'a') + "\r\n";
  request.reserve(bytes + pad.size() + 2);
  while (request.size() < bytes) request += pad;
  request += "\r\n";
  return request;
}

std::string request_with_body_of(std::size_t bytes, std::string_view path, std::string_view method) {
  return std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: x\r\nContent-Length: " +
         std::to_string(bytes) + "\r\n\r\n" + std::string(bytes, 'b');
}

std::string FloodResult::summary() const {
  std::ostringstream out;
  out << normal_requests << " normal requests (" << normal_failed << " failed, " << normal_slow
      << " in 1 s or more), the slowest " << std::fixed << std::setprecision(1)
      << std::chrono::duration<double, std::milli>(worst_normal).count() << " ms";
  for (const auto& [name, kind] : {std::pair{"half-open", &half_open}, std::pair{"keep-alive", &keep_alive}}) {
    out << "; " << name << ": " << kind->opened << " opened, " << kind->held << " held to their deadline, "
        << kind->closed_late << " closed late, " << kind->never_closed << " never, " << kind->answered_wrongly
        << " answered wrongly, the slowest closed after " << kind->slowest_close.count() << " ms";
  }
  out << "; " << connect_failed << " could not connect";
  return out.str();
}

std::string FloodResult::details() const {
  std::string out = summary();
  for (const std::string& p : problems) out += "\n  " + p;
  return out;
}

void expect_port_withstood(const FloodResult& r, const FloodOptions& options, int min_normal) {
  EXPECT_EQ(r.connect_failed, 0) << r.details();
  EXPECT_EQ(r.half_open.opened, options.half_open) << r.details();
  EXPECT_EQ(r.keep_alive.opened, options.keep_alive) << r.details();
  EXPECT_GE(r.normal_requests, min_normal) << r.details();
  EXPECT_EQ(r.normal_failed, 0) << r.details();
  EXPECT_EQ(r.normal_slow, 0) << r.details();
  EXPECT_LT(r.worst_normal, 1s) << r.details();
  for (const SlowKind* kind : {&r.half_open, &r.keep_alive}) {
    EXPECT_EQ(kind->never_closed, 0) << r.details();
    EXPECT_EQ(kind->closed_late, 0) << r.details();
    EXPECT_EQ(kind->answered_wrongly, 0) << r.details();
    // Both kinds got some of the address's slots, and it was refused others.
    EXPECT_GE(kind->held, 1) << r.details();
  }
  EXPECT_GE(r.expected_per_address(), 1u) << r.details();
}

namespace {

struct Attacker {
  Fd fd;
  bool half_open = false;
  Clock::time_point connecting, opened;  // before and after its connect
  std::optional<Clock::time_point> answered, closed;
  std::string received;
};

}  // namespace

FloodResult slow_client_flood(const FloodOptions& options) {
  const std::string half_open_head = "GET " + options.path + " HTTP/1.1\r\nHost: x\r\n";  // no blank line: never ends
  const std::string keep_alive_request = half_open_head + "\r\n";
  const std::string normal_request = "GET " + options.path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const milliseconds head = options.limits.head_deadline, idle = options.limits.idle_timeout;
  FloodResult result;
  const auto problem = [&](std::string what) {
    if (result.problems.size() < 20) result.problems.push_back(std::move(what));
  };

  // The attacking connections, interleaved so that both kinds get some of the address's slots.
  // Published to the watcher one by one (the vector never reallocates): it sees a refused one
  // closed as soon as the server closes it, not after all are open.
  const int total = std::max(options.half_open, 0) + std::max(options.keep_alive, 0);
  std::vector<Attacker> attackers(static_cast<std::size_t>(total));
  std::atomic<int> published{0};
  std::atomic<bool> opened_all{false};
  Clock::time_point watch_until;  // written before opened_all is set

  std::thread watcher([&] {
    std::vector<pollfd> fds;
    std::vector<Attacker*> who;
    while (true) {
      const bool done = opened_all.load(std::memory_order_acquire);
      const int n = published.load(std::memory_order_acquire);
      if (done && Clock::now() >= watch_until) return;
      fds.clear();
      who.clear();
      for (int i = 0; i < n; ++i) {
        Attacker& a = attackers[static_cast<std::size_t>(i)];
        if (a.closed) continue;
        fds.push_back({a.fd.get(), POLLIN, 0});
        who.push_back(&a);
      }
      if (fds.empty()) {
        if (done) return;
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      const auto now = Clock::now();
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Attacker& a = *who[k];
        for (Read r = Read::kData; r == Read::kData;) {
          r = read_some(a.fd.get(), a.received);
          if (r == Read::kData && !a.answered) a.answered = now;
          if (r == Read::kClosed) a.closed = now;
        }
      }
    }
  });

  const auto opening_deadline = Clock::now() + 20s;
  int made = 0;
  for (int i = 0, half_open = 0, keep_alive = 0; half_open < options.half_open || keep_alive < options.keep_alive;
       ++i) {
    const bool is_half_open = keep_alive >= options.keep_alive || (half_open < options.half_open && i % 2 == 0);
    ++(is_half_open ? half_open : keep_alive);
    Attacker& a = attackers[static_cast<std::size_t>(made)];
    a.half_open = is_half_open;
    a.connecting = Clock::now();
    if (a.connecting >= opening_deadline) {
      ++result.connect_failed;
      continue;
    }
    a.fd = connect_from(options.attacker, options.port, std::min(3000ms, milliseconds(ms_left(opening_deadline))));
    a.opened = Clock::now();
    if (!a.fd.ok()) {
      if (result.connect_failed++ == 0) problem(std::string("cannot connect: ") + std::strerror(errno));
      continue;
    }
    // A connection refused on arrival may be closed before this is sent: its failure is fine.
    send_all(a.fd.get(), is_half_open ? half_open_head : keep_alive_request, 1s);
    ++(is_half_open ? result.half_open.opened : result.keep_alive.opened);
    published.store(++made, std::memory_order_release);
  }
  const auto last_opened = Clock::now();
  watch_until = last_opened + std::max(head, idle) + options.margin + 2s;
  opened_all.store(true, std::memory_order_release);

  // Meanwhile the normal client.
  std::function<bool(const std::string&)> normal_ok = options.normal_ok;
  if (!normal_ok) normal_ok = [](const std::string& answer) { return answer.starts_with("HTTP/1.1 200 "); };
  const auto polled_until = Clock::now() + options.poll_for;
  for (int i = 0; i < options.max_normal && Clock::now() < polled_until; ++i) {
    const auto started = Clock::now();
    const std::string answer = request_from(options.client, options.port, normal_request, options.normal_timeout);
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
    result.worst_normal = std::max(result.worst_normal, took);
    ++result.normal_requests;
    if (answer.empty() || !normal_ok(answer)) {
      ++result.normal_failed;
      problem("normal request " + std::to_string(i) + " (after " + std::to_string(to_ms(took).count()) + " ms): " +
              (answer.empty() ? std::string("no answer") : answer.substr(0, 300)));
    } else if (took >= 1s) {
      ++result.normal_slow;
      problem("normal request " + std::to_string(i) + " took " + std::to_string(to_ms(took).count()) + " ms");
    }
    std::this_thread::sleep_for(options.every);
  }
  watcher.join();

  for (int i = 0; i < made; ++i) {
    const Attacker& a = attackers[static_cast<std::size_t>(i)];
    SlowKind& kind = a.half_open ? result.half_open : result.keep_alive;
    const std::string name = std::string(a.half_open ? "half-open" : "keep-alive") + " connection " + std::to_string(i);
    if (!a.closed) {
      ++kind.never_closed;
      problem(name + " still open " + std::to_string(to_ms(Clock::now() - a.opened).count()) +
              " ms after it connected");
    } else {
      kind.slowest_close = std::max(kind.slowest_close, to_ms(*a.closed - a.connecting));
      const milliseconds bound = (a.half_open ? head : idle) + options.margin;
      if (*a.closed - a.opened > bound) {
        ++kind.closed_late;
        problem(name + " closed " + std::to_string(to_ms(*a.closed - a.opened).count()) + " ms after it connected");
      }
    }
    if (a.half_open) {
      if (a.closed && *a.closed - a.connecting >= head) ++kind.held;
      if (!a.received.empty()) {
        ++kind.answered_wrongly;
        problem(name + " answered: " + a.received.substr(0, 300));
      }
    } else if (a.answered) {
      ++kind.held;
      if (!a.received.starts_with("HTTP/1.1 200 ")) {
        ++kind.answered_wrongly;
        problem(name + " answered: " + a.received.substr(0, 300));
      }
    }
  }
  return result;
}

}  // namespace hdp::test
