// File: mesh/comm/tcp_communicator.h
//
// Communicator (communicator.h) over TCP, for CPU tensors only (a CUDA tensor is an
// InvalidArgument; the GPU communicator is a separate implementation). Built by
// mesh/comm/communicator_factory.h.
//
// Files: tcp_communicator.cc (the contract: failure and teardown, posting and waiting, the worker
// queue, the Work handles), tcp_network.{h,cc} (the connections: one listening socket per rank,
// a connection per peer made on first use, framed messages matched per peer and slot; Boost.Asio),
// wire.{h,cc} (the handshake, the frames, the address record), collectives.{h,cc} (the algorithms,
// over a transport of hdp's own that tcp_communicator.cc implements with the network),
// reductions.{h,cc}, descriptor.{h,cc}, checks.{h,cc} (argument checks), self_messages.{h,cc}
// (messages to this rank itself).
//
// Bootstrap: linear in the ranks. connect() listens on `hostname` (port chosen by the system),
// publishes one record in the store (its address, "host:port"), and connects its two ring
// neighbours (every collective starts with them); every other peer is connected on the first
// message to or from it. Of a pair, the lower rank connects, reading the higher rank's record;
// the connection's hello names the group (a hash of the store namespace: job, generation,
// channel), the generation and both ranks, and the listener refuses (and counts, refused()) one
// from another group, generation or size, or meant for another rank. So a generation costs the
// store one write per rank and a few reads (the records of the peers it connects), whatever the
// size. (Gloo 0.5.0's full-mesh rendezvous, which this replaces, had every rank write an address
// for each peer and read every other rank's: O(N^2) commands and O(N^3) bytes; docs/data-plane.md
// says why Gloo could not connect one pair at a time with such a handshake.)
//
// Point to point. isend/irecv post one message under the slot 0x10<<56 | tag and return at once
// (the first message to a new peer may first wait for its record to appear in the store);
// Work::wait(t) waits for that one message. Sends are written straight from the tensor, and
// complete once the bytes are in the kernel's socket buffer; a recv is read straight into its
// tensor when it was posted before the message arrived (else the message waits in memory). A
// message to or from this rank itself is matched in memory.
//   Sizes must come from a layout both sides share: a message whose size differs from the recv it
//   matches fails the communicator, naming both sizes (InvalidArgument when the recv is posted
//   after the message arrived, PeerLost to the waiters otherwise).
//
// Collectives are hdp's own (collectives.h): ring reduce-scatter and ring allgather (uneven
// counts, zeros included), allreduce as reduce-scatter plus allgather over an even split of the
// buffer (the result is bit-identical on every rank: each block is reduced on one rank only), a
// binomial tree broadcast, a dissemination barrier. Reductions: f32, f64, i32, i64 with sum, max,
// min.
//   - They run in start order on one worker thread of the communicator; the i-forms validate their
//     arguments on the calling thread, take the next sequence number there (program order), and
//     queue the job. A collective's slots carry its sequence number, so two collectives never
//     share a slot.
//   - Each begins with a fixed-size descriptor (kind, dtype, op, root, sequence number, element
//     count and a hash of the counts vector) exchanged with both ring neighbours on one slot.
//     Ranks whose descriptors differ (different sizes, counts, roots, or a rank that skipped a
//     collective) throw InvalidArgument naming both values, and the communicator dies (its peers
//     then see PeerLost).
//   - Deadline: a collective runs for at most timeout() (the communicator's default) from the
//     moment the worker starts it; Work::wait(t) and the blocking forms' timeout bound the caller's
//     wait and, when they pass first, kill the communicator with TimeoutError. A longer t does not
//     extend the collective: build the communicator with the longest timeout its collectives need.
//   - Work::wait(t) with t <= 0 uses timeout().
//
// Failure. A peer's connection that closes or resets fails, at once, every operation with that
// peer (even one whose bytes are moving); its waiter then fails the communicator with PeerLost. A
// peer that closes while nothing involves it fails nothing (the end of a generation): the next
// operation with it does. A deadline that passes throws TimeoutError. After a failure, or abort(),
// the communicator is dead:
//   1. its connections are closed hard (RST) first, so that its peers fail fast, and from then on
//      no byte is read into or written from any buffer;
//   2. then every wait still in progress is woken and throws PeerLost naming the reason (unless
//      its operation had completed), and every later call throws PeerLost at once.
//   So when a call has thrown, the caller may reuse or free its buffers. abort() unblocks a waiting
//   call within moments (one pass of the I/O thread).
// Destruction: a healthy communicator with nothing in flight closes its connections gently (FIN,
// so data a peer has not read yet still arrives); one with operations in flight or queued is
// aborted first.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "elastic/store.h"
#include "mesh/comm/communicator.h"
#include "mesh/comm/wire.h"

namespace hdp::mesh {

struct TcpConnectOptions {
  int rank = 0;
  int size = 1;
  std::string hostname = "127.0.0.1";  // the address peers reach this rank at
  // A namespace of its own for every communicator (and every rebuilt one): the address records
  // live there, and `group` names it.
  std::shared_ptr<elastic::Store> store;
  // What the connection handshake checks: a hash of `group` (the namespace's name: job,
  // generation, channel) and the generation number.
  std::string group;
  std::int64_t generation = 0;
  // Asked while the bootstrap waits for a peer; true: give up with PeerLost. May be empty.
  std::function<bool()> superseded;
  std::chrono::milliseconds timeout{30000};  // the bootstrap, and every later call's default
  // Connect the ring neighbours in connect() (and wait for them there, where `superseded` is
  // asked); false: publish the record and return, every pair connects on its first message.
  bool connect_neighbours = true;
  // How often the address record is rewritten (its TTL is wire::kRecordTtl); tests shorten it.
  std::chrono::milliseconds record_refresh = wire::kRecordRefresh;
};

class TcpCommunicator final : public Communicator {
 public:
  // Publishes this rank's address and connects its ring neighbours (unless
  // options.connect_neighbours is false). TimeoutError when they do not arrive within the
  // timeout, PeerLost when `superseded` says so or a neighbour fails or refuses the connection,
  // InvalidArgument for a bad rank, size, timeout or store, or an address it
  // cannot listen on.
  static std::unique_ptr<TcpCommunicator> connect(const TcpConnectOptions& options);

  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Duration timeout() const override;

  std::unique_ptr<Work> isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream = {}) override;
  // `output` may be a view of `input`'s own block (counts[rank()] elements at its offset), and
  // must not overlap the rest of `input`.
  std::unique_ptr<Work> ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                        std::span<const std::int64_t> counts, ReduceOp op,
                                        Stream stream = {}) override;
  std::unique_ptr<Work> iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                   std::span<const std::int64_t> counts, Stream stream = {}) override;
  std::unique_ptr<Work> ibroadcast(const ops::Tensor& buffer, int root, Stream stream = {}) override;
  std::unique_ptr<Work> ibarrier() override;

  void abort(const std::string& reason) override;
  bool dead() const override;
  std::string peer_lost() const override;

  // Connection attempts this rank refused (another group, generation or size, meant for another
  // rank, a duplicate, garbage), and connections made, since connect().
  std::int64_t refused_connections() const;
  std::int64_t connections() const;
  // Payload bytes this rank has written to its peers' sockets (collectives and messages alike).
  std::int64_t bytes_sent() const;

  struct Impl;  // tcp_communicator.cc

 private:
  explicit TcpCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the Work handles, which may outlive this object
};

}  // namespace hdp::mesh
