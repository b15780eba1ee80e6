// File: mesh/comm/tcp_connect.cc
//
// How a TcpNetwork (tcp_network.h) makes its connections: it listens, publishes its address
// record, and on both sides of a pair runs the handshake (wire::Hello, wire::Ack): the higher rank's
// listener checks and answers each hello, the lower rank reads the peer's record from the store,
// connects and says hello; a pair that completes it is up (tcp_network_impl.h's link states).
// connect_now() connects a set of peers at once and waits for them.
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <optional>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/backoff.h"
#include "mesh/comm/tcp_network_impl.h"

namespace hdp::mesh {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Link = TcpNetwork::Impl::Link;

void TcpNetwork::Impl::close_hard(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

std::vector<TcpNetwork::Impl::tcp::endpoint> TcpNetwork::Impl::resolve(const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (!ec) return {tcp::endpoint(ip, port)};
  asio::io_context io;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw InvalidArgument("cannot resolve '" + host + "': " + ec.message());
  std::vector<tcp::endpoint> endpoints;
  for (const auto& r : results) endpoints.push_back(r.endpoint());
  return endpoints;
}

void TcpNetwork::Impl::listen() {
  const auto endpoints = resolve(options.hostname, 0);
  boost::system::error_code ec;
  for (const auto& endpoint : endpoints) {
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) break;
    boost::system::error_code ignored;
    acceptor.close(ignored);
  }
  if (ec || !acceptor.is_open()) {
    throw InvalidArgument("communicator: cannot listen on '" + options.hostname + "': " + ec.message());
  }
  address = wire::record(options.hostname, acceptor.local_endpoint().port());
}

void TcpNetwork::Impl::accept_next() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      on_accepted(std::make_shared<tcp::socket>(std::move(socket)));
      return accept_next();
    }
    // Out of file descriptors, say: try again a little later rather than spin.
    log()->warn("communicator {}: accept failed: {}", name(), ec.message());
    auto timer = std::make_shared<asio::steady_timer>(io, Millis(10));
    timer->async_wait([this, timer](const boost::system::error_code& e) {
      if (!e) accept_next();
    });
  });
}

void TcpNetwork::Impl::on_accepted(Socket socket) {
  {
    std::lock_guard lock(mutex);
    if (dead) {
      close_hard(*socket);
      return;
    }
    handshaking.insert(socket);
  }
  auto hs = std::make_shared<Handshake>(socket);
  hs->timer.expires_after(std::min(kHelloLimit, options.timeout));
  hs->timer.async_wait([this, hs](const boost::system::error_code& ec) {
    if (ec || hs->settled) return;  // cancelled: the hello came
    hs->settled = true;
    refuse(hs->socket, "a connection that sent no hello within " +
                           std::to_string(std::min(kHelloLimit, options.timeout).count()) + " ms");
  });
  asio::async_read(*socket, asio::buffer(&hs->hello, sizeof hs->hello),
                   [this, hs](const boost::system::error_code& ec, std::size_t) {
                     if (hs->settled) return;  // refused for its silence (and closed) already
                     hs->settled = true;
                     hs->timer.cancel();
                     if (ec) {
                       refuse(hs->socket, "a connection that closed before its hello: " + ec.message());
                       return;
                     }
                     on_hello(hs);
                   });
}

void TcpNetwork::Impl::on_hello(const std::shared_ptr<Handshake>& hs) {
  wire::Verdict verdict = wire::check_hello(hs->hello, options.identity);
  const int from = hs->hello.from;
  if (verdict == wire::Verdict::kAccepted) {
    std::lock_guard lock(mutex);
    Link& link = link_to(from);
    if (link.state == Link::State::kUp || link.state == Link::State::kLost ||
        link.state == Link::State::kConnecting) {
      verdict = wire::Verdict::kDuplicate;
    } else {
      link.state = Link::State::kConnecting;  // reserved for this connection until its ack is out
    }
  }
  hs->ack.verdict = static_cast<std::uint32_t>(verdict);
  const bool refused_it = verdict != wire::Verdict::kAccepted;
  // Counted before the answer goes out: whoever reads the refusal finds it counted.
  if (refused_it) count_refusal(wire::describe(verdict, hs->hello, options.identity));
  asio::async_write(*hs->socket, asio::buffer(&hs->ack, sizeof hs->ack),
                    [this, hs, from, refused_it](const boost::system::error_code& ec, std::size_t) {
                      if (refused_it) {
                        drop_handshake(hs->socket);
                      } else if (ec) {
                        lose(from, "rank " + std::to_string(from) + "'s connection failed during its handshake: " +
                                       ec.message());
                        drop_handshake(hs->socket);
                      } else {
                        up(from, hs->socket);
                      }
                    });
}

void TcpNetwork::Impl::refuse(const Socket& socket, const std::string& why) {
  count_refusal(why);
  drop_handshake(socket);
}

void TcpNetwork::Impl::count_refusal(const std::string& why) {
  const auto n = ++refused;
  log()->warn("communicator {}: refused {} (refusal {})", name(), why, n);
}

void TcpNetwork::Impl::drop_handshake(const Socket& socket) {
  {
    std::lock_guard lock(mutex);
    handshaking.erase(socket);
  }
  close_hard(*socket);
}

bool TcpNetwork::Impl::start_connect(int peer, Clock::time_point deadline, const std::function<bool()>& stop) {
  const std::string key = wire::record_key(peer);
  elastic::Backoff poll({.initial = Millis(2), .max = Millis(100), .multiplier = 2.0, .jitter = 0.0});
  std::string why;
  bool timed_out = false;
  std::optional<wire::Address> address;
  for (;;) {
    if (is_dead()) return true;  // every operation fails with the network
    if (stop && stop()) return false;
    try {
      const auto value = options.store->get(key);
      if (value) {
        address = wire::parse_record(*value);
        if (!address) why = "rank " + std::to_string(peer) + "'s address record is not host:port: '" + *value + "'";
        break;
      }
    } catch (const RecoverableError& e) {  // the store is unreachable: retry until the deadline
      why = e.what();
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      timed_out = true;
      why = "rank " + std::to_string(peer) + " published no address within " +
            std::to_string(options.timeout.count()) + " ms" + (why.empty() ? "" : " (" + why + ")");
      break;
    }
    // The record is read again after the backoff; `stop` is asked meanwhile every kStopCheck.
    const auto wake = now + std::min<Clock::duration>(poll.next(), deadline - now);
    for (auto at = now; at < wake; at = Clock::now()) {
      std::this_thread::sleep_for(std::min<Clock::duration>(kStopCheck, wake - at));
      if (stop && stop()) return false;
    }
  }
  std::vector<tcp::endpoint> endpoints;
  if (address) {
    try {
      endpoints = resolve(address->host, address->port);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (endpoints.empty()) {
    lose(peer, why, timed_out);
    return true;
  }
  asio::post(io, [this, peer, endpoints] { connect_on_io(peer, endpoints); });
  return true;
}

void TcpNetwork::Impl::connect_on_io(int peer, const std::vector<tcp::endpoint>& endpoints) {
  auto socket = std::make_shared<tcp::socket>(io);
  {
    std::lock_guard lock(mutex);
    if (dead) return;
    handshaking.insert(socket);
  }
  auto hs = std::make_shared<Handshake>(socket);
  hs->hello = wire::hello_for(options.identity, peer);
  const std::string where = "rank " + std::to_string(peer) + " at " + endpoints.front().address().to_string() + ":" +
                            std::to_string(endpoints.front().port());
  asio::async_connect(*socket, endpoints, [this, hs, peer, where](const boost::system::error_code& ec,
                                                                   const tcp::endpoint&) {
    if (ec) return handshake_failed(peer, hs->socket, "cannot connect to " + where + ": " + ec.message());
    asio::async_write(*hs->socket, asio::buffer(&hs->hello, sizeof hs->hello),
                      [this, hs, peer, where](const boost::system::error_code& ec, std::size_t) {
                        if (ec) return handshake_failed(peer, hs->socket, "hello to " + where + ": " + ec.message());
                        asio::async_read(*hs->socket, asio::buffer(&hs->ack, sizeof hs->ack),
                                         [this, hs, peer, where](const boost::system::error_code& ec, std::size_t) {
                                           on_ack(peer, hs, where, ec);
                                         });
                      });
  });
}

void TcpNetwork::Impl::on_ack(int peer, const std::shared_ptr<Handshake>& hs, const std::string& where,
                              const boost::system::error_code& ec) {
  if (ec) return handshake_failed(peer, hs->socket, "no answer to the hello from " + where + ": " + ec.message());
  if (hs->ack.magic != wire::kMagic) {
    return handshake_failed(peer, hs->socket, where + " answered with garbage (not an hdp rank)");
  }
  if (hs->ack.verdict != static_cast<std::uint32_t>(wire::Verdict::kAccepted)) {
    return handshake_failed(peer, hs->socket,
                            where + " refused the connection: " + wire::verdict_name(hs->ack.verdict));
  }
  up(peer, hs->socket);
}

void TcpNetwork::Impl::handshake_failed(int peer, const Socket& socket, const std::string& why) {
  drop_handshake(socket);
  lose(peer, why);
}

void TcpNetwork::Impl::up(int peer, const Socket& socket) {
  {
    std::lock_guard lock(mutex);
    handshaking.erase(socket);
    Link& link = link_to(peer);
    if (dead || link.state == Link::State::kLost) {
      close_hard(*socket);
      return;
    }
    boost::system::error_code ignored;
    socket->set_option(tcp::no_delay(true), ignored);  // small messages (descriptors, barriers) go at once
    link.socket = socket;
    link.state = Link::State::kUp;
    ++connections;
    changed.notify_all();
  }
  read_next(peer, socket);
  pump(peer);
}

void TcpNetwork::publish() {
  impl_->options.store->set_with_ttl(wire::record_key(impl_->rank), impl_->address, wire::kRecordTtl);
}

void TcpNetwork::republish() {
  if (dead()) return;
  try {
    publish();
  } catch (const std::exception& e) {
    log()->warn("communicator {}: rewriting its address record failed (next try in {} ms): {}", impl_->name(),
                impl_->options.record_refresh.count(), e.what());
  }
}

TcpNetwork::Millis TcpNetwork::record_refresh() const { return impl_->options.record_refresh; }

std::string TcpNetwork::address() const { return impl_->address; }

void TcpNetwork::connect_now(const std::vector<int>& peers, Clock::time_point deadline,
                             const std::function<bool()>& stop) {
  Impl& impl = *impl_;
  std::vector<int> mine;  // the ones this rank connects
  {
    std::lock_guard lock(impl.mutex);
    for (int peer : peers) {
      if (peer == impl.rank) continue;
      Link& link = impl.link_to(peer);
      if (link.state != Link::State::kNone) continue;
      if (wire::initiates(impl.rank, peer)) {
        link.state = Link::State::kConnecting;
        mine.push_back(peer);
      } else {
        link.state = Link::State::kAwaiting;
      }
    }
  }
  auto superseded = [&] {
    return PeerLost("connecting " + impl.name() + ": the generation was superseded before its neighbours connected");
  };
  for (int peer : mine) {
    if (!impl.start_connect(peer, deadline, stop)) throw superseded();
  }
  for (;;) {
    std::unique_lock lock(impl.mutex);
    if (impl.dead) {
      impl.changed.wait(lock, [&] { return impl.closed; });
      throw PeerLost("connecting " + impl.name() + ": " + impl.reason);
    }
    std::vector<int> waiting;
    for (int peer : peers) {
      if (peer == impl.rank) continue;
      const Link& link = impl.link_to(peer);
      if (link.state == Link::State::kLost) {
        const std::string why = "connecting " + impl.name() + ": " + link.why;
        if (link.timed_out) throw TimeoutError(why);
        throw PeerLost(why);
      }
      if (link.state != Link::State::kUp) waiting.push_back(peer);
    }
    if (waiting.empty()) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string ranks = join(waiting, ", ", [](int peer) { return std::to_string(peer); });
      throw TimeoutError("connecting " + impl.name() + ": rank(s) " + ranks + " not connected within " +
                         std::to_string(impl.options.timeout.count()) + " ms");
    }
    impl.changed.wait_until(lock, std::min(deadline, now + kStopCheck));
    lock.unlock();
    if (stop && stop()) throw superseded();
  }
}

}  // namespace hdp::mesh
