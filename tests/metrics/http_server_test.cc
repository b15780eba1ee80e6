// The HTTP server's limits (metrics/http_server.h), with real sockets on loopback; the attacking
// clients bind to 127.0.0.2 or 127.0.0.3 (Linux routes all of 127/8 to loopback) so that they are
// one client address, and the well-behaved one comes from 127.0.0.1:
//   - 200 half-open requests and 200 idle keep-alives from one address do not take the port: a
//     normal GET is answered within 1 s throughout, every slow connection is closed within its
//     deadline (plus a margin), and each is counted (head deadline, idle, or refused on arrival);
//   - a client trickling its head gains nothing: closed at the head deadline;
//   - a kept-alive connection is served until it is idle for idle_timeout (the head deadline runs
//     from the next request's first byte, not while idle);
//   - 10 MB of headers is 431, a body over the cap 413 whatever the method (the size check comes
//     before the 405, and before the body is read: a 50 MB POST is answered before it is sent),
//     and the server serves on;
//   - one address holds at most its share of the slots, another is served meanwhile;
//   - limits that make no sense are refused;
//   - the agent's /metrics exposes the counters (hdp_http_connections_closed_total).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agents/agent_metrics.h"
#include "common/error.h"
#include "metrics/http_server.h"
#include "tests/support/http_get.h"

namespace hdp::metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Time for the server to act on a deadline and for the test to see it, on a loaded machine (CI
// runs 4 tests at once on 2 cores).
constexpr auto kMargin = 1500ms;

constexpr std::string_view kHalfOpen = "GET /api/job HTTP/1.1\r\nHost: x\r\n";  // no blank line: never ends
constexpr std::string_view kKeepAlive = "GET /api/job HTTP/1.1\r\nHost: x\r\n\r\n";
constexpr std::string_view kNormal = "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

HttpResponse ok(const HttpRequest&) { return {200, "text/plain", "ok\n"}; }

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// A socket, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// A non-blocking TCP connection from `from` (an address of 127/8) to 127.0.0.1:port, connected
// within `timeout`; not ok() when it was not.
Fd connect_from(const std::string& from, int port, std::chrono::milliseconds timeout = 3s) {
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

// Sends all of `data` within `timeout`; false when the peer closed or the time passed.
bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout = 3s) {
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

// What one non-blocking read found: bytes (appended to `into`), the end of the stream (EOF, or a
// reset: the server closed the connection), or nothing yet.
enum class Read { kData, kClosed, kNothing };
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

struct Drained {
  std::string data;
  std::optional<Clock::time_point> closed;  // when the server closed it; none within the time
};
// Reads until the server closes the connection or `timeout` passes.
Drained read_until_closed(int fd, std::chrono::milliseconds timeout) {
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

// Reads one whole response (its head, and the body its Content-Length gives) from a kept-alive
// connection; "" when it did not come within `timeout`.
std::string read_response(int fd, std::chrono::milliseconds timeout) {
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

// One request on a fresh connection from `from`, the server closing after it: what came back
// within `timeout` ("" when refused).
std::string request_from(const std::string& from, int port, std::string_view request,
                         std::chrono::milliseconds timeout = 3s) {
  const auto deadline = Clock::now() + timeout;
  Fd fd = connect_from(from, port, timeout);
  if (!fd.ok() || !send_all(fd.get(), request, timeout)) return "";
  return read_until_closed(fd.get(), std::chrono::milliseconds(ms_left(deadline))).data;
}

struct Pushed {
  std::string answer;
  std::size_t sent_before_answer = 0;  // bytes of the request sent when the answer began
  bool closed = false;                 // the server closed the connection after answering
};
// Sends `data` while reading what the server answers (as a client that reads an early answer
// does), stops sending once the answer begins, and reads until the server closes.
Pushed push(int fd, std::string_view data, std::chrono::milliseconds timeout = 10s) {
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

// The server counts a deadline just after the socket closed: the counters, once `done` holds
// of them (or after 2 s).
template <typename Predicate>
HttpServerStats stats_when(const HttpServer& server, Predicate done) {
  const auto deadline = Clock::now() + 2s;
  HttpServerStats s = server.stats();
  while (!done(s) && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    s = server.stats();
  }
  return s;
}

struct Attacker {
  Fd fd;
  bool half_open = false;
  Clock::time_point opened;
  std::optional<Clock::time_point> answered, closed;
  std::string received;
};

TEST(HttpServerLimits, SlowClientsFromOneAddressDoNotTakeThePort) {
  HttpServer server("127.0.0.1", 0, ok);  // the defaults, as the agent and the dashboard run it
  const HttpServerLimits limits = server.limits();
  // 200 half-open requests and 200 kept-alive connections left idle after one request, from
  // 127.0.0.2, interleaved so that both kinds get some of its slots.
  std::vector<Attacker> attackers;
  attackers.reserve(400);
  for (int i = 0; i < 200; ++i) {
    for (const bool half_open : {true, false}) {
      Attacker a;
      a.half_open = half_open;
      a.fd = connect_from("127.0.0.2", server.port());
      a.opened = Clock::now();
      ASSERT_TRUE(a.fd.ok()) << "connection " << attackers.size() << ": " << std::strerror(errno);
      // A connection refused on arrival may be closed before this is sent: its failure is fine.
      send_all(a.fd.get(), half_open ? kHalfOpen : kKeepAlive, 1s);
      attackers.push_back(std::move(a));
    }
  }
  const auto opened = Clock::now();

  // Watches every attacking connection: when it got an answer, when the server closed it. Bounded:
  // all should be closed by idle_timeout + kMargin.
  std::thread watcher([&] {
    const auto until = opened + limits.idle_timeout + limits.head_deadline + 5s;
    std::vector<pollfd> fds;
    std::vector<Attacker*> who;
    while (Clock::now() < until) {
      fds.clear();
      who.clear();
      for (Attacker& a : attackers) {
        if (a.closed) continue;
        fds.push_back({a.fd.get(), POLLIN, 0});
        who.push_back(&a);
      }
      if (fds.empty()) return;
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

  // Meanwhile a normal GET from another address, every 100 ms for 5 s: each answered within 1 s.
  Clock::duration worst{0};
  int requests = 0;
  const auto polled_until = Clock::now() + 5s;
  for (int i = 0; i < 50 && Clock::now() < polled_until; ++i) {
    const auto started = Clock::now();
    const std::string answer = request_from("127.0.0.1", server.port(), kNormal, 3s);
    const auto took = Clock::now() - started;
    worst = std::max(worst, took);
    ++requests;
    EXPECT_TRUE(contains(answer, "HTTP/1.1 200 OK") && contains(answer, "\r\n\r\nok\n"))
        << "request " << i << ": " << answer;
    EXPECT_LT(took, 1s) << "request " << i << " took " << ms(took) << " ms";
    std::this_thread::sleep_for(100ms);
  }
  watcher.join();
  std::cout << "[ timing ] " << requests << " normal requests under 400 attacking connections, the slowest "
            << std::chrono::duration<double, std::milli>(worst).count() << " ms" << std::endl;
  EXPECT_GE(requests, 20);

  // Each slow connection closed within its deadline, measured from its connect (the server's
  // clock starts at its accept, later): the half-open at the head deadline, the idle at the idle
  // timeout (their request came with the connect), those refused on arrival at once.
  std::uint64_t answered = 0;
  for (std::size_t i = 0; i < attackers.size(); ++i) {
    const Attacker& a = attackers[i];
    const char* kind = a.half_open ? "half-open" : "idle";
    ASSERT_TRUE(a.closed) << kind << " connection " << i << " still open "
                          << ms(Clock::now() - a.opened) << " ms after it opened";
    const auto bound = (a.half_open ? limits.head_deadline : limits.idle_timeout) + kMargin;
    EXPECT_LE(*a.closed - a.opened, bound) << kind << " connection " << i << " closed after "
                                           << ms(*a.closed - a.opened) << " ms";
    if (a.half_open) {
      EXPECT_TRUE(a.received.empty()) << "a half-open request answered: " << a.received;
    } else if (a.answered) {
      ++answered;
      EXPECT_TRUE(contains(a.received, "HTTP/1.1 200 OK")) << a.received;
    }
  }
  // The attacker's connections were each counted once: closed at the head deadline, closed idle
  // (those that were answered), or refused on arrival; none hit the overall cap.
  const HttpServerStats s = stats_when(server, [](const HttpServerStats& s) {
    return s.closed_head_deadline + s.closed_idle + s.refused_per_address >= 400;
  });
  EXPECT_EQ(s.closed_head_deadline + s.closed_idle + s.refused_per_address, 400u);
  EXPECT_GE(s.closed_head_deadline, 1u);
  EXPECT_EQ(s.closed_idle, answered);
  EXPECT_GE(s.closed_idle, 1u);
  EXPECT_GE(s.refused_per_address, 1u);
  EXPECT_EQ(s.refused_over_cap, 0u);
  EXPECT_EQ(s.closed_body_deadline + s.closed_write_deadline + s.too_large_431 + s.too_large_413, 0u);
}

TEST(HttpServerLimits, TricklingTheHeadDoesNotExtendItsDeadline) {
  HttpServer server("127.0.0.1", 0, ok);
  const auto deadline = server.limits().head_deadline;
  Fd fd = connect_from("127.0.0.3", server.port());
  ASSERT_TRUE(fd.ok());
  const auto opened = Clock::now();
  ASSERT_TRUE(send_all(fd.get(), "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  // One byte every 50 ms (well under the head limit), until the server closes the connection.
  std::optional<Clock::time_point> closed;
  std::string received;
  while (!closed && Clock::now() < opened + deadline + kMargin) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) {
      if (read_some(fd.get(), received) == Read::kClosed) closed = Clock::now();
    } else if (::send(fd.get(), "a", 1, MSG_NOSIGNAL) < 0 && errno != EAGAIN) {
      closed = Clock::now();  // reset by the server
    }
  }
  ASSERT_TRUE(closed) << "a trickling client held its connection past " << ms(deadline + kMargin) << " ms";
  EXPECT_GE(*closed - opened, deadline - 100ms) << "closed before the head deadline";
  EXPECT_LE(*closed - opened, deadline + kMargin);
  EXPECT_TRUE(received.empty()) << received;
  const HttpServerStats s = stats_when(server, [](const HttpServerStats& s) { return s.closed_head_deadline >= 1; });
  EXPECT_EQ(s.closed_head_deadline, 1u);
}

TEST(HttpServerLimits, AKeptAliveConnectionIsServedUntilIdle) {
  HttpServerLimits limits;
  limits.head_deadline = 500ms;
  limits.idle_timeout = 2500ms;
  HttpServer server("127.0.0.1", 0, ok, limits);
  Fd fd = connect_from("127.0.0.1", server.port());
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(send_all(fd.get(), kKeepAlive));
  EXPECT_TRUE(contains(read_response(fd.get(), 3s), "\r\n\r\nok\n"));
  // Idle for longer than the head deadline, shorter than the idle timeout: the next request is
  // served, its head deadline running from its first byte.
  std::this_thread::sleep_for(1000ms);
  ASSERT_TRUE(send_all(fd.get(), kKeepAlive));
  EXPECT_TRUE(contains(read_response(fd.get(), 3s), "\r\n\r\nok\n"));
  const auto answered = Clock::now();
  // Then silent: closed at the idle timeout.
  const Drained rest = read_until_closed(fd.get(), limits.idle_timeout + kMargin);
  ASSERT_TRUE(rest.closed) << "a kept-alive connection was not closed when idle";
  EXPECT_GE(*rest.closed - answered, limits.idle_timeout - 200ms) << "closed before the idle timeout";
  EXPECT_TRUE(rest.data.empty()) << rest.data;
  const HttpServerStats s = stats_when(server, [](const HttpServerStats& s) { return s.closed_idle >= 1; });
  EXPECT_EQ(s.closed_idle, 1u);
  EXPECT_EQ(s.closed_head_deadline, 0u);
}

TEST(HttpServerLimits, OversizedRequestsAre431Or413AndTheServerServesOn) {
  HttpServer server("127.0.0.1", 0, ok);
  const auto serves = [&] { return contains(request_from("127.0.0.1", server.port(), kNormal), "\r\n\r\nok\n"); };
  // A head just under the limit is served (a browser's, cookies and all, is a few KiB).
  const std::string almost =
      "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + std::string(7000, 'a') + "\r\n\r\n";
  EXPECT_TRUE(contains(request_from("127.0.0.1", server.port(), almost), "200 OK"));

  // 10 MB of headers: 431, closed.
  {
    std::string request = "GET / HTTP/1.1\r\nHost: x\r\n";
    while (request.size() < (10u << 20)) request += "X-Pad: " + std::string(1000, 'a') + "\r\n";
    request += "\r\n";
    Fd fd = connect_from("127.0.0.1", server.port());
    ASSERT_TRUE(fd.ok());
    const Pushed r = push(fd.get(), request);
    EXPECT_TRUE(r.answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n")) << r.answer.substr(0, 200);
    EXPECT_TRUE(contains(r.answer, "Connection: close")) << r.answer;
    EXPECT_TRUE(r.closed);
  }
  EXPECT_TRUE(serves());

  // A Content-Length over the cap, body sent: 413 for GET and for POST (the size check comes
  // before the 405), answered and closed without reading the body.
  for (const std::string method : {"GET", "POST"}) {
    Fd fd = connect_from("127.0.0.1", server.port());
    ASSERT_TRUE(fd.ok());
    const std::string body(1 << 20, 'b');
    const Pushed r = push(fd.get(), method + " / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + body);
    EXPECT_TRUE(r.answer.starts_with("HTTP/1.1 413 Payload Too Large\r\n"))
        << method << ": " << r.answer.substr(0, 200);
    EXPECT_TRUE(r.closed) << method;
  }
  // A 50 MB POST: 413 before the client could send it all, and dropped.
  {
    constexpr std::size_t kSize = 50u << 20;
    Fd fd = connect_from("127.0.0.1", server.port());
    ASSERT_TRUE(fd.ok());
    const Pushed r = push(fd.get(), "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(kSize) +
                                        "\r\n\r\n" + std::string(kSize, 'c'));
    EXPECT_TRUE(r.answer.starts_with("HTTP/1.1 413 Payload Too Large\r\n")) << r.answer.substr(0, 200);
    EXPECT_LT(r.sent_before_answer, kSize) << "the server read the whole body before answering";
    EXPECT_TRUE(r.closed);
  }
  // A chunked body has no length up front: 413 once it passes the cap.
  {
    std::string request = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 100; ++i) request += "400\r\n" + std::string(1024, 'd') + "\r\n";
    request += "0\r\n\r\n";
    Fd fd = connect_from("127.0.0.1", server.port());
    ASSERT_TRUE(fd.ok());
    const Pushed r = push(fd.get(), request);
    EXPECT_TRUE(r.answer.starts_with("HTTP/1.1 413 Payload Too Large\r\n")) << r.answer.substr(0, 200);
    EXPECT_TRUE(r.closed);
  }
  // A small body with a method other than GET or HEAD: read, dropped, 405 as before.
  const std::string small = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789";
  EXPECT_TRUE(contains(request_from("127.0.0.1", server.port(), small), "HTTP/1.1 405 Method Not Allowed"));
  EXPECT_TRUE(serves());
  const HttpServerStats s = server.stats();
  EXPECT_EQ(s.too_large_431, 1u);
  EXPECT_EQ(s.too_large_413, 4u);
}

TEST(HttpServerLimits, OneAddressHoldsAtMostItsShare) {
  HttpServerLimits limits;
  limits.head_deadline = 60s;  // nothing is reclaimed during the test
  HttpServer server("127.0.0.1", 0, ok, limits);
  ASSERT_EQ(limits.max_per_address, 16);
  std::vector<Fd> held;
  for (int i = 0; i < 20; ++i) {
    held.push_back(connect_from("127.0.0.3", server.port()));
    ASSERT_TRUE(held.back().ok());
  }
  // Accepted in order: the first 16 hold a slot each, the last 4 are closed on arrival.
  for (int i = 16; i < 20; ++i) EXPECT_TRUE(read_until_closed(held[i].get(), 5s).closed) << "connection " << i;
  for (int i = 0; i < 16; ++i) {
    std::string data;
    EXPECT_EQ(read_some(held[i].get(), data), Read::kNothing) << "connection " << i;
  }
  // That address gets nothing more; another is served meanwhile.
  EXPECT_EQ(request_from("127.0.0.3", server.port(), kNormal, 2s), "");
  EXPECT_TRUE(contains(request_from("127.0.0.1", server.port(), kNormal), "\r\n\r\nok\n"));
  const HttpServerStats s = server.stats();
  EXPECT_EQ(s.refused_per_address, 5u);
  EXPECT_EQ(s.refused_over_cap, 0u);
  // A slot given back is the address's again.
  held[0].reset();
  std::string answer;
  for (int i = 0; i < 50 && !contains(answer, "ok\n"); ++i) {
    std::this_thread::sleep_for(50ms);
    answer = request_from("127.0.0.3", server.port(), kNormal, 2s);
  }
  EXPECT_TRUE(contains(answer, "\r\n\r\nok\n")) << "not served once a slot was given back";
}

TEST(HttpServerLimits, LimitsThatMakeNoSenseAreRefused) {
  const auto make = [](HttpServerLimits limits) { HttpServer("127.0.0.1", 0, ok, limits); };
  EXPECT_THROW(make({.head_deadline = 0ms}), InvalidArgument);
  EXPECT_THROW(make({.idle_timeout = -1ms}), InvalidArgument);
  EXPECT_THROW(make({.max_head_bytes = 0}), InvalidArgument);
  EXPECT_THROW(make({.max_body_bytes = 0}), InvalidArgument);
  EXPECT_THROW(make({.max_connections = 0}), InvalidArgument);
  EXPECT_THROW(make({.max_connections = 8, .max_per_address = 9}), InvalidArgument);
  EXPECT_NO_THROW(make({.max_connections = 8, .max_per_address = 8}));
}

// The agent's endpoint exposes the counters, as a counter family with its HELP and TYPE.
TEST(AgentMetricsEndpoint, CountsConnectionsItsServerClosed) {
  agents::AgentMetrics agent({.job = "j", .node = "n1", .address = "127.0.0.1"});
  Fd fd = connect_from("127.0.0.1", agent.port());
  ASSERT_TRUE(fd.ok());
  const Pushed r = push(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(16384, 'a') + "\r\n\r\n");
  EXPECT_TRUE(r.answer.starts_with("HTTP/1.1 431")) << r.answer;
  const test::HttpResult scrape = test::http_get(agent.port(), "/metrics");
  ASSERT_EQ(scrape.status, 200);
  const std::string& text = scrape.body;
  EXPECT_TRUE(contains(text, "# HELP hdp_http_connections_closed_total ")) << text;
  EXPECT_TRUE(contains(text, "# TYPE hdp_http_connections_closed_total counter\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_http_connections_closed_total{hdp_job=\"j\",node=\"n1\",reason=\"too_large\"} 1\n"))
      << text;
  for (const char* reason : {"head_deadline", "body_deadline", "write_deadline", "idle", "over_cap", "per_address"}) {
    EXPECT_TRUE(contains(text, std::string("hdp_http_connections_closed_total{hdp_job=\"j\",node=\"n1\",reason=\"") +
                                   reason + "\"} 0\n"))
        << reason << "\n" << text;
  }
}

}  // namespace
}  // namespace hdp::metrics
