// File: mesh/comm/communicator.h
//
// The data plane's communicator: one per generation (and one more, independent, for the
// checkpoint writer thread), over the generation's ranks 0..size()-1. The planner (plan.h) and
// this interface are the two halves of the dynamic mesh: a plan names rings of ranks, and the
// ring's members talk to each other through the one communicator of the generation (ByteScale
// §5.1: one global communicator, point-to-point between arbitrary ranks, no per-ring groups).
//
// Buffers are ops::Tensor: contiguous, with a dtype and a device, so an implementation on a GPU
// (NCCL) receives device memory and the `Stream` to order its work on; the CPU implementation
// (TcpCommunicator, tcp_communicator.h) ignores the stream.
//
// Contract, for every implementation (tests/mesh/communicator_conformance_test.cc runs one suite
// over each):
//  - Every call has a deadline: the blocking forms use `timeout` (the communicator's default
//    when zero), a handle's wait() the one it is given. Nothing blocks for ever.
//  - A peer that is gone (its process died, its connection closed) makes the calls that need it
//    throw PeerLost; a deadline that passes throws TimeoutError. Both are RecoverableError: the
//    caller abandons the generation and builds a new communicator for the next. After either,
//    this communicator is dead: every pending and later call throws PeerLost at once, and it
//    closes its connections so that its peers fail fast too instead of sitting out their timeouts.
//  - abort(reason), from any thread, does the same on purpose: every call waiting on this
//    communicator and every later one throws PeerLost naming the reason, promptly (the GPU issue
//    maps it onto ncclCommAbort).
//  - No third-party exception (Gloo's, NCCL's) ever leaves a method.
//  - Bad arguments (a rank out of range, a buffer whose size does not match the counts, counts
//    that do not have one entry per rank, a dtype the reduction cannot handle, a reserved tag)
//    throw InvalidArgument naming the value, before anything is sent. Sizes that differ across
//    ranks in a collective are detected where the implementation can (TcpCommunicator exchanges
//    a small descriptor of every collective with its ring neighbours) and throw InvalidArgument.
//  - Point-to-point: two ranks post their messages to each other in the same order on both sides
//    (the k-th send from r to d meets d's k-th recv from r), with the same tag and the same byte
//    count: order and sizes come from a layout both sides compute (the plan). NCCL matches in
//    posting order only and can check neither tag nor size. TcpCommunicator (and staging over it)
//    also matches by tag: messages with the same (peer, tag) match in posting order, whatever
//    the order between tags, and a size that differs fails (tcp_communicator.h).
//  - Collectives: every rank calls the same collectives in the same order (program order on each
//    rank); the non-blocking forms are started in that order too and complete in that order.
//  - Thread safety: calls may come from several threads as long as each thread's collectives are
//    on a communicator of its own (the checkpoint writer gets its own); abort() from any thread.
//
// Example (ring exchange, overlapped with compute):
//   auto recv = comm.irecv(next_kv, (rank + size - 1) % size, tag);
//   auto send = comm.isend(cur_kv, (rank + 1) % size, tag);
//   compute(cur_kv);
//   recv->wait(timeout); send->wait(timeout);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/stream.h"
#include "ops/tensor.h"

namespace hdp::mesh {

enum class ReduceOp { kSum, kMax, kMin };

// Where a device implementation orders its work (common/stream.h: a cudaStream_t for NCCL; null:
// the default stream). The CPU implementation runs on its own threads and ignores it.
using Stream = hdp::Stream;

// Point-to-point tags are the caller's: any value below kMaxTag. Values at and above it are the
// implementation's own (its collectives).
using Tag = std::uint64_t;
inline constexpr Tag kMaxTag = Tag{1} << 56;

// A started operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completed (TimeoutError after `timeout`, the communicator's
  // default when zero; PeerLost as in the contract). The buffers must stay alive and untouched until wait() returned or the
  // communicator is dead. Calling wait() again after it returned is a no-op.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};

class Communicator {
 public:
  using Duration = std::chrono::milliseconds;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The default deadline of a blocking call (and the bound a destructor waits).
  virtual Duration timeout() const = 0;
  // Where a caller places the small tensors it makes for a call (scalars, a plan's metadata): every
  // communicator takes tensors there. The CPU for TCP (and staging, which passes host tensors
  // straight through), the backend's device for NCCL, which takes nothing else.
  virtual ops::Device home() const { return ops::Device::kCpu; }

  // --- point to point -----------------------------------------------------------------------
  virtual std::unique_ptr<Work> isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream = {}) = 0;
  virtual std::unique_ptr<Work> irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream = {}) = 0;

  // --- collectives (every rank, same order) ---------------------------------------------------
  // In place over `buffer` (f32, f64, i32, i64 or bf16: bf16 pairs are combined in f32 and rounded back).
  virtual std::unique_ptr<Work> iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream = {}) = 0;
  // `input` holds sum(counts) elements, rank r's block at offset counts[0] + ... + counts[r-1];
  // `output` receives the reduction of this rank's block (counts[rank()] elements). Counts may be
  // uneven, and zero.
  virtual std::unique_ptr<Work> ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                std::span<const std::int64_t> counts, ReduceOp op,
                                                Stream stream = {}) = 0;
  // `input` holds counts[rank()] elements; `output` (sum(counts)) receives every rank's block in
  // rank order. This rank's own block may already be in place (input a view of output).
  virtual std::unique_ptr<Work> iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                           std::span<const std::int64_t> counts, Stream stream = {}) = 0;
  // Copies `root`'s buffer into every rank's.
  virtual std::unique_ptr<Work> ibroadcast(const ops::Tensor& buffer, int root, Stream stream = {}) = 0;
  virtual std::unique_ptr<Work> ibarrier() = 0;

  // Makes every pending and later call throw PeerLost naming `reason`; safe from any thread and
  // more than once. Closes the connections, so the peers' calls fail too.
  virtual void abort(const std::string& reason) = 0;
  // True once aborted, or once a call failed (the communicator is dead either way).
  virtual bool dead() const = 0;
  // Why the first connection to a peer failed on its own (EOF, reset: the peer's process is gone,
  // or its connection was cut), also while no call waits on that peer; empty while none did, or
  // when the backend cannot tell. The communicator itself goes on until a call needs that peer;
  // the elastic loop reports the generation broken at once (trainer/elastic_loop.cc).
  virtual std::string peer_lost() const { return {}; }

  // --- blocking forms: start, then wait(timeout, or the default when zero) ---------------------
  void send(const ops::Tensor& buffer, int dst, Tag tag, Duration timeout = Duration::zero());
  void recv(const ops::Tensor& buffer, int src, Tag tag, Duration timeout = Duration::zero());
  void allreduce(const ops::Tensor& buffer, ReduceOp op, Duration timeout = Duration::zero());
  void reduce_scatter(const ops::Tensor& input, const ops::Tensor& output, std::span<const std::int64_t> counts,
                      ReduceOp op, Duration timeout = Duration::zero());
  void allgather(const ops::Tensor& input, const ops::Tensor& output, std::span<const std::int64_t> counts,
                 Duration timeout = Duration::zero());
  void broadcast(const ops::Tensor& buffer, int root, Duration timeout = Duration::zero());
  void barrier(Duration timeout = Duration::zero());

  // Conveniences over allreduce for scalars (a one-element tensor on home() underneath).
  double allreduce_sum(double value, Duration timeout = Duration::zero());
  std::int64_t allreduce_sum(std::int64_t value, Duration timeout = Duration::zero());
  std::int64_t allreduce_max(std::int64_t value, Duration timeout = Duration::zero());

 protected:
  Duration resolve(Duration timeout) const { return timeout == Duration::zero() ? this->timeout() : timeout; }
};

}  // namespace hdp::mesh
