// File: mesh/comm/gloo_communicator.h
//
// Communicator (communicator.h) over Gloo 0.5.0's TCP transport, for CPU tensors only (a CUDA
// tensor is an InvalidArgument; the GPU communicator is a separate implementation). Built by
// mesh/comm/communicator_factory.h; no Gloo type appears outside gloo_communicator.cc,
// gloo_store.{h,cc}, bootstrap.{h,cc} and peer_monitor.{h,cc} (the last three are internal headers
// of mesh/comm).
//
// Files: gloo_communicator.cc (the core: failure and teardown, posting and waiting, the worker
// queue, the Work handles), bootstrap.{h,cc} (the rendezvous), peer_monitor.{h,cc} (the failure
// detector), collectives.{h,cc} (the algorithms, over a transport of hdp's own that the core
// implements with Gloo), reductions.{h,cc}, descriptor.{h,cc}, checks.{h,cc} (argument checks),
// self_messages.{h,cc} (messages to this rank itself).
//
// Point to point. isend/irecv post one Gloo unbound buffer (zero-copy: Gloo reads and writes the
// tensor's memory directly) under the slot 0x10<<56 | tag and return at once; Work::wait(t) waits
// for that one message. A message to or from this rank itself is matched in memory.
//   SIZES MUST COME FROM A LAYOUT BOTH SIDES SHARE. Gloo never checks them: a message smaller
//   than the posted recv completes it silently (the tail keeps its old bytes), and a message
//   LARGER than the posted recv makes Gloo's network thread call std::terminate() in the
//   receiving process. Nothing here can detect either for point to point.
//
// Collectives are hdp's own, written over unbound buffers so that every wait has hdp's deadline
// and abort() reaches every one of them: ring reduce-scatter and ring allgather (uneven counts,
// zeros included), allreduce as reduce-scatter plus allgather over an even split of the buffer
// (the result is bit-identical on every rank: each block is reduced on one rank only), a binomial
// tree broadcast, a dissemination barrier. Reductions: f32, f64, i32, i64 with sum, max, min.
//   - They run in start order on one worker thread of the communicator; the i-forms validate their
//     arguments on the calling thread, take the next sequence number there (program order), and
//     queue the job. A collective's slots carry its sequence number, so two collectives never
//     share a slot.
//   - Each begins with a fixed-size descriptor (kind, dtype, op, root, sequence number, element
//     count and a hash of the counts vector) exchanged with both ring neighbours on one slot.
//     Ranks whose descriptors differ (different sizes, counts, roots, or a rank that skipped a
//     collective) throw InvalidArgument naming both values, and the communicator dies (its peers
//     then see PeerLost): it never posts a recv smaller than what a peer may send.
//   - Deadline: a collective runs for at most timeout() (the communicator's default) from the
//     moment the worker starts it; Work::wait(t) and the blocking forms' timeout bound the caller's
//     wait and, when they pass first, kill the communicator with TimeoutError. A longer t does not
//     extend the collective: build the communicator with the longest timeout its collectives need.
//   - Work::wait(t) with t <= 0 uses timeout().
//
// Failure. Every Gloo exception is caught inside and becomes PeerLost (the peer closed or reset
// the connection, an I/O error) or TimeoutError (a deadline passed; Gloo then closes every
// connection of the context itself). After a failure, or abort(), the communicator is dead:
//   1. its connections are closed hard (RST) first, all of them in parallel, which also takes them
//      off Gloo's network thread: from then on no byte is read into or written from any buffer;
//   2. then every wait still in progress is woken (abortWaitRecv/abortWaitSend) and throws
//      PeerLost naming the reason (unless its operation had completed), and every later call
//      throws PeerLost at once.
//   So when a call has thrown, the caller may reuse or free its buffers. The Gloo buffers of
//   operations that never completed (and the tensors they point into) are kept until the
//   communicator is destroyed: Gloo's queues still name them, and destroying one while its
//   connection were open would make the network thread spin. One abort() unblocks a waiting call
//   within one tick of Gloo's network loop (10 ms) plus scheduling.
// A peer's death is noticed at once even mid-transfer (where Gloo itself would leave the wait to
// its timeout): a monitor thread keeps a 0-byte probe recv queued on every connection and, when a
// connection fails, aborts the waits of the operations with that peer (see peer_monitor.h). A peer
// that closes while nothing involves it (the end of a generation) fails nothing by itself.
// SIGPIPE, which Gloo's writes to a reset connection raise, is blocked in the threads that write
// (the worker, monitor and bootstrap threads, Gloo's network thread, and a caller's thread during a
// post), never ignored process-wide.
// Destruction: a healthy communicator with nothing in flight closes its connections gently (FIN,
// so data a peer has not read yet still arrives); one with operations in flight or queued is
// aborted first. Either way it is bounded: no wait is left that an abort does not end, and Gloo's
// teardown waits at most a few network-loop ticks per connection.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "elastic/store.h"
#include "mesh/comm/communicator.h"

namespace hdp::mesh {

struct GlooConnectOptions {
  int rank = 0;
  int size = 1;
  std::string hostname = "127.0.0.1";  // the address peers reach this rank at
  // A namespace of its own: Gloo's keys (rank_<r>, <r>) are write-once, so every communicator,
  // and every rebuilt one, needs a fresh prefix.
  std::shared_ptr<elastic::Store> store;
  // Asked while the bootstrap waits for a peer; true: give up with PeerLost. May be empty.
  std::function<bool()> superseded;
  std::chrono::milliseconds timeout{30000};  // the bootstrap, and every later call's default
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects to every peer (a full mesh). TimeoutError when the peers do not all arrive within
  // the timeout, PeerLost when `superseded` says so or a peer fails while connecting,
  // InvalidArgument for a bad rank, size or timeout.
  static std::unique_ptr<GlooCommunicator> connect(const GlooConnectOptions& options);

  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

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

  struct Impl;  // gloo_communicator.cc

 private:
  explicit GlooCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the Work handles, which may outlive this object
};

}  // namespace hdp::mesh
