// File: mesh/comm/staging_communicator.h
//
// A Communicator (communicator.h) for a rank whose tensors are on a CUDA device in a generation
// whose data plane is TCP (data_plane.h: some rank is on the CPU, or ranks share a GPU): it wraps
// the TCP communicator, which takes host tensors only, and carries every tensor that is not on the
// host through host buffers.
//
//  - isend: the tensor is copied to a host buffer (after the work queued on the call's stream)
//    before the inner send starts. irecv: the inner recv lands in a host buffer, copied to the
//    tensor (on the call's stream, finished before wait() returns) when the Work is waited.
//  - Collectives likewise: the input is copied in when the call starts, the output copied back
//    when its Work is waited (a broadcast copies in on the root only, back on the others only).
//  - Tensors already on the host go straight to the inner communicator (the scalars of
//    allreduce_sum, the checkpoint group's flags), unless `stage_all` says otherwise (tests: on a
//    machine without a GPU it sends CPU tensors through the host buffers, so the copy path runs).
//  - The buffers are reused across calls (staging_buffers.h) and page-locked when the device is
//    CUDA (staging_memory.h; plain host memory in a build without CUDA).
//
// The tensors of one call are on one device (the CPU or this rank's GPU). The contract is the
// inner communicator's: arguments are checked here, on the caller's tensors
// and before anything is copied or sent, with checks.h's words (InvalidArgument naming the value);
// a wait's deadline, PeerLost and TimeoutError, abort() and dead() are the inner's, and after a
// wait threw the buffers are the caller's again (the inner touches nothing more). The copy back
// after a completed inner wait adds its own time to that wait (a device copy, not the network).
// Destroying it destroys the inner communicator (aborted first when operations are in flight).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mesh/comm/communicator.h"
#include "ops/dtype.h"

namespace hdp::mesh {

namespace staging {
class HostBuffers;
}

struct StagingOptions {
  // Where this rank's tensors live: its host buffers are page-locked when this is kCuda.
  ops::Device device = ops::Device::kCuda;
  // Tests: stage CPU tensors too.
  bool stage_all = false;
};

class StagingCommunicator final : public Communicator {
 public:
  // InvalidArgument when `inner` is null.
  StagingCommunicator(std::unique_ptr<Communicator> inner, StagingOptions options = {});
  ~StagingCommunicator() override;
  StagingCommunicator(const StagingCommunicator&) = delete;
  StagingCommunicator& operator=(const StagingCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Duration timeout() const override;

  std::unique_ptr<Work> isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream = {}) override;
  std::unique_ptr<Work> iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream = {}) override;
  // The inner's rules on aliasing hold for the caller's tensors (output may be input's own block).
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

  // The communicator underneath (TcpCommunicator in the factory's use).
  Communicator& inner() const { return *inner_; }
  // Bytes copied into and out of host buffers; host buffers made, and of those page-locked.
  std::int64_t staged_bytes() const;
  std::int64_t buffers_allocated() const;
  std::int64_t buffers_pinned() const;

  struct Counters;  // staging_communicator.cc

 private:
  bool staged(const ops::Tensor& t) const;

  StagingOptions options_;
  std::shared_ptr<Counters> counters_;
  std::shared_ptr<staging::HostBuffers> buffers_;  // shared with the Works; outlives inner_
  std::unique_ptr<Communicator> inner_;            // declared last: destroyed first
};

}  // namespace hdp::mesh
