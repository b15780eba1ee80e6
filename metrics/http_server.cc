#include "metrics/http_server.h"

#include <chrono>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/error.h"
#include "common/log.h"

namespace hdp::metrics {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::chrono::seconds kConnectionDeadline{10};
// Connections served at once: more are closed on arrival, so that idle clients cannot take the
// process's descriptors (an agent needs them for Redis and its workers).
constexpr int kMaxSessions = 64;

// One connection: read a request, answer, repeat while the client keeps it alive, all before
// the deadline (renewed per request).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpHandler& handler, int& sessions)
      : stream_(std::move(socket)), handler_(handler), sessions_(sessions) {
    ++sessions_;
  }
  ~Session() { --sessions_; }

  void start() { read(); }

 private:
  void read() {
    request_ = {};
    stream_.expires_after(kConnectionDeadline);
    http::async_read(stream_, buffer_, request_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->answer();
    });
  }

  void answer() {
    HttpResponse out;
    const bool head = request_.method() == http::verb::head;
    if (request_.method() != http::verb::get && !head) {
      out = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
    } else {
      HttpRequest in;
      in.method = head ? "HEAD" : "GET";
      in.target = std::string(request_.target());
      const auto q = in.target.find('?');
      in.path = in.target.substr(0, q);
      in.query = q == std::string::npos ? std::string() : in.target.substr(q + 1);
      try {
        out = handler_(in);
      } catch (const std::exception& e) {
        log()->warn("http: {} {}: {}", in.method, in.target, e.what());
        out = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
      }
    }
    auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(out.status),
                                                                        request_.version());
    response->set(http::field::server, "hdp");
    response->set(http::field::content_type, out.content_type);
    response->set(http::field::cache_control, "no-store");
    response->keep_alive(request_.keep_alive());
    response->body() = std::move(out.body);
    response->prepare_payload();
    if (head) response->body().clear();
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
                        if (ec || !response->keep_alive()) return self->close();
                        self->read();
                      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  const HttpHandler& handler_;
  int& sessions_;  // the server's count (its I/O thread only)
};

}  // namespace

struct HttpServer::Impl {
  HttpHandler handler;
  int sessions = 0;
  int port = 0;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, say: try again in a moment rather than at once, in a loop.
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](beast::error_code timer) {
          if (!timer) accept();
        });
        return;
      }
      if (sessions < kMaxSessions) {
        std::make_shared<Session>(std::move(socket), handler, sessions)->start();
      } else {
        beast::error_code ignored;
        socket.close(ignored);
      }
      accept();
    });
  }
};

HttpServer::HttpServer(const std::string& address, int port, HttpHandler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  if (port < 0 || port > 65535) throw InvalidArgument("port " + std::to_string(port) + " is not in 0..65535");
  beast::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) throw InvalidArgument("'" + address + "' is not an IP address to listen on");
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use) {
    throw InvalidArgument("port " + std::to_string(port) + " on " + address + " is in use");
  }
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error("cannot listen on " + address + ":" + std::to_string(port) + ": " + ec.message());
  impl_->port = acceptor.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

HttpServer::~HttpServer() {
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry.cancel();
    impl->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const { return impl_->port; }

}  // namespace hdp::metrics
