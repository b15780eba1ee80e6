// File: metrics/http_client.h
//
// A minimal HTTP client for loopback, for the tests and benchmarks of the servers (an agent's
// /metrics, the dashboard, Prometheus' API): one request per connection, HTTP/1.0 (so that no
// server answers in chunks), bounded by a deadline. Not a general client: no TLS, no redirects.
#pragma once

#include <chrono>
#include <string>

namespace hdp::metrics {

struct HttpResult {
  int status = 0;    // 0: no answer (refused, or nothing before the deadline)
  std::string body;  // after the headers
  std::string raw;   // everything received
};

// Sends `request` as is to 127.0.0.1:port and reads until the server closes or `timeout` passes.
std::string http_exchange(int port, const std::string& request, std::chrono::milliseconds timeout);
// GET `target` (path and query, already URL-encoded).
HttpResult http_get(int port, const std::string& target,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Percent-encodes a query parameter's value.
std::string url_encode(const std::string& text);

}  // namespace hdp::metrics
