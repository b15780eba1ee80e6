// File: metrics/http_server.h
//
// A small HTTP/1.1 server for /metrics and the dashboard, over Boost.Beast (its types stay in
// http_server.cc). It serves GET and HEAD on its own thread, one request at a time, each
// connection bounded by a deadline (a client that stalls is dropped after 10 s), at most 64
// connections at once (more are closed on arrival), and stops when destroyed. The handler runs on the server's thread; an exception it throws becomes a 500.
#pragma once

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

class HttpServer {
 public:
  // Listens on address:port (port 0: a free port) and starts serving. Throws InvalidArgument for an
  // address that is not an IP address or a port in use ("port P on A is in use"), Error otherwise.
  HttpServer(const std::string& address, int port, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;  // the port bound (the free one chosen for 0)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hdp::metrics
