// File: mesh/comm/nccl_communicator.h
//
// Communicator (communicator.h) over NCCL, for tensors on the backend's device (a CUDA GPU). One
// NcclCommunicator is one NCCL communicator of one generation: a new generation builds a new one
// (a full re-init; NCCL's ncclCommShrink, 2.27+, would keep the survivors' communicator, but NCCL's
// own tracker reports it hanging when the excluded ranks simply exit, which is how hdp loses them).
// NCCL itself sits behind nccl_backend.h; this file and its .cc are hdp's logic only.
//
// Bootstrap: rank 0 makes a unique id and writes it, with the group's size, to the key "nccl-id"
// of `store`, which is the generation's own namespace (fencing by construction: a rank of another
// generation reads another key); the others wait for it (asking `superseded` between slices),
// then every rank starts a non-blocking init. connect() returns once NCCL says the communicator
// is ready: TimeoutError after `timeout` (a rank that never joins), PeerLost when `superseded`
// says a newer generation exists or NCCL fails, InvalidArgument for a record that is not one or
// names another size. Every failure aborts what was started.
//
// Point to point: isend/irecv are queued and launched together as one NCCL group (grouped
// ncclSend/ncclRecv) when one of them is waited for or a collective is started, so a ring
// exchange (every rank posts a recv and a send, then waits) cannot deadlock. NCCL matches
// messages per pair of ranks in posting order and has no tags: both sides must post their
// messages to each other in the same order (the plan's layout does), and the tag is not checked.
//
// Collectives: NCCL's own. Uneven counts become one group of ncclReduce (reduce-scatter) or
// ncclBroadcast (allgather) calls, one per rank; equal counts use ncclReduceScatter and
// ncclAllGather. Reductions: f32, f64, i32, i64 with sum, max, min. Sizes are not compared across
// ranks (NCCL cannot): a mismatch shows up as a timeout.
//
// Deadlines and the watchdog. Every launched group has a deadline, timeout() after its launch.
// A watchdog thread looks every `watchdog_tick`: when a group passes its deadline, when
// `superseded` says the generation changed, or when NCCL reports an asynchronous error, it
// aborts the NCCL communicator (ncclCommAbort) and the communicator is dead: the waits in progress
// throw (TimeoutError for a deadline, PeerLost otherwise) and every later call throws PeerLost.
// Work::wait(t) also gives up after t, killing the communicator the same way. abort() from any
// thread does the same at once.
//
// The stream: a group starts after the work queued on the caller's stream (null: the default
// stream) and runs on the communicator's own stream; Work::wait blocks the host until it ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "elastic/store.h"
#include "mesh/comm/communicator.h"
#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh {

struct NcclConnectOptions {
  int rank = 0;
  int size = 1;
  // The generation's (and channel's) own namespace: the unique id is written to "nccl-id" there.
  std::shared_ptr<elastic::Store> store;
  // Asked while the bootstrap waits and by the watchdog; true: give up with PeerLost. May be empty.
  std::function<bool()> superseded;
  std::chrono::milliseconds timeout{30000};  // the bootstrap, and every group's deadline
  std::chrono::milliseconds watchdog_tick{50};
};

// The key the unique id is written to, in the generation's namespace.
inline constexpr std::string_view kNcclIdKey = "nccl-id";

class NcclCommunicator final : public Communicator {
 public:
  static std::unique_ptr<NcclCommunicator> connect(const NcclConnectOptions& options,
                                                   std::shared_ptr<nccl::Backend> backend);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Duration timeout() const override;
  ops::Device home() const override;  // the backend's device

  std::unique_ptr<Work> isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream = {}) override;
  std::unique_ptr<Work> ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                        std::span<const std::int64_t> counts, ReduceOp op,
                                        Stream stream = {}) override;
  std::unique_ptr<Work> iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                   std::span<const std::int64_t> counts, Stream stream = {}) override;
  std::unique_ptr<Work> ibroadcast(const ops::Tensor& buffer, int root, Stream stream = {}) override;
  std::unique_ptr<Work> ibarrier() override;

  void abort(const std::string& reason) override;
  bool dead() const override;

  // Why the communicator died ("" while it lives), and how many times the NCCL communicator was
  // aborted (0 or 1).
  std::string failure() const;
  int aborts() const;

  struct Impl;  // nccl_communicator.cc

 private:
  explicit NcclCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the Work handles and the watchdog
};

// The record rank 0 writes ("nccl1 <size> <hex of the id>") and its reader (InvalidArgument
// naming what is wrong), exposed for tests.
std::string encode_nccl_id(int size, const nccl::UniqueId& id);
nccl::UniqueId decode_nccl_id(std::string_view record, int size);

}  // namespace hdp::mesh
