#include "mesh/comm/tcp_network.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "elastic/backoff.h"

namespace hdp::mesh {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Socket = std::shared_ptr<tcp::socket>;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// A message that arrived before its recv was posted: kept here until one is.
struct Unexpected {
  std::vector<std::byte> data;
  bool complete = false;
  std::shared_ptr<NetOp> claimed;  // a recv posted while the bytes were still arriving
};

// A message larger than this with no recv posted for it is a protocol error (a peer's garbage),
// not something to allocate.
constexpr std::uint64_t kMaxUnexpectedBytes = std::uint64_t{1} << 36;

// How long an accepted connection may take to say hello before it is closed (and counted as
// refused). A rank writes its hello as soon as its connect completes.
constexpr Millis kHelloLimit{10000};

// The connection to one peer.
struct Link {
  enum class State { kNone, kConnecting, kAwaiting, kUp, kLost };
  // Guarded by the network's mutex.
  State state = State::kNone;
  Socket socket;  // once up
  std::deque<std::shared_ptr<NetOp>> sends;  // the front one is being written when `writing`
  bool writing = false;
  std::map<std::uint64_t, std::deque<std::shared_ptr<NetOp>>> recvs;
  std::map<std::uint64_t, std::deque<std::shared_ptr<Unexpected>>> unexpected;
  std::shared_ptr<NetOp> reading;  // the recv whose bytes are being read now
  std::shared_ptr<Unexpected> reading_early;  // or the early message (a recv may have claimed it)
  std::string why;                 // kLost: the reason
  bool timed_out = false;          // kLost because its record did not appear in time
  // The I/O thread's own.
  wire::FrameHeader incoming;
};

void close_hard(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);  // RST: the peer fails at once
  socket.close(ignored);
}

std::vector<tcp::endpoint> resolve(const std::string& host, std::uint16_t port) {
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

}  // namespace

struct TcpNetwork::Impl {
  explicit Impl(Options o)
      : options(std::move(o)), work(asio::make_work_guard(io)), acceptor(io),
        links(static_cast<std::size_t>(options.identity.size)) {}

  // The link to `peer`, made on first use: a rank talks to a few peers of many, and a Link is a
  // few hundred bytes (ranks as threads of one process would otherwise hold N^2 of them). Made
  // under the mutex; a Link never moves once made, so the I/O thread, which only touches links
  // that are up (made before), may look it up without the mutex.
  Link& link_to(int peer) {
    auto& slot = links[static_cast<std::size_t>(peer)];
    if (!slot) slot = std::make_unique<Link>();
    return *slot;
  }

  const Options options;
  const int rank = options.identity.rank;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  tcp::acceptor acceptor;
  std::string address;
  std::thread thread;
  std::atomic<std::thread::id> io_thread_id{};

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::unique_ptr<Link>> links;  // by peer; made on first use (link_to())
  bool dead = false;
  bool closed = false;   // dead, and every socket closed: no buffer is touched any more
  bool stopped = false;  // the I/O thread is stopping or gone
  std::string reason;
  std::set<Socket> handshaking;  // connections not up yet (either side): closed by fail()
  std::atomic<std::int64_t> refused{0}, connections{0};
  std::atomic<std::int64_t> bytes_sent{0};  // message payloads written to sockets (frame headers not counted)

  std::string name() const {
    return "rank " + std::to_string(rank) + " of " + std::to_string(options.identity.size);
  }

  // ---- listening -------------------------------------------------------------------------------
  void listen() {
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

  void accept_next() {
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

  struct Handshake {
    Socket socket;
    wire::Hello hello;
    wire::Ack ack;
    asio::steady_timer timer;
    bool settled = false;  // the hello came, or the limit passed (whichever first; the I/O thread's)
    explicit Handshake(Socket s) : socket(std::move(s)), timer(socket->get_executor()) {}
  };

  // The listener's side of a handshake: read the hello (within kHelloLimit), check it, answer.
  void on_accepted(Socket socket) {
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

  void on_hello(const std::shared_ptr<Handshake>& hs) {
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

  // Closes a connection the listener will not take, and counts it.
  void refuse(const Socket& socket, const std::string& why) {
    count_refusal(why);
    drop_handshake(socket);
  }

  void count_refusal(const std::string& why) {
    const auto n = ++refused;
    log()->warn("communicator {}: refused {} (refusal {})", name(), why, n);
  }

  void drop_handshake(const Socket& socket) {
    {
      std::lock_guard lock(mutex);
      handshaking.erase(socket);
    }
    close_hard(*socket);
  }

  // ---- connecting ------------------------------------------------------------------------------
  // The lower rank's side, on the thread that asked: read the peer's record (polling the store),
  // then hand the connect to the I/O thread. Returns false when `stop` said so (nothing started).
  bool start_connect(int peer, Clock::time_point deadline, const std::function<bool()>& stop) {
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
      std::this_thread::sleep_for(std::min<Clock::duration>(poll.next(), deadline - now));
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

  void connect_on_io(int peer, const std::vector<tcp::endpoint>& endpoints) {
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

  void on_ack(int peer, const std::shared_ptr<Handshake>& hs, const std::string& where,
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

  void handshake_failed(int peer, const Socket& socket, const std::string& why) {
    drop_handshake(socket);
    lose(peer, why);
  }

  // A connection completed its handshake: messages flow.
  void up(int peer, const Socket& socket) {
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

  // ---- messages --------------------------------------------------------------------------------
  void read_next(int peer, const Socket& socket) {
    Link& link = link_to(peer);
    asio::async_read(*socket, asio::buffer(&link.incoming, sizeof link.incoming),
                     [this, peer, socket](const boost::system::error_code& ec, std::size_t) {
                       if (ec) return lose(peer, closed_why(peer, ec));
                       on_header(peer, socket);
                     });
  }

  std::string closed_why(int peer, const boost::system::error_code& ec) const {
    if (ec == asio::error::eof) return "rank " + std::to_string(peer) + " closed its connection";
    return "the connection to rank " + std::to_string(peer) + " failed: " + ec.message();
  }

  void on_header(int peer, const Socket& socket) {
    Link& link = link_to(peer);
    const wire::FrameHeader header = link.incoming;
    std::shared_ptr<NetOp> op;
    std::shared_ptr<Unexpected> early;
    std::byte* target = nullptr;
    std::string error;
    {
      std::lock_guard lock(mutex);
      if (dead || link.state != Link::State::kUp) return;
      auto& queue = link.recvs[header.slot];
      if (!queue.empty()) {
        op = queue.front();
        queue.pop_front();
        if (op->bytes != header.bytes) {
          error = "rank " + std::to_string(peer) + " sent " + std::to_string(header.bytes) + " bytes on slot " +
                  std::to_string(header.slot) + " for a recv of " + std::to_string(op->bytes) + " bytes";
        }
        target = op->data;
        link.reading = op;
      } else if (header.bytes > kMaxUnexpectedBytes) {
        error = "rank " + std::to_string(peer) + " announced a message of " + std::to_string(header.bytes) +
                " bytes on slot " + std::to_string(header.slot);
      } else {
        early = std::make_shared<Unexpected>();
        early->data.resize(header.bytes);
        target = early->data.data();
        link.unexpected[header.slot].push_back(early);
        link.reading_early = early;
      }
    }
    if (!error.empty()) return fail(error);
    auto done = [this, peer, socket, op, early](const boost::system::error_code& ec, std::size_t) {
      if (ec) return lose(peer, closed_why(peer, ec));
      on_payload(peer, op, early);
      read_next(peer, socket);
    };
    if (header.bytes == 0) return done({}, 0);
    asio::async_read(*socket, asio::buffer(target, header.bytes), std::move(done));
  }

  void on_payload(int peer, const std::shared_ptr<NetOp>& op, const std::shared_ptr<Unexpected>& early) {
    std::lock_guard lock(mutex);
    Link& link = link_to(peer);
    if (op) {
      if (op->state == NetOp::State::kPending) op->state = NetOp::State::kDone;
      link.reading.reset();
    }
    if (early) {
      early->complete = true;
      if (early->claimed) {
        if (!early->data.empty()) std::memcpy(early->claimed->data, early->data.data(), early->data.size());
        early->claimed->state = NetOp::State::kDone;
        early->claimed.reset();
      }
      link.reading_early.reset();
    }
    changed.notify_all();
  }

  // Writes the next queued send of `peer`, if its connection is up and idle.
  void pump(int peer) {
    Link& link = link_to(peer);
    std::shared_ptr<NetOp> op;
    Socket socket;
    {
      std::lock_guard lock(mutex);
      if (dead || link.state != Link::State::kUp || link.writing || link.sends.empty()) return;
      op = link.sends.front();
      link.writing = true;
      socket = link.socket;
    }
    op->header = {op->slot, op->bytes};
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(&op->header, sizeof op->header),
                                                    asio::buffer(op->data, op->bytes)};
    asio::async_write(*socket, buffers, [this, peer, op](const boost::system::error_code& ec, std::size_t) {
      if (ec) return lose(peer, closed_why(peer, ec));
      bytes_sent += static_cast<std::int64_t>(op->bytes);
      {
        std::lock_guard lock(mutex);
        Link& link = link_to(peer);
        link.writing = false;
        if (!link.sends.empty() && link.sends.front() == op) link.sends.pop_front();
        if (op->state == NetOp::State::kPending) op->state = NetOp::State::kDone;
        changed.notify_all();
      }
      pump(peer);
    });
  }

  // ---- failures --------------------------------------------------------------------------------
  static void fail_op(const std::shared_ptr<NetOp>& op, const std::string& why, bool timed_out = false) {
    if (op && op->state == NetOp::State::kPending) {
      op->state = NetOp::State::kFailed;
      op->error = why;
      op->timed_out = timed_out;
    }
  }

  // Fails everything queued on a link and forgets it; returns its socket. Under the mutex.
  Socket clear_link(Link& link, const std::string& why, bool timed_out = false) {
    for (auto& op : link.sends) fail_op(op, why, timed_out);
    for (auto& [slot, queue] : link.recvs) {
      for (auto& op : queue) fail_op(op, why, timed_out);
    }
    // Messages that arrived whole stay: a recv posted later still gets them (a peer that sent its
    // last message and closed, at the end of a generation). One cut off mid-way is dropped.
    for (auto& [slot, queue] : link.unexpected) {
      std::erase_if(queue, [](const std::shared_ptr<Unexpected>& early) { return !early->complete; });
    }
    fail_op(link.reading, why);
    if (link.reading_early) fail_op(link.reading_early->claimed, why);
    link.sends.clear();
    link.recvs.clear();
    link.reading.reset();
    link.reading_early.reset();
    link.writing = false;
    return std::move(link.socket);
  }

  // The peer is gone: its operations fail, later posts to it throw. On the I/O thread when the
  // link has a socket (only that thread touches sockets).
  void lose(int peer, const std::string& why, bool timed_out = false) {
    Socket socket;
    {
      std::lock_guard lock(mutex);
      Link& link = link_to(peer);
      if (dead || link.state == Link::State::kLost) return;
      link.state = Link::State::kLost;
      link.why = why;
      link.timed_out = timed_out;
      socket = clear_link(link, why, timed_out);
      changed.notify_all();
    }
    if (socket) close_hard(*socket);
    log()->debug("communicator {}: lost rank {}: {}", name(), peer, why);
  }

  bool is_dead() const {
    std::lock_guard lock(mutex);
    return dead;
  }

  bool on_io_thread() const { return std::this_thread::get_id() == io_thread_id; }

  void fail(const std::string& why) {
    bool inline_close = false;
    {
      std::unique_lock lock(mutex);
      if (dead) {
        if (!on_io_thread()) changed.wait(lock, [&] { return closed; });
        return;
      }
      dead = true;
      reason = why;
      inline_close = stopped || on_io_thread();
    }
    log()->warn("communicator {}: {}", name(), why);
    if (inline_close) {
      close_all(true);
      return;
    }
    asio::post(io, [this] { close_all(true); });
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return closed; });
  }

  // On the I/O thread (or once it is gone): closes the listener and every socket, fails what is
  // queued, and marks the network closed.
  void close_all(bool hard) {
    std::vector<Socket> sockets;
    {
      std::lock_guard lock(mutex);
      const std::string why = reason.empty() ? "the communicator was closed" : reason;
      for (auto& link : links) {
        if (!link) continue;
        if (auto s = clear_link(*link, why)) sockets.push_back(std::move(s));
        link->unexpected.clear();
      }
      sockets.insert(sockets.end(), handshaking.begin(), handshaking.end());
      handshaking.clear();
    }
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& s : sockets) {
      if (hard) {
        close_hard(*s);
      } else {
        s->close(ignored);
      }
    }
    {
      std::lock_guard lock(mutex);
      closed = true;
      changed.notify_all();
    }
    if (options.on_closed) options.on_closed();
  }

  // Whether any operation is queued or moving. Under the mutex.
  bool busy() const {
    for (const auto& link : links) {
      if (!link) continue;
      if (!link->sends.empty() || link->reading || link->reading_early) return true;
      for (const auto& [slot, queue] : link->recvs) {
        if (!queue.empty()) return true;
      }
    }
    return false;
  }

  void shutdown() {
    {
      std::lock_guard lock(mutex);
      if (stopped) return;
    }
    if (thread.joinable()) {
      asio::post(io, [this] {
        bool gentle = false;
        {
          std::lock_guard lock(mutex);
          gentle = !dead && !busy();
          if (!dead) {
            dead = true;
            reason = "the communicator was destroyed";
          }
        }
        close_all(!gentle);
        io.stop();
      });
      thread.join();
    }
    std::lock_guard lock(mutex);
    stopped = true;
    if (!dead) {
      dead = true;
      reason = "the communicator was destroyed";
    }
    closed = true;
    changed.notify_all();
  }
};

TcpNetwork::TcpNetwork(Options options) {
  const auto& id = options.identity;
  if (id.size < 1 || id.rank < 0 || id.rank >= id.size) {
    throw InvalidArgument("communicator: rank " + std::to_string(id.rank) + " is not in [0, " + std::to_string(id.size) +
                          ")");
  }
  if (!options.store) throw InvalidArgument("communicator bootstrap: no store");
  impl_ = std::make_unique<Impl>(std::move(options));
  impl_->listen();
  impl_->accept_next();
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] {
    impl->io_thread_id = std::this_thread::get_id();
    block_sigpipe_in_this_thread();
    impl->io.run();
  });
}

TcpNetwork::~TcpNetwork() {
  if (impl_) impl_->shutdown();
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
    std::string waiting;
    for (int peer : peers) {
      if (peer == impl.rank) continue;
      const Link& link = impl.link_to(peer);
      if (link.state == Link::State::kLost) {
        const std::string why = "connecting " + impl.name() + ": " + link.why;
        if (link.timed_out) throw TimeoutError(why);
        throw PeerLost(why);
      }
      if (link.state != Link::State::kUp) waiting += (waiting.empty() ? "" : ", ") + std::to_string(peer);
    }
    if (waiting.empty()) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError("connecting " + impl.name() + ": rank(s) " + waiting + " not connected within " +
                         std::to_string(impl.options.timeout.count()) + " ms");
    }
    impl.changed.wait_until(lock, std::min(deadline, now + Millis(100)));
    lock.unlock();
    if (stop && stop()) throw superseded();
  }
}

std::shared_ptr<NetOp> TcpNetwork::post(bool send, int peer, std::uint64_t slot, std::byte* data, std::size_t bytes,
                                        std::shared_ptr<const void> keep, const std::string& what) {
  Impl& impl = *impl_;
  auto op = std::make_shared<NetOp>();
  op->send = send;
  op->peer = peer;
  op->slot = slot;
  op->data = data;
  op->bytes = bytes;
  op->keep = std::move(keep);
  bool connect = false, pump = false;
  std::string mismatch;
  {
    std::unique_lock lock(impl.mutex);
    if (impl.dead) {
      impl.changed.wait(lock, [&] { return impl.closed; });
      throw PeerLost(what + ": " + impl.reason);
    }
    Link& link = impl.link_to(peer);
    const bool arrived = !send && !link.unexpected[slot].empty();  // (whole, if the link is lost)
    if (link.state == Link::State::kLost && !arrived) {
      // Like a failed wait: the communicator dies with it (its other peers then fail fast).
      const std::string why = what + ": peer lost: " + link.why;
      lock.unlock();
      impl.fail(why);
      throw PeerLost(why);
    }
    if (send) {
      link.sends.push_back(op);
      pump = link.state == Link::State::kUp;
    } else {
      auto& early = link.unexpected[slot];
      if (early.empty()) {
        link.recvs[slot].push_back(op);
      } else {
        auto message = early.front();
        early.pop_front();
        if (message->data.size() != bytes) {
          mismatch = what + ": rank " + std::to_string(peer) + " sent " + std::to_string(message->data.size()) +
                     " bytes for a recv of " + std::to_string(bytes) + " bytes";
        } else if (message->complete) {
          if (bytes > 0) std::memcpy(data, message->data.data(), bytes);
          op->state = NetOp::State::kDone;
        } else {
          message->claimed = op;
        }
      }
    }
    if (link.state == Link::State::kNone) {
      connect = wire::initiates(impl.rank, peer);
      link.state = connect ? Link::State::kConnecting : Link::State::kAwaiting;
    }
  }
  if (!mismatch.empty()) {
    impl.fail(mismatch);
    throw InvalidArgument(mismatch);
  }
  if (pump) asio::post(impl.io, [&impl, peer] { impl.pump(peer); });
  if (connect) impl.start_connect(peer, Clock::now() + impl.options.timeout, {});
  return op;
}

TcpNetwork::Outcome TcpNetwork::wait(const NetOp& op, Clock::time_point deadline) {
  Impl& impl = *impl_;
  std::unique_lock lock(impl.mutex);
  impl.changed.wait_until(lock, deadline, [&] { return op.state != NetOp::State::kPending || impl.dead; });
  if (op.state == NetOp::State::kDone) return Outcome::kDone;
  if (impl.dead) {
    impl.changed.wait(lock, [&] { return impl.closed; });
    return op.state == NetOp::State::kDone ? Outcome::kDone : Outcome::kDead;
  }
  return op.state == NetOp::State::kFailed && !op.timed_out ? Outcome::kFailed : Outcome::kTimedOut;
}

void TcpNetwork::fail(const std::string& why) { impl_->fail(why); }

bool TcpNetwork::dead() const { return impl_->is_dead(); }

std::string TcpNetwork::reason() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->reason;
}

void TcpNetwork::shutdown() { impl_->shutdown(); }

std::int64_t TcpNetwork::refused() const { return impl_->refused.load(); }
std::int64_t TcpNetwork::connections() const { return impl_->connections.load(); }
std::int64_t TcpNetwork::bytes_sent() const { return impl_->bytes_sent.load(); }

}  // namespace hdp::mesh
