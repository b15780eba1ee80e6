// File: mesh/comm/nccl_backend.h
//
// The seam between NcclCommunicator (nccl_communicator.h: the id exchange, grouping, deadlines and
// the watchdog, all of it hdp's own logic) and NCCL with the CUDA runtime. nccl_backend_cuda.cc is
// the one file that includes nccl.h or cuda_runtime.h; tests/mesh/nccl/nccl_fake_backend.h implements
// the same interface on the CPU, so the communicator's logic is tested without a GPU.
//
// Contract for an implementation:
//  - Backend::init starts a non-blocking communicator init (ncclCommInitRankConfig with
//    blocking = 0) and returns at once; Comm::poll() says kInProgress until it is ready.
//  - Comm::launch enqueues a group of operations (ncclGroupStart ... ncclGroupEnd) on the
//    communicator's own stream, after the work already queued on the caller's stream, and returns
//    a Completion at once; the group may still be being enqueued (kInProgress) when it returns.
//  - Comm::abort (ncclCommAbort) may be called from any thread while another is inside poll(),
//    launch() or a Completion; it makes every kernel of the communicator return. After it, no
//    other method of the Comm or its Completions is called.
//  - Nothing but hdp's own exceptions leaves a method: a failing call throws PeerLost with NCCL's
//    or CUDA's message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mesh/comm/communicator.h"
#include "ops/dtype.h"

namespace hdp::mesh::nccl {

// NCCL_UNIQUE_ID_BYTES (nccl_backend_cuda.cc checks it against nccl.h).
inline constexpr std::size_t kUniqueIdBytes = 128;
using UniqueId = std::array<std::uint8_t, kUniqueIdBytes>;

// ncclCommGetAsyncError, in hdp's words.
struct Status {
  enum class Code { kReady, kInProgress, kFailed };
  Code code = Code::kReady;
  std::string message;  // kFailed: what NCCL said
};

// One operation of a group, on buffers of the backend's device. Counts are elements of `dtype`.
struct Op {
  enum class Kind { kSend, kRecv, kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast };
  Kind kind = Kind::kSend;
  const void* send = nullptr;  // send buffer (kRecv: unused)
  void* recv = nullptr;        // receive buffer (kSend: unused; kReduce: used on the root only)
  std::int64_t count = 0;      // kReduceScatter, kAllGather: the count per rank
  ops::DType dtype = ops::DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int peer = -1;  // kSend, kRecv: the other rank; kReduce, kBroadcast: the root
};

// A launched group: done() once every kernel of it finished on the device (a CUDA event), false
// while it is still being enqueued or running; throws PeerLost when NCCL reports an error.
class Completion {
 public:
  virtual ~Completion() = default;
  virtual bool done() = 0;
};

class Comm {
 public:
  // ncclCommDestroy when healthy and idle (bounded: a finalize that does not finish in a few
  // seconds is turned into an abort); nothing after abort().
  virtual ~Comm() = default;
  virtual Status poll() = 0;
  virtual std::unique_ptr<Completion> launch(std::span<const Op> ops, Stream stream) = 0;
  virtual void abort() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Where the buffers must live (kCuda for NCCL; the fake's is the CPU).
  virtual ops::Device device() const = 0;
  // A new unique id (ncclGetUniqueId): rank 0 makes one per communicator.
  virtual UniqueId unique_id() = 0;
  // Starts joining the communicator `id` of `size` ranks as `rank`; returns at once.
  virtual std::unique_ptr<Comm> init(const UniqueId& id, int size, int rank) = 0;
};

// NCCL on CUDA device `device` (the calling thread's current device is set to it). Throws
// InvalidArgument when this build has no NCCL or there is no such device.
std::shared_ptr<Backend> make_cuda_backend(int device);

// The NCCL library's version, "2.28.3" (ncclGetVersion); empty when this build has no NCCL.
std::string library_version();

}  // namespace hdp::mesh::nccl
