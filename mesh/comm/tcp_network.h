// File: mesh/comm/tcp_network.h
//
// The connections of one communicator (tcp_communicator.h): one listening socket, whose address is
// the rank's one record in the store (wire.h), and a TCP connection to each peer it exchanges
// messages with, made on first use. Messages are framed (wire::FrameHeader) and matched per
// (peer, slot) in the order they were posted, like Gloo's unbound buffers; unlike Gloo, a message
// whose size differs from the posted recv is detected (the network fails naming both sizes).
//
// Connecting. The lower rank of a pair connects: on the first message posted for a peer it reads
// that peer's record (polling the store until it appears, bounded by the network's timeout, ended
// by fail() or by `stop`), then connects and says hello (wire::Hello: group, generation, from, to);
// the higher rank's listener checks the hello and acknowledges it, or refuses it (wrong group,
// generation, size or rank, a duplicate) and counts the refusal (refused()). Messages posted before
// the connection is up wait in its queue. The higher rank never reads a record.
//
// Threads. One I/O thread (Boost.Asio) does every socket operation: accepting, handshakes, and the
// reads and writes of messages, straight from and into the posted buffers (zero copy; a message
// that arrives before its recv is posted is kept in memory until it is). post() may be called from
// any thread; the record lookup of a new connection runs on the thread that posts its first
// message. Asio writes with MSG_NOSIGNAL, so no SIGPIPE.
//
// Failures. A connection that fails (EOF, reset, refused, an address that does not answer) loses
// its peer: the operations queued with it fail (NetOp::State::kFailed, with the reason), and a
// later post to it fails the network and throws PeerLost; until then other peers are not
// affected. fail(why) kills the whole network: every socket is closed hard (RST, so the peers fail
// fast), then every waiter is woken; from then on no byte is read into or written from any posted
// buffer, and every post throws PeerLost(why).
//
// An internal header of mesh/comm; no Asio type appears in it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "elastic/store.h"
#include "mesh/comm/collectives.h"
#include "mesh/comm/wire.h"

namespace hdp::mesh {

// One message in flight.
struct NetOp final : Transport::Message {
  enum class State { kPending, kDone, kFailed };
  bool send = false;
  int peer = -1;
  std::uint64_t slot = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::shared_ptr<const void> keep;  // owns the memory until the network no longer touches it
  wire::FrameHeader header;          // a send's, written before its bytes
  State state = State::kPending;     // guarded by the network's mutex
  std::string error;                 // kFailed: why
  bool timed_out = false;            // kFailed because a deadline passed (the peer's record never came)
};

class TcpNetwork {
 public:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;

  struct Options {
    wire::Identity identity;           // this rank's
    std::string hostname = "127.0.0.1";  // where it listens (port chosen by the system)
    std::shared_ptr<elastic::Store> store;  // the communicator's namespace: records live here
    Millis timeout{30000};             // how long a record lookup may wait
    Millis record_refresh = wire::kRecordRefresh;  // how often republish() is due
    // Called (from any thread, no lock held) once the network died and closed its sockets.
    std::function<void()> on_closed;
  };

  // Listens on options.hostname (InvalidArgument when it cannot) and starts the I/O thread.
  explicit TcpNetwork(Options options);
  // shutdown(), then the I/O thread is gone.
  ~TcpNetwork();
  TcpNetwork(const TcpNetwork&) = delete;
  TcpNetwork& operator=(const TcpNetwork&) = delete;

  // Writes this rank's record (its listening address, TTL wire::kRecordTtl) to the store: one SET.
  // (Not a commit that also reads the first peers' records: a commit is a Lua script on Redis,
  // which counts its inner commands too and costs more CPU than plain commands, and a peer's
  // record is often not written yet at that moment anyway.)
  void publish();
  std::string address() const;
  // publish() again, every record_refresh() while the network lives (the communicator's worker
  // calls it between collectives): a failure is logged, not thrown; nothing once it is dead.
  // During a store outage the call blocks for the store's retry budget, so a collective queued
  // meanwhile starts that much later (once per record_refresh at most).
  void republish();
  Millis record_refresh() const;

  // How often connect_now() asks `stop`: a rank that started connecting in a generation already
  // superseded (a worker that replaced a crashed one and saw the generation its predecessor was
  // in, before the new one was published) leaves it within this. `stop` is the caller's to keep
  // cheap (ElasticContext::changed reads the agent's channel, or the store at most every 100 ms).
  static constexpr Millis kStopCheck{20};

  // Connects the given peers now (the lower rank of each pair connects, the higher waits for it)
  // and waits until every one is up: PeerLost when one is lost or refused us, or when `stop`
  // (asked every kStopCheck on this thread) says so; TimeoutError at `deadline` (or when a peer's
  // record did not appear by then).
  void connect_now(const std::vector<int>& peers, Clock::time_point deadline, const std::function<bool()>& stop);

  // Queues one message (its connection is made first if need be). PeerLost when the network is
  // dead or the peer was lost; InvalidArgument when a message already received from the peer on
  // that slot has another size (the network is failed first).
  std::shared_ptr<NetOp> post(bool send, int peer, std::uint64_t slot, std::byte* data, std::size_t bytes,
                              std::shared_ptr<const void> keep, const std::string& what);

  enum class Outcome { kDone, kFailed, kDead, kTimedOut };
  // Waits until the operation completed or failed, the network died, or `deadline`.
  Outcome wait(const NetOp& op, Clock::time_point deadline);

  // Kills the network (see above); returns once every socket is closed. Idempotent: a later
  // caller returns once the first one's close is done.
  void fail(const std::string& why);
  bool dead() const;
  std::string reason() const;  // why it died; empty while alive
  // The first connection to a peer that failed on its own (EOF, reset, refused: not a deadline),
  // "rank <r>: <why>", whether or not a message waited on it; empty while none did.
  std::string first_loss() const;

  // Ends the network: gently (FIN, data already written still arrives) when it is alive, then stops
  // the I/O thread. Idempotent.
  void shutdown();

  // Connection attempts this rank's listener refused (and closed), counted since it started.
  std::int64_t refused() const;
  // Connections to peers made or accepted so far.
  std::int64_t connections() const;
  // Payload bytes of the messages written to peers so far (frame headers not counted).
  std::int64_t bytes_sent() const;

  struct Impl;  // tcp_network_impl.h

 private:
  std::unique_ptr<Impl> impl_;  // the I/O thread's handlers point into it; joined before it goes
};

}  // namespace hdp::mesh
