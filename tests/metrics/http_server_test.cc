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
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <optional>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agents/agent_metrics.h"
#include "common/error.h"
#include "metrics/http_server.h"
#include "tests/support/http_flood.h"
#include "tests/support/http_get.h"

namespace hdp::metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
// The raw-socket client (tests/support/http_flood.h).
using test::connect_from;
using test::Drained;
using test::Fd;
using test::push;
using test::Pushed;
using test::Read;
using test::read_response;
using test::read_some;
using test::read_until_closed;
using test::request_from;
using test::send_all;

// Time for the server to act on a deadline and for the test to see it, on a loaded machine (CI
// runs 4 tests at once on 2 cores).
constexpr auto kMargin = 1500ms;

constexpr std::string_view kKeepAlive = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
constexpr std::string_view kNormal = "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

HttpResponse ok(const HttpRequest&) { return {200, "text/plain", "ok\n"}; }

long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

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

TEST(HttpServerLimits, SlowClientsFromOneAddressDoNotTakeThePort) {
  HttpServer server("127.0.0.1", 0, ok);  // the defaults, as the agent and the dashboard run it
  // 200 half-open requests and 200 kept-alive connections left idle after one request, from
  // 127.0.0.2, interleaved so that both kinds get some of its slots; meanwhile a normal GET from
  // 127.0.0.1 every 100 ms for 5 s, each answered within 1 s (tests/support/http_flood.h).
  const test::FloodOptions options{
      .port = server.port(),
      .path = "/ok",
      .limits = server.limits(),
      .normal_ok = [](const std::string& answer) {
        return contains(answer, "HTTP/1.1 200 OK") && contains(answer, "\r\n\r\nok\n");
      }};
  const test::FloodResult r = test::slow_client_flood(options);
  std::cout << "[ timing ] " << r.summary() << std::endl;
  // Each slow connection closed within its deadline, measured from its connect (the server's
  // clock starts at its accept, later): the half-open at the head deadline, the idle at the idle
  // timeout (their request came with the connect), those refused on arrival at once; a half-open
  // request never answered, an idle one answered 200.
  test::expect_port_withstood(r, options);

  // The attacker's connections were each counted once: closed at the head deadline, closed idle
  // (those that were answered), or refused on arrival; none hit the overall cap.
  const HttpServerStats s = stats_when(server, [](const HttpServerStats& s) {
    return s.closed_head_deadline + s.closed_idle + s.refused_per_address >= 400;
  });
  EXPECT_EQ(s.closed_head_deadline + s.closed_idle + s.refused_per_address, 400u);
  EXPECT_GE(s.closed_head_deadline, 1u);
  EXPECT_EQ(s.closed_idle, r.expected_idle());
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
  // No worker: nothing is written in the directory the workers' files would go to.
  agents::AgentMetrics agent(
      {.job = "j", .node = "n1", .address = "127.0.0.1", .directory = std::filesystem::temp_directory_path()});
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
