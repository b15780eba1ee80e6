// File: metrics/http_server.h
//
// A small HTTP/1.1 server for /metrics and the dashboard, over Boost.Beast (its types stay in
// http_server.cc). It serves GET and HEAD on its own thread, one request at a time, and stops when
// destroyed. The handler runs on the server's thread; an exception it throws becomes a 500.
//
// It listens on 0.0.0.0 for Prometheus, so what a client can hold is bounded (HttpServerLimits,
// defaults in brackets):
//   - a request's head (request line and headers) must arrive within head_deadline [2 s] of the
//     server starting to read it (on a new connection: its accept; on a kept-alive one: the
//     request's first byte), however the bytes trickle in; its body within body_deadline [5 s] of
//     the head; a response must be taken within write_deadline [10 s];
//   - a kept-alive connection with no next request for idle_timeout [5 s] is closed;
//   - a head over max_head_bytes [8 KiB] is answered 431, a body over max_body_bytes [64 KiB] 413
//     (checked on Content-Length before any of the body is read), and the connection is closed
//     (after at most 1 s draining what the client still sends, so that it can read the answer);
//   - at most max_connections [64] at once, at most max_per_address [16] of them from one client
//     address (an IPv6 client: its /64); a connection past either is closed on arrival.
// So one client cannot take the port: it holds at most 16 slots, and each for at most
// head_deadline + body_deadline + write_deadline per request, or idle_timeout between requests.
// Every connection closed for a limit is counted (stats()), and logged at debug level only (a flood
// of them must not flood the log).
// Requests other than GET and HEAD are answered 405 without calling the handler (their body, up
// to the cap, is read and dropped).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hdp::metrics {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD" (others are answered 405 without calling the handler)
  std::string target;  // the path and query, e.g. "/api/job?x=1"
  std::string path;    // target without the query
  std::string query;   // after '?', or empty
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// What one client may hold. The defaults suit /metrics and the dashboard: a Prometheus scrape or a
// page poll sends its head at once and has no body, a scraper's keep-alive reconnects when closed.
struct HttpServerLimits {
  std::chrono::milliseconds head_deadline{2000};
  std::chrono::milliseconds body_deadline{5000};
  std::chrono::milliseconds write_deadline{10000};
  std::chrono::milliseconds idle_timeout{5000};
  std::size_t max_head_bytes = 8 * 1024;
  std::size_t max_body_bytes = 64 * 1024;
  int max_connections = 64;
  int max_per_address = 16;
};

// Connections the server closed or refused because of a limit, since it started.
struct HttpServerStats {
  std::uint64_t closed_head_deadline = 0;   // the head did not arrive in time
  std::uint64_t closed_body_deadline = 0;   // the body did not arrive in time
  std::uint64_t closed_write_deadline = 0;  // the client did not take the response in time
  std::uint64_t closed_idle = 0;            // kept alive with no next request
  std::uint64_t refused_over_cap = 0;       // max_connections were open
  std::uint64_t refused_per_address = 0;    // its address held max_per_address
  std::uint64_t too_large_431 = 0;          // head over max_head_bytes
  std::uint64_t too_large_413 = 0;          // body over max_body_bytes
};

class HttpServer {
 public:
  // Listens on address:port (port 0: a free port) and starts serving. Throws InvalidArgument for an
  // address that is not an IP address, a port in use ("port P on A is in use") or limits that are
  // not positive (or a per-address share over the cap), Error otherwise.
  HttpServer(const std::string& address, int port, HttpHandler handler, HttpServerLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;  // the port bound (the free one chosen for 0)
  const HttpServerLimits& limits() const;
  HttpServerStats stats() const;  // any thread, the handler's included

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hdp::metrics
