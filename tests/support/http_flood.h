// File: tests/support/http_flood.h
//
// Raw sockets for testing an HTTP server's limits (metrics/http_server.h), in-process or in a real
// process (the dashboard, an agent's /metrics): connections from a chosen address of 127/8 (Linux
// routes all of it to loopback, so 127.0.0.2 is another client address than 127.0.0.1), requests
// sent and answers read under deadlines, and slow_client_flood(): many half-open requests and idle
// keep-alives from one address while a normal client polls from another.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/http_server.h"

namespace hdp::test {

// A socket, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept;
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset();
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// A non-blocking TCP connection from `from` (an address of 127/8) to 127.0.0.1:port, connected
// within `timeout`; not ok() when it was not.
Fd connect_from(const std::string& from, int port, std::chrono::milliseconds timeout = std::chrono::seconds(3));

// Sends all of `data` within `timeout`; false when the peer closed or the time passed.
bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout = std::chrono::seconds(3));

// What one non-blocking read found: bytes (appended to `into`), the end of the stream (EOF, or a
// reset: the server closed the connection), or nothing yet.
enum class Read { kData, kClosed, kNothing };
Read read_some(int fd, std::string& into);

struct Drained {
  std::string data;
  std::optional<std::chrono::steady_clock::time_point> closed;  // when the server closed it; none within the time
};
// Reads until the server closes the connection or `timeout` passes.
Drained read_until_closed(int fd, std::chrono::milliseconds timeout);

// Reads one whole response (its head, and the body its Content-Length gives) from a kept-alive
// connection; "" when it did not come within `timeout`.
std::string read_response(int fd, std::chrono::milliseconds timeout);

// One request on a fresh connection from `from`, the server closing after it: what came back
// within `timeout` ("" when refused).
std::string request_from(const std::string& from, int port, std::string_view request,
                         std::chrono::milliseconds timeout = std::chrono::seconds(3));

struct Pushed {
  std::string answer;
  std::size_t sent_before_answer = 0;  // bytes of the request sent when the answer began
  bool closed = false;                 // the server closed the connection after answering
};
// Sends `data` while reading what the server answers (as a client that reads an early answer
// does), stops sending once the answer begins, and reads until the server closes.
Pushed push(int fd, std::string_view data, std::chrono::milliseconds timeout = std::chrono::seconds(10));

// A request with a head of about `bytes` (padding headers of 1000 bytes each), complete.
std::string request_with_head_of(std::size_t bytes, std::string_view path = "/");
// A GET of `path` whose Content-Length is `bytes`, with that body.
std::string request_with_body_of(std::size_t bytes, std::string_view path = "/", std::string_view method = "GET");

// slow_client_flood(): from `attacker`, `half_open` connections that send a request head without
// its end (held until the head deadline) interleaved with `keep_alive` ones that send one whole
// GET of `path` and then nothing (answered, then held until the idle timeout); once all are open,
// a normal GET of `path` (Connection: close) from `client` every `every`, for `poll_for` (at most
// `max_normal` of them), each timed from its connect to the end of its answer.
struct FloodOptions {
  int port = 0;              // on 127.0.0.1
  std::string path = "/";    // the normal request's, and the keep-alives'
  std::string attacker = "127.0.0.2";
  std::string client = "127.0.0.1";
  int half_open = 200;
  int keep_alive = 200;
  metrics::HttpServerLimits limits{};  // the server's (head_deadline and idle_timeout are used)
  // Time for the server to act on a deadline and for the test to see it, on a loaded machine (CI
  // runs 4 tests at once on 2 cores): a slow connection closed later than its deadline plus this,
  // after it connected, is late.
  std::chrono::milliseconds margin{1500};
  std::chrono::milliseconds poll_for{5000};
  std::chrono::milliseconds every{100};
  int max_normal = 50;
  std::chrono::milliseconds normal_timeout{3000};  // a normal request not answered by then failed
  // Whether a normal answer (all the bytes received) is right; default: its status is 200.
  std::function<bool(const std::string&)> normal_ok;
};

// The attacking connections of one kind.
struct SlowKind {
  int opened = 0;
  // The server admitted it (so counted it under its deadline, not as refused on arrival): a
  // half-open one closed no earlier than the head deadline after its connect began (the server's
  // clock starts at its accept, later; one refused on arrival is closed as soon as accepted); a
  // keep-alive one answered.
  int held = 0;
  int answered_wrongly = 0;  // a half-open one answered at all; a keep-alive one answered other than 200
  int closed_late = 0;       // closed later than its deadline (head, or idle) + margin after its connect
  int never_closed = 0;      // still open when the flood gave up watching
  std::chrono::milliseconds slowest_close{0};  // the longest from its connect to its close
};

struct FloodResult {
  int connect_failed = 0;  // attacking connections that could not be made (or in time)
  SlowKind half_open, keep_alive;
  int normal_requests = 0;
  int normal_failed = 0;  // no answer within normal_timeout, or not normal_ok
  int normal_slow = 0;    // answered, but in 1 s or more
  std::chrono::microseconds worst_normal{0};  // the slowest normal request, connect to answer
  std::vector<std::string> problems;  // the first few failures, described

  int attackers() const { return half_open.opened + keep_alive.opened; }
  // What the server's counters (HttpServerStats) must have grown by: each attacking connection
  // counted once, at its deadline or as refused on arrival for its address.
  std::uint64_t expected_head_deadline() const { return static_cast<std::uint64_t>(half_open.held); }
  std::uint64_t expected_idle() const { return static_cast<std::uint64_t>(keep_alive.held); }
  std::uint64_t expected_per_address() const {
    return static_cast<std::uint64_t>(attackers() - half_open.held - keep_alive.held);
  }
  std::string summary() const;  // one line, for the log
  std::string details() const;  // summary() and the problems, one a line: for failure messages
};

// Bounded: opening takes at most 20 s, polling `poll_for` (+ one normal_timeout), watching the
// attacking connections until all closed or max(head deadline, idle timeout) + margin + 2 s after
// the last opened.
FloodResult slow_client_flood(const FloodOptions& options);

// The GoogleTest expectations on a flood that did not take the port: every attacking connection
// made, closed within its deadline + margin, a half-open one never answered, a keep-alive one
// answered 200 if at all; the address got some slots of each kind and was refused others; at least
// `min_normal` normal requests, each answered right within 1 s.
void expect_port_withstood(const FloodResult& result, const FloodOptions& options, int min_normal = 20);

}  // namespace hdp::test
