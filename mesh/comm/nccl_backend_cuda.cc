// NCCL and the CUDA runtime behind nccl_backend.h. NCCL's functions come from nccl_api.h (the
// library opened on first use); with nccl_api.cc, the files of hdp that include nccl.h.
//
// Every NCCL communicator is non-blocking (ncclConfig_t::blocking = 0), so no call here waits on
// the device or on another rank: an init, or a group whose ncclGroupEnd says ncclInProgress, is
// finished by later polls (ncclCommGetAsyncError). Groups are issued one at a time, in launch
// order: a group waits in a queue until the one before it was enqueued, then its CUDA event is
// recorded on the communicator's stream, and its Completion is done when that event is.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "mesh/comm/nccl_api.h"
#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh::nccl {
namespace {

static_assert(NCCL_UNIQUE_ID_BYTES == kUniqueIdBytes, "nccl_backend.h's kUniqueIdBytes differs from nccl.h");

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw PeerLost(std::string(what) + ": " + cudaGetErrorString(error));
}

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = api().get_error_string(result);
  const char* last = api().get_last_error(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

ncclDataType_t nccl_type(ops::DType dtype) {
  switch (dtype) {
    case ops::DType::kF32: return ncclFloat32;
    case ops::DType::kF64: return ncclFloat64;
    case ops::DType::kI32: return ncclInt32;
    case ops::DType::kI64: return ncclInt64;
    case ops::DType::kBF16: return ncclBfloat16;
  }
  throw InvalidArgument("NCCL: no NCCL type for " + ops::dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw InvalidArgument("NCCL: unknown reduction");
}

// One event, destroyed with its owner.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() {
    if (event) cudaEventDestroy(event);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// A launched group, shared between the queue and its Completion.
struct Issued {
  std::vector<Op> ops;
  Event inputs_ready;  // recorded on the caller's stream at launch
  Event finished;      // recorded on the communicator's stream once the group is enqueued
  bool recorded = false;
};

// The communicator and its queue, shared with the Completions (which may outlive the CudaComm).
struct State {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool gone = false;                          // aborted or destroyed: no NCCL call any more
  std::deque<std::shared_ptr<Issued>> queue;  // launched, not yet handed to NCCL
  std::shared_ptr<Issued> enqueuing;          // handed to NCCL, ncclGroupEnd said ncclInProgress

  ncclResult_t async_state() {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = api().comm_get_async_error(comm, &state);
    return r != ncclSuccess ? r : state;
  }

  void issue(Issued& group) {
    check_cuda(cudaStreamWaitEvent(stream, group.inputs_ready.event, 0), "cudaStreamWaitEvent");
    ncclResult_t r = api().group_start();
    for (const Op& op : group.ops) {
      if (r != ncclSuccess) break;
      const auto count = static_cast<std::size_t>(op.count);
      switch (op.kind) {
        case Op::Kind::kSend: r = api().send(op.send, count, nccl_type(op.dtype), op.peer, comm, stream); break;
        case Op::Kind::kRecv: r = api().recv(op.recv, count, nccl_type(op.dtype), op.peer, comm, stream); break;
        case Op::Kind::kAllReduce:
          r = api().all_reduce(op.send, op.recv, count, nccl_type(op.dtype), nccl_op(op.op), comm, stream);
          break;
        case Op::Kind::kReduce:
          r = api().reduce(op.send, op.recv, count, nccl_type(op.dtype), nccl_op(op.op), op.peer, comm, stream);
          break;
        case Op::Kind::kReduceScatter:
          r = api().reduce_scatter(op.send, op.recv, count, nccl_type(op.dtype), nccl_op(op.op), comm, stream);
          break;
        case Op::Kind::kAllGather: r = api().all_gather(op.send, op.recv, count, nccl_type(op.dtype), comm, stream); break;
        case Op::Kind::kBroadcast:
          r = api().broadcast(op.send, op.recv, count, nccl_type(op.dtype), op.peer, comm, stream);
          break;
      }
    }
    const ncclResult_t end = api().group_end();
    if (r != ncclSuccess && r != ncclInProgress) throw PeerLost("NCCL: " + nccl_text(r, comm));
    if (end != ncclSuccess && end != ncclInProgress) throw PeerLost("NCCL: " + nccl_text(end, comm));
  }

  // Moves the queue along as far as NCCL allows without waiting.
  void pump() {
    if (gone) return;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    for (;;) {
      if (enqueuing) {
        const ncclResult_t state = async_state();
        if (state == ncclInProgress) return;
        if (state != ncclSuccess) throw PeerLost("NCCL: " + nccl_text(state, comm));
        check_cuda(cudaEventRecord(enqueuing->finished.event, stream), "cudaEventRecord");
        enqueuing->recorded = true;
        enqueuing.reset();
      }
      if (queue.empty()) return;
      enqueuing = std::move(queue.front());
      queue.pop_front();
      issue(*enqueuing);
    }
  }
};

class CudaCompletion final : public Completion {
 public:
  CudaCompletion(std::shared_ptr<State> state, std::shared_ptr<Issued> group)
      : state_(std::move(state)), group_(std::move(group)) {}
  bool done() override {
    if (state_->gone) return false;
    state_->pump();
    if (!group_->recorded) return false;
    const cudaError_t e = cudaEventQuery(group_->finished.event);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, "cudaEventQuery");
    return true;
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Issued> group_;
};

class CudaComm final : public Comm {
 public:
  explicit CudaComm(std::shared_ptr<State> state) : state_(std::move(state)) {}

  ~CudaComm() override {
    if (state_->gone) return;
    state_->gone = true;
    cudaSetDevice(state_->device);
    // Finalize (flushes what is queued), bounded; then destroy, or abort when it did not finish.
    ncclResult_t r = api().comm_finalize(state_->comm);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (r == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      r = state_->async_state();
    }
    if (r == ncclSuccess) {
      r = api().comm_destroy(state_->comm);
    } else {
      log()->warn("NCCL: finalize did not finish ({}); aborting the communicator", nccl_text(r, state_->comm));
      r = api().comm_abort(state_->comm);
    }
    if (r != ncclSuccess) log()->warn("NCCL: destroying the communicator: {}", api().get_error_string(r));
    cudaStreamDestroy(state_->stream);
  }

  Status poll() override {
    if (state_->gone) return {Status::Code::kFailed, "the communicator was aborted"};
    try {
      state_->pump();
    } catch (const PeerLost& e) {
      return {Status::Code::kFailed, e.what()};
    }
    const ncclResult_t state = state_->async_state();
    if (state == ncclSuccess) return {};
    if (state == ncclInProgress) return {Status::Code::kInProgress, ""};
    return {Status::Code::kFailed, nccl_text(state, state_->comm)};
  }

  std::unique_ptr<Completion> launch(std::span<const Op> ops, Stream stream) override {
    if (state_->gone) throw PeerLost("NCCL: the communicator was aborted");
    check_cuda(cudaSetDevice(state_->device), "cudaSetDevice");
    auto group = std::make_shared<Issued>();
    group->ops.assign(ops.begin(), ops.end());
    check_cuda(cudaEventRecord(group->inputs_ready.event, static_cast<cudaStream_t>(stream.handle)), "cudaEventRecord");
    state_->queue.push_back(group);
    state_->pump();
    return std::make_unique<CudaCompletion>(state_, std::move(group));
  }

  void abort() override {
    if (state_->gone) return;
    state_->gone = true;
    cudaSetDevice(state_->device);
    const ncclResult_t r = api().comm_abort(state_->comm);
    if (r != ncclSuccess) log()->warn("NCCL: ncclCommAbort: {}", api().get_error_string(r));
    cudaStreamDestroy(state_->stream);
  }

 private:
  std::shared_ptr<State> state_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ops::Device device() const override { return ops::Device::kCuda; }

  UniqueId unique_id() override {
    ncclUniqueId id;
    const ncclResult_t r = api().get_unique_id(&id);
    if (r != ncclSuccess) throw PeerLost(std::string("ncclGetUniqueId: ") + api().get_error_string(r));
    UniqueId out{};
    std::memcpy(out.data(), id.internal, out.size());
    return out;
  }

  std::unique_ptr<Comm> init(const UniqueId& id, int size, int rank) override {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    auto state = std::make_shared<State>();
    state->device = device_;
    check_cuda(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId nid;
    std::memcpy(nid.internal, id.data(), id.size());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = api().comm_init_rank_config(&state->comm, size, nid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      cudaStreamDestroy(state->stream);
      throw PeerLost("ncclCommInitRankConfig: " + nccl_text(r, state->comm));
    }
    return std::make_unique<CudaComm>(std::move(state));
  }

 private:
  int device_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    throw InvalidArgument("NCCL: no CUDA device " + std::to_string(device) + " (this machine has " +
                          std::to_string(count) + ")");
  }
  return std::make_shared<CudaBackend>(device);
}

std::string library_version() {
  int version = 0;
  try {
    if (api().get_version(&version) != ncclSuccess) return "unknown";
  } catch (const Error& e) {
    return std::string("unavailable: ") + e.what();
  }
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
}

}  // namespace hdp::mesh::nccl
