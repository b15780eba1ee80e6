// File: tests/mesh/nccl/nccl_loopback_backend.h
//
// An NCCL (mesh/comm/nccl_backend.h) that moves the data, for ranks that are threads of one
// process with their buffers in host memory: what lets a test train over NcclCommunicator on a
// machine without a GPU (tests/trainer/nccl_trainer_test.cc). One LoopbackNccl is shared by every
// rank; a communicator is the set of ranks that joined one unique id.
//  - A collective completes when every rank of the communicator has launched its own: the k-th
//    collective operation of each rank (in launch order, as NCCL requires the same order on all)
//    meets the k-th of the others, and the last to arrive computes every rank's result (from
//    copies of the inputs, so that an output that is its input's own block is right). Reductions
//    of f32, f64, i32 and i64 sum in rank order; a bf16 reduction is reported as an error.
//  - A send meets the receive of its pair in posting order (NCCL has no tags); the later of the
//    two copies the bytes. A size mismatch is reported as an error.
//  - abort() of any rank stops the whole communicator: nothing of it is computed any more (its
//    memory may be freed once abort returns). Its other ranks are not told (NCCL does not report a
//    peer's abort): their operations never complete, as on a GPU, until their own watchdog (a
//    deadline, a newer generation) aborts them.
//  - A rank's groups complete each on its own, not in launch order as on one CUDA stream: a
//    caller that waits on a later group before an earlier one's peer has posted is not caught.
// Everything runs under one mutex: a launch or a completion check never waits on another rank.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh::testing {

class LoopbackNccl final : public nccl::Backend, public std::enable_shared_from_this<LoopbackNccl> {
 public:
  ops::Device device() const override { return ops::Device::kCpu; }

  nccl::UniqueId unique_id() override {
    std::lock_guard lock(mutex_);
    nccl::UniqueId id{};
    const int n = ++ids_;
    std::memcpy(id.data(), &n, sizeof n);
    id[127] = 0x5a;
    return id;
  }

  std::unique_ptr<nccl::Comm> init(const nccl::UniqueId& id, int size, int rank) override {
    std::lock_guard lock(mutex_);
    Shared& s = shared_[id];
    s.size = size;
    ++s.joined;
    return std::make_unique<LoopComm>(shared_from_this(), id, rank);
  }

  // Communicators built (one per id), for the test's assertions.
  int communicators() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(shared_.size());
  }
  // Ranks' communicators ended, aborted or destroyed.
  int ended() const {
    std::lock_guard lock(mutex_);
    return ended_;
  }

 private:
  using Kind = nccl::Op::Kind;
  struct Meeting;  // one collective operation of every rank
  struct Message {
    void* buffer;
    std::size_t bytes;
    std::shared_ptr<bool> done;
  };
  struct Shared {
    int size = 0;
    int joined = 0;
    bool dead = false;
    std::string error;
    std::vector<std::shared_ptr<Meeting>> meetings;  // by collective index
    std::map<std::pair<int, int>, std::deque<Message>> sends, recvs;  // by (src, dst)
  };
  struct Meeting {
    std::vector<nccl::Op> ops;  // by rank
    std::vector<bool> arrived;
    int count = 0;
    bool done = false;
  };

  static std::size_t elem(ops::DType dtype) { return ops::dtype_size(dtype); }

  // memcpy, with nothing to copy allowed: an operation of zero elements may have null buffers (as
  // NCCL allows), which memcpy may not be given even for zero bytes.
  static void copy_bytes(void* dst, const void* src, std::size_t n) {
    if (n > 0) std::memcpy(dst, src, n);
  }

  template <typename T>
  static void reduce_into(std::vector<T>& acc, const T* x, ReduceOp op) {
    for (std::size_t i = 0; i < acc.size(); ++i) {
      acc[i] = op == ReduceOp::kSum ? acc[i] + x[i] : op == ReduceOp::kMax ? std::max(acc[i], x[i]) : std::min(acc[i], x[i]);
    }
  }

  // The reduction over ranks of `count` elements at byte offset `at` of every rank's send buffer.
  template <typename T>
  static std::vector<char> reduce(const Meeting& m, std::size_t at, std::int64_t count) {
    std::vector<T> acc(static_cast<std::size_t>(count));
    copy_bytes(acc.data(), static_cast<const char*>(m.ops[0].send) + at, acc.size() * sizeof(T));
    for (std::size_t r = 1; r < m.ops.size(); ++r) {
      reduce_into(acc, reinterpret_cast<const T*>(static_cast<const char*>(m.ops[r].send) + at), m.ops[0].op);
    }
    std::vector<char> bytes(acc.size() * sizeof(T));
    copy_bytes(bytes.data(), acc.data(), bytes.size());
    return bytes;
  }

  static std::vector<char> reduced(const Meeting& m, std::size_t at, std::int64_t count, std::string& error) {
    switch (m.ops[0].dtype) {
      case ops::DType::kF32: return reduce<float>(m, at, count);
      case ops::DType::kF64: return reduce<double>(m, at, count);
      case ops::DType::kI32: return reduce<std::int32_t>(m, at, count);
      case ops::DType::kI64: return reduce<std::int64_t>(m, at, count);
      case ops::DType::kBF16: break;
    }
    error = "the loopback NCCL reduces no " + ops::dtype_name(m.ops[0].dtype);
    return {};
  }

  // Every rank's result of one meeting; inputs are read before any output is written.
  static void compute(Meeting& m, std::string& error) {
    const nccl::Op& o = m.ops[0];
    const std::size_t n = static_cast<std::size_t>(o.count) * elem(o.dtype), world = m.ops.size();
    std::vector<std::vector<char>> out(world);
    if (o.kind == Kind::kAllReduce || o.kind == Kind::kReduce) {
      const std::vector<char> r = reduced(m, 0, o.count, error);
      for (std::size_t i = 0; i < world; ++i) out[i] = r;
    } else if (o.kind == Kind::kReduceScatter) {
      for (std::size_t i = 0; i < world; ++i) out[i] = reduced(m, i * n, o.count, error);
    } else if (o.kind == Kind::kAllGather) {
      std::vector<char> all(n * world);
      for (std::size_t i = 0; i < world; ++i) copy_bytes(all.data() + i * n, m.ops[i].send, n);
      for (std::size_t i = 0; i < world; ++i) out[i] = all;
    } else if (o.kind == Kind::kBroadcast) {
      std::vector<char> b(n);
      copy_bytes(b.data(), m.ops[static_cast<std::size_t>(o.peer)].send, n);
      for (std::size_t i = 0; i < world; ++i) out[i] = b;
    }
    if (!error.empty()) return;
    for (std::size_t i = 0; i < world; ++i) {
      const bool writes = o.kind != Kind::kReduce || static_cast<int>(i) == o.peer;
      if (writes && !out[i].empty()) copy_bytes(m.ops[i].recv, out[i].data(), out[i].size());
    }
  }

  // Locked. A collective op of `rank`: joins the meeting of its index, computed when complete.
  std::shared_ptr<Meeting> meet(Shared& s, std::size_t index, int rank, const nccl::Op& op) {
    while (s.meetings.size() <= index) {
      auto m = std::make_shared<Meeting>();
      m->ops.resize(static_cast<std::size_t>(s.size));
      m->arrived.assign(static_cast<std::size_t>(s.size), false);
      s.meetings.push_back(m);
    }
    auto m = s.meetings[index];
    m->ops[static_cast<std::size_t>(rank)] = op;
    m->arrived[static_cast<std::size_t>(rank)] = true;
    if (++m->count == s.size && !s.dead) {
      const Kind kind = m->ops[0].kind;
      const bool same = std::all_of(m->ops.begin(), m->ops.end(), [&](const nccl::Op& x) {
        return x.kind == kind && x.count == m->ops[0].count && x.dtype == m->ops[0].dtype && x.peer == m->ops[0].peer;
      });
      if (!same) s.error = "ranks launched different collectives at one index";
      else compute(*m, s.error);
      m->done = s.error.empty();
    }
    return m;
  }

  // Locked. A message: matched with the head of its pair's other queue, copied by the later one.
  std::shared_ptr<bool> post(Shared& s, int rank, const nccl::Op& op) {
    const bool send = op.kind == Kind::kSend;
    const std::pair<int, int> pair = send ? std::pair{rank, op.peer} : std::pair{op.peer, rank};
    auto& mine = send ? s.sends[pair] : s.recvs[pair];
    auto& theirs = send ? s.recvs[pair] : s.sends[pair];
    Message msg{send ? const_cast<void*>(op.send) : op.recv, static_cast<std::size_t>(op.count) * elem(op.dtype),
                std::make_shared<bool>(false)};
    if (theirs.empty()) {
      mine.push_back(msg);
      return msg.done;
    }
    Message other = theirs.front();
    theirs.pop_front();
    if (other.bytes != msg.bytes) {
      s.error = "a message of " + std::to_string(msg.bytes) + " bytes met one of " + std::to_string(other.bytes);
      return msg.done;
    }
    if (!s.dead) copy_bytes(send ? other.buffer : msg.buffer, send ? msg.buffer : other.buffer, msg.bytes);
    *msg.done = *other.done = !s.dead;
    return msg.done;
  }

  class LoopCompletion final : public nccl::Completion {
   public:
    LoopCompletion(std::shared_ptr<LoopbackNccl> owner, std::vector<std::shared_ptr<Meeting>> meetings,
                   std::vector<std::shared_ptr<bool>> messages)
        : owner_(std::move(owner)), meetings_(std::move(meetings)), messages_(std::move(messages)) {}
    bool done() override {
      std::lock_guard lock(owner_->mutex_);
      return std::all_of(meetings_.begin(), meetings_.end(), [](const auto& m) { return m->done; }) &&
             std::all_of(messages_.begin(), messages_.end(), [](const auto& d) { return *d; });
    }

   private:
    std::shared_ptr<LoopbackNccl> owner_;
    std::vector<std::shared_ptr<Meeting>> meetings_;
    std::vector<std::shared_ptr<bool>> messages_;
  };

  class LoopComm final : public nccl::Comm {
   public:
    LoopComm(std::shared_ptr<LoopbackNccl> owner, nccl::UniqueId id, int rank)
        : owner_(std::move(owner)), id_(id), rank_(rank) {}
    ~LoopComm() override {
      std::lock_guard lock(owner_->mutex_);
      ++owner_->ended_;
    }
    nccl::Status poll() override {
      std::lock_guard lock(owner_->mutex_);
      const Shared& s = owner_->shared_[id_];
      if (!s.error.empty()) return {nccl::Status::Code::kFailed, "loopback NCCL: " + s.error};
      if (aborted_) return {nccl::Status::Code::kFailed, "loopback NCCL: aborted"};
      if (s.joined < s.size) return {nccl::Status::Code::kInProgress, ""};
      return {};
    }
    std::unique_ptr<nccl::Completion> launch(std::span<const nccl::Op> ops, Stream) override {
      std::lock_guard lock(owner_->mutex_);
      Shared& s = owner_->shared_[id_];
      std::vector<std::shared_ptr<Meeting>> meetings;
      std::vector<std::shared_ptr<bool>> messages;
      for (const nccl::Op& op : ops) {
        if (op.kind == Kind::kSend || op.kind == Kind::kRecv) messages.push_back(owner_->post(s, rank_, op));
        else meetings.push_back(owner_->meet(s, collectives_++, rank_, op));
      }
      return std::make_unique<LoopCompletion>(owner_, std::move(meetings), std::move(messages));
    }
    void abort() override {
      std::lock_guard lock(owner_->mutex_);
      owner_->shared_[id_].dead = true;
      aborted_ = true;
    }

   private:
    std::shared_ptr<LoopbackNccl> owner_;
    nccl::UniqueId id_;
    int rank_;
    std::size_t collectives_ = 0;
    bool aborted_ = false;
  };

  mutable std::mutex mutex_;
  std::map<nccl::UniqueId, Shared> shared_;
  int ids_ = 0;
  int ended_ = 0;
};

}  // namespace hdp::mesh::testing
