// File: mesh/comm/tcp_network_impl.h
//
// The inside of a TcpNetwork (tcp_network.h): its sockets, its links to the peers and their state
// machine, shared by the two files that implement it:
//   tcp_connect.cc  making connections: listening, both sides of the handshake, reading a peer's
//                   address record, connect_now();
//   tcp_network.cc  using them: the messages' reads and writes on the I/O thread, losing a peer,
//                   failing and shutting down the network, post() and wait().
//
// A link's states: kNone (never used) -> kConnecting (this rank connects, or the listener reserved
// it for a hello it accepted) or kAwaiting (the peer connects) -> kUp (messages flow) -> kLost (its
// operations failed; a later post fails the network). Everything a link holds is guarded by
// `mutex`, except what only the I/O thread touches (marked).
//
// An internal header of mesh/comm, included only by those two files: the one place besides them
// where Boost.Asio's types appear.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mesh/comm/tcp_network.h"
#include "mesh/comm/wire.h"

namespace hdp::mesh {

struct TcpNetwork::Impl {
  using tcp = boost::asio::ip::tcp;
  using Socket = std::shared_ptr<tcp::socket>;

  // A message larger than this with no recv posted for it is a protocol error (a peer's garbage),
  // not something to allocate.
  static constexpr std::uint64_t kMaxUnexpectedBytes = std::uint64_t{1} << 36;

  // How long an accepted connection may take to say hello before it is closed (and counted as
  // refused). A rank writes its hello as soon as its connect completes.
  static constexpr Millis kHelloLimit{10000};

  // A message that arrived before its recv was posted: kept here until one is.
  struct Unexpected {
    std::vector<std::byte> data;
    bool complete = false;
    std::shared_ptr<NetOp> claimed;  // a recv posted while the bytes were still arriving
  };

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
    bool goodbye = false;            // the peer said goodbye (wire::kGoodbyeSlot): its close is no loss
    // The I/O thread's own.
    wire::FrameHeader incoming;
  };

  // One connection's handshake (either side).
  struct Handshake {
    Socket socket;
    wire::Hello hello;
    wire::Ack ack;
    boost::asio::steady_timer timer;
    bool settled = false;  // the hello came, or the limit passed (whichever first; the I/O thread's)
    explicit Handshake(Socket s) : socket(std::move(s)), timer(socket->get_executor()) {}
  };

  explicit Impl(Options o)
      : options(std::move(o)), work(boost::asio::make_work_guard(io)), acceptor(io),
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

  std::string name() const {
    return "rank " + std::to_string(rank) + " of " + std::to_string(options.identity.size);
  }

  bool is_dead() const {
    std::lock_guard lock(mutex);
    return dead;
  }

  bool on_io_thread() const { return std::this_thread::get_id() == io_thread_id; }

  // Closes a socket with RST: the peer fails at once.
  static void close_hard(tcp::socket& socket);
  // The endpoints of `host` (an address, or a name to resolve); InvalidArgument when it has none.
  static std::vector<tcp::endpoint> resolve(const std::string& host, std::uint16_t port);

  // ---- listening and handshakes (tcp_connect.cc) --------------------------------------------------
  void listen();
  void accept_next();
  // The listener's side of a handshake: read the hello (within kHelloLimit), check it, answer.
  void on_accepted(Socket socket);
  void on_hello(const std::shared_ptr<Handshake>& hs);
  // Closes a connection the listener will not take, and counts it.
  void refuse(const Socket& socket, const std::string& why);
  void count_refusal(const std::string& why);
  void drop_handshake(const Socket& socket);
  // The lower rank's side, on the thread that asked: read the peer's record (polling the store),
  // then hand the connect to the I/O thread. Returns false when `stop` said so (nothing started).
  bool start_connect(int peer, Clock::time_point deadline, const std::function<bool()>& stop);
  void connect_on_io(int peer, const std::vector<tcp::endpoint>& endpoints);
  void on_ack(int peer, const std::shared_ptr<Handshake>& hs, const std::string& where,
              const boost::system::error_code& ec);
  void handshake_failed(int peer, const Socket& socket, const std::string& why);
  // A connection completed its handshake: messages flow.
  void up(int peer, const Socket& socket);

  // ---- messages (tcp_network.cc) ------------------------------------------------------------------
  void read_next(int peer, const Socket& socket);
  std::string closed_why(int peer, const boost::system::error_code& ec) const;
  void on_header(int peer, const Socket& socket);
  void on_payload(int peer, const std::shared_ptr<NetOp>& op, const std::shared_ptr<Unexpected>& early);
  // Writes the next queued send of `peer`, if its connection is up and idle.
  void pump(int peer);

  // ---- failures (tcp_network.cc) ------------------------------------------------------------------
  static void fail_op(const std::shared_ptr<NetOp>& op, const std::string& why, bool timed_out = false);
  // Fails everything queued on a link and forgets it; returns its socket. Under the mutex.
  Socket clear_link(Link& link, const std::string& why, bool timed_out = false);
  // The peer is gone: its operations fail, later posts to it throw. On the I/O thread when the
  // link has a socket (only that thread touches sockets).
  void lose(int peer, const std::string& why, bool timed_out = false);
  void fail(const std::string& why);
  // On the I/O thread (or once it is gone): closes the listener and every socket, fails what is
  // queued, and marks the network closed.
  void close_all(bool hard);
  // Whether any operation is queued or moving. Under the mutex.
  bool busy() const;
  void shutdown();

  const Options options;
  const int rank = options.identity.rank;
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
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
  std::string first_loss;  // the first peer connection that failed on its own, and why
  std::set<Socket> handshaking;  // connections not up yet (either side): closed by fail()
  std::atomic<std::int64_t> refused{0}, connections{0};
  std::atomic<std::int64_t> bytes_sent{0};  // message payloads written to sockets (frame headers not counted)
};

}  // namespace hdp::mesh
