#include "metrics/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
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

// Bytes asked of the socket while waiting for a kept-alive connection's next request.
constexpr std::size_t kReadChunk = 4096;
// After a 431 or 413 the client is likely still sending: what it sends is read and dropped for a
// moment before the socket is closed, because closing with unread data sends a RST that may reach
// the client before it has read the answer. Bounded, so that this cannot hold a slot either.
constexpr std::chrono::seconds kLingerTime{1};
constexpr std::size_t kLingerBytes = 4 << 20;

struct Counters {
  std::atomic<std::uint64_t> closed_head_deadline{0};
  std::atomic<std::uint64_t> closed_body_deadline{0};
  std::atomic<std::uint64_t> closed_write_deadline{0};
  std::atomic<std::uint64_t> closed_idle{0};
  std::atomic<std::uint64_t> refused_over_cap{0};
  std::atomic<std::uint64_t> refused_per_address{0};
  std::atomic<std::uint64_t> too_large_431{0};
  std::atomic<std::uint64_t> too_large_413{0};
};

// What the server and its sessions share. The counts of connections are the I/O thread's only;
// the counters are also read from other threads (HttpServer::stats()).
struct Shared {
  HttpHandler handler;
  HttpServerLimits limits;
  Counters counters;
  int sessions = 0;
  std::map<asio::ip::address, int> per_address;
};

// The key a client's connections are counted under: its address, but an IPv6 client's /64 (one
// host commonly has the whole /64 to pick addresses from), and an IPv4 client seen on a dual-stack
// socket as itself.
asio::ip::address client_key(const asio::ip::address& address) {
  if (!address.is_v6()) return address;
  const auto v6 = address.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6);
  auto bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes);
}

// One connection: read a request's head (before its deadline), then its body (before its own),
// answer (before the write deadline), then wait for the next request up to the idle timeout. Any
// deadline missed closes the connection; a request over a size limit is answered and closed.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared, asio::ip::address client)
      : stream_(std::move(socket)), shared_(shared), client_(client) {
    ++shared_.sessions;
    ++shared_.per_address[client_];
  }
  ~Session() {
    --shared_.sessions;
    const auto it = shared_.per_address.find(client_);
    if (--it->second == 0) shared_.per_address.erase(it);
  }

  void start() { read_head(); }

 private:
  const HttpServerLimits& limits() const { return shared_.limits; }
  Counters& counters() { return shared_.counters; }

  // The head deadline is set once for the whole head: the stream's expiry is a point in time, not
  // renewed by each read, so a client trickling bytes gains nothing.
  void read_head() {
    stream_.expires_after(limits().head_deadline);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits().max_head_bytes));
    parser_->body_limit(limits().max_body_bytes);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_head(ec);
    });
  }

  void on_head(beast::error_code ec) {
    if (ec == beast::error::timeout) return missed(counters().closed_head_deadline, "head deadline");
    // A Content-Length over the cap is refused here, with the head: none of the body is read.
    if (ec == http::error::header_limit) return refuse(http::status::request_header_fields_too_large);
    if (ec == http::error::body_limit) return refuse(http::status::payload_too_large);
    if (ec) return close();  // not HTTP, or the client went away
    if (parser_->is_done()) return answer();
    stream_.expires_after(limits().body_deadline);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == beast::error::timeout) return self->missed(self->counters().closed_body_deadline, "body deadline");
      if (ec == http::error::body_limit) return self->refuse(http::status::payload_too_large);  // chunked
      if (ec) return self->close();
      self->answer();
    });
  }

  // Between requests: wait up to the idle timeout for the next request's first byte, from which
  // its head deadline runs.
  void await_next() {
    if (buffer_.size() > 0) return read_head();  // pipelined: it is here already
    stream_.expires_after(limits().idle_timeout);
    auto on_read = [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec == beast::error::timeout) return self->missed(self->counters().closed_idle, "idle timeout");
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_head();
    };
    stream_.async_read_some(buffer_.prepare(kReadChunk), std::move(on_read));
  }

  void answer() {
    const auto& request = parser_->get();
    HttpResponse out;
    const bool head = request.method() == http::verb::head;
    if (request.method() != http::verb::get && !head) {
      out = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
    } else {
      HttpRequest in;
      in.method = head ? "HEAD" : "GET";
      in.target = std::string(request.target());
      const auto q = in.target.find('?');
      in.path = in.target.substr(0, q);
      in.query = q == std::string::npos ? std::string() : in.target.substr(q + 1);
      try {
        out = shared_.handler(in);
      } catch (const std::exception& e) {
        log()->warn("http: {} {}: {}", in.method, in.target, e.what());
        out = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
      }
    }
    auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(out.status),
                                                                        request.version());
    response->set(http::field::server, "hdp");
    response->set(http::field::content_type, out.content_type);
    response->set(http::field::cache_control, "no-store");
    response->keep_alive(request.keep_alive());
    response->body() = std::move(out.body);
    response->prepare_payload();
    if (head) response->body().clear();
    stream_.expires_after(limits().write_deadline);
    http::async_write(stream_, *response, [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
      if (ec == beast::error::timeout) return self->missed(self->counters().closed_write_deadline, "write deadline");
      if (ec || !response->keep_alive()) return self->close();
      self->await_next();
    });
  }

  // A 431 or 413: answered, then the connection is closed (the rest of the request is not read).
  void refuse(http::status status) {
    const bool head = status == http::status::request_header_fields_too_large;
    ++(head ? counters().too_large_431 : counters().too_large_413);
    log()->debug("http: {} from {}: {} over {} bytes", static_cast<int>(status), client_.to_string(),
                 head ? "a request head" : "a request body", head ? limits().max_head_bytes : limits().max_body_bytes);
    auto response = std::make_shared<http::response<http::string_body>>(status, 11);
    response->set(http::field::server, "hdp");
    response->set(http::field::content_type, "text/plain; charset=utf-8");
    response->keep_alive(false);
    response->body() = head ? "request head too large\n" : "request body too large\n";
    response->prepare_payload();
    stream_.expires_after(limits().write_deadline);
    http::async_write(stream_, *response, [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
      if (ec == beast::error::timeout) return self->missed(self->counters().closed_write_deadline, "write deadline");
      if (ec) return self->close();
      self->linger();
    });
  }

  void linger() {
    close();
    stream_.expires_after(kLingerTime);
    scratch_.resize(16384);
    drain();
  }

  void drain() {
    stream_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->drained_ += n;
      if (!ec && self->drained_ < kLingerBytes) self->drain();
      // Otherwise the session ends here, and its socket is closed.
    });
  }

  // Missed a deadline: counted, and logged at debug level only (an attacker must not flood the log).
  void missed(std::atomic<std::uint64_t>& counter, const char* what) {
    ++counter;
    log()->debug("http: closed a connection from {}: {}", client_.to_string(), what);
    close();
  }

  // Sends FIN; the socket itself closes when the last handler holding the session is gone.
  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string scratch_;
  std::size_t drained_ = 0;
  Shared& shared_;
  const asio::ip::address client_;
};

void check_limits(const HttpServerLimits& l) {
  using std::chrono::milliseconds;
  for (const auto& [name, value] :
       {std::pair{"head_deadline", l.head_deadline}, std::pair{"body_deadline", l.body_deadline},
        std::pair{"write_deadline", l.write_deadline}, std::pair{"idle_timeout", l.idle_timeout}}) {
    if (value <= milliseconds::zero()) throw InvalidArgument(std::string("http server: ") + name + " must be positive");
  }
  if (l.max_head_bytes == 0 || l.max_head_bytes > std::numeric_limits<std::uint32_t>::max()) {
    throw InvalidArgument("http server: max_head_bytes must be in 1..4294967295");
  }
  if (l.max_body_bytes == 0) throw InvalidArgument("http server: max_body_bytes must be positive");
  if (l.max_connections <= 0) throw InvalidArgument("http server: max_connections must be positive");
  if (l.max_per_address <= 0 || l.max_per_address > l.max_connections) {
    throw InvalidArgument("http server: max_per_address must be in 1..max_connections (" +
                          std::to_string(l.max_connections) + ")");
  }
}

}  // namespace

struct HttpServer::Impl {
  Shared shared;  // first: the sessions the io_context still holds are destroyed with it, and use it
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
      admit(std::move(socket));
      accept();
    });
  }

  // Serves the connection, or closes it (when `socket` goes out of scope) if its client holds its
  // share of the slots, or all are taken: idle clients cannot take the process's descriptors (an
  // agent needs them for Redis and its workers), nor one client every slot.
  void admit(tcp::socket socket) {
    beast::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (ec) return;  // gone already
    const auto client = client_key(remote.address());
    const auto held = shared.per_address.find(client);
    if (held != shared.per_address.end() && held->second >= shared.limits.max_per_address) {
      ++shared.counters.refused_per_address;
      log()->debug("http: refused a connection from {}: it holds {} already", client.to_string(), held->second);
      return;
    }
    if (shared.sessions >= shared.limits.max_connections) {
      ++shared.counters.refused_over_cap;
      log()->debug("http: refused a connection from {}: {} open already", client.to_string(), shared.sessions);
      return;
    }
    std::make_shared<Session>(std::move(socket), shared, client)->start();
  }
};

HttpServer::HttpServer(const std::string& address, int port, HttpHandler handler, HttpServerLimits limits)
    : impl_(std::make_unique<Impl>()) {
  check_limits(limits);
  impl_->shared.handler = std::move(handler);
  impl_->shared.limits = limits;
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

const HttpServerLimits& HttpServer::limits() const { return impl_->shared.limits; }

HttpServerStats HttpServer::stats() const {
  const Counters& c = impl_->shared.counters;
  HttpServerStats s;
  s.closed_head_deadline = c.closed_head_deadline.load(std::memory_order_relaxed);
  s.closed_body_deadline = c.closed_body_deadline.load(std::memory_order_relaxed);
  s.closed_write_deadline = c.closed_write_deadline.load(std::memory_order_relaxed);
  s.closed_idle = c.closed_idle.load(std::memory_order_relaxed);
  s.refused_over_cap = c.refused_over_cap.load(std::memory_order_relaxed);
  s.refused_per_address = c.refused_per_address.load(std::memory_order_relaxed);
  s.too_large_431 = c.too_large_431.load(std::memory_order_relaxed);
  s.too_large_413 = c.too_large_413.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hdp::metrics
