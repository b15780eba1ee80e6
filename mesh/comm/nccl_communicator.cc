#include "mesh/comm/nccl_communicator.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "mesh/comm/checks.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = nccl::Op::Kind;

constexpr std::string_view kRecordTag = "nccl1";

// A group of operations launched together: queued point-to-point messages, or one collective.
struct Group {
  std::vector<nccl::Op> ops;
  Stream stream;
  std::unique_ptr<nccl::Completion> completion;  // set at launch
  Clock::time_point deadline{};
  bool finished = false;
};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kSend: return "send";
    case Kind::kRecv: return "recv";
    case Kind::kAllReduce: return "allreduce";
    case Kind::kReduce: return "reduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllGather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
  }
  return "?";
}

std::string describe(const Group& group) {
  std::string text = std::to_string(group.ops.size()) + " operation(s) (";
  for (std::size_t i = 0; i < group.ops.size() && i < 4; ++i) text += (i ? ", " : "") + std::string(kind_name(group.ops[i].kind));
  if (group.ops.size() > 4) text += ", ...";
  return text + ")";
}

bool is_reducible(ops::DType dtype) {
  return dtype == ops::DType::kF32 || dtype == ops::DType::kF64 || dtype == ops::DType::kI32 ||
         dtype == ops::DType::kI64 || dtype == ops::DType::kBF16;
}

}  // namespace

std::string encode_nccl_id(int size, const nccl::UniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text = std::string(kRecordTag) + " " + std::to_string(size) + " ";
  for (std::uint8_t byte : id) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

nccl::UniqueId decode_nccl_id(std::string_view record, int size) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(kNcclIdKey) + " holds " + quote_value(record, 48) + ", not an NCCL id record: " + why);
  };
  const std::size_t first = record.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : record.find(' ', first + 1);
  if (second == std::string_view::npos || record.substr(0, first) != kRecordTag) {
    throw bad("expected \"" + std::string(kRecordTag) + " <size> <hex>\"");
  }
  int written = 0;
  const std::string_view size_text = record.substr(first + 1, second - first - 1);
  const auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), written);
  if (ec != std::errc() || end != size_text.data() + size_text.size()) throw bad("the size is not a number");
  if (written != size) {
    throw InvalidArgument(std::string(kNcclIdKey) + " was written for " + std::to_string(written) +
                          " ranks; this communicator has " + std::to_string(size));
  }
  const std::string_view hex = record.substr(second + 1);
  if (hex.size() != 2 * nccl::kUniqueIdBytes) {
    throw bad("the id has " + std::to_string(hex.size()) + " hex digits, not " + std::to_string(2 * nccl::kUniqueIdBytes));
  }
  nccl::UniqueId id{};
  for (std::size_t i = 0; i < id.size(); ++i) {
    unsigned value = 0;
    const auto [p, e] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, value, 16);
    if (e != std::errc() || p != hex.data() + 2 * i + 2) throw bad("the id is not hex");
    id[i] = static_cast<std::uint8_t>(value);
  }
  return id;
}

struct NcclCommunicator::Impl {
  enum class Failure { kNone, kTimeout, kPeerLost };

  int rank = 0, size = 1;
  Duration timeout{};
  Duration tick{};
  std::function<bool()> superseded;
  std::shared_ptr<nccl::Backend> backend;
  ops::Tensor barrier_scratch;  // one i32 a barrier allreduces (made on the first barrier)

  // Guards everything below and serialises every call into `comm` (abort included: a non-blocking
  // NCCL communicator's calls all return promptly, so holding it never waits on the device).
  mutable std::mutex mutex;
  std::condition_variable changed;  // the communicator became ready or dead, or the watchdog stops
  std::unique_ptr<nccl::Comm> comm;
  bool ready = false;
  Clock::time_point init_deadline{};
  std::shared_ptr<Group> pending;  // point-to-point messages queued, not launched
  std::vector<std::shared_ptr<Group>> in_flight;
  Failure failure_kind = Failure::kNone;
  std::string failure;
  int aborts = 0;
  bool stopping = false;
  std::thread watchdog;

  bool dead_locked() const { return failure_kind != Failure::kNone; }

  // Kills the communicator: records why, aborts the NCCL communicator, wakes every waiter.
  void fail_locked(Failure kind, const std::string& reason) {
    if (dead_locked()) return;
    failure_kind = kind;
    failure = reason;
    if (comm) {
      ++aborts;
      try {
        comm->abort();
      } catch (const Error& e) {
        log()->warn("NCCL communicator (rank {} of {}): abort failed: {}", rank, size, e.what());
      }
    }
    log()->warn("NCCL communicator (rank {} of {}) is dead: {}", rank, size, reason);
    changed.notify_all();
  }

  [[noreturn]] void throw_failure_locked(bool waiting) const {
    const std::string text = "NCCL communicator (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             ") is dead: " + failure;
    if (waiting && failure_kind == Failure::kTimeout) throw TimeoutError(text);
    throw PeerLost(text);
  }

  void require_alive_locked() const {
    if (dead_locked()) throw_failure_locked(false);
  }

  void launch_locked(const std::shared_ptr<Group>& group) {
    try {
      group->completion = comm->launch(group->ops, group->stream);
    } catch (const Error& e) {
      fail_locked(Failure::kPeerLost, std::string("launching ") + describe(*group) + ": " + e.what());
      throw_failure_locked(false);
    }
    group->deadline = Clock::now() + timeout;
    in_flight.push_back(group);
  }

  void flush_locked() {
    if (!pending) return;
    auto group = std::move(pending);
    pending.reset();
    launch_locked(group);
  }

  // True once `group` finished; asks its completion (which may report NCCL's error).
  bool finished_locked(Group& group) {
    if (group.finished) return true;
    if (!group.completion || dead_locked()) return false;
    try {
      if (!group.completion->done()) return false;
    } catch (const Error& e) {
      fail_locked(Failure::kPeerLost, describe(group) + ": " + e.what());
      return false;
    }
    group.finished = true;
    std::erase_if(in_flight, [&](const std::shared_ptr<Group>& g) { return g.get() == &group; });
    return true;
  }

  // One look of the watchdog (mutex held, `superseded` already asked without it).
  void inspect_locked(bool generation_changed) {
    if (dead_locked()) return;
    if (generation_changed) {
      fail_locked(Failure::kPeerLost, "a newer generation exists");
      return;
    }
    nccl::Status status;
    try {
      status = comm->poll();
    } catch (const Error& e) {
      status = {nccl::Status::Code::kFailed, e.what()};
    }
    if (status.code == nccl::Status::Code::kFailed) {
      fail_locked(Failure::kPeerLost, "NCCL reported: " + status.message);
      return;
    }
    const auto now = Clock::now();
    if (!ready) {
      if (now >= init_deadline) {
        fail_locked(Failure::kTimeout, "the NCCL init did not finish within " + std::to_string(timeout.count()) +
                                           " ms (a rank did not join)");
      }
      return;
    }
    for (const auto& group : std::vector<std::shared_ptr<Group>>(in_flight)) {
      if (finished_locked(*group) || dead_locked()) continue;
      if (now >= group->deadline) {
        fail_locked(Failure::kTimeout, describe(*group) + " did not finish within " + std::to_string(timeout.count()) +
                                           " ms of its launch");
        return;
      }
    }
  }

  void watch() {
    std::unique_lock lock(mutex);
    while (!stopping) {
      changed.wait_for(lock, tick, [&] { return stopping; });
      if (stopping || dead_locked()) continue;
      lock.unlock();
      bool generation_changed = false;
      try {
        generation_changed = superseded && superseded();
      } catch (const std::exception& e) {
        log()->warn("NCCL watchdog: asking whether the generation changed failed: {}", e.what());
      }
      lock.lock();
      inspect_locked(generation_changed);
    }
  }

  // Waits for `group` (launching it first when it is still queued) until it finished or `limit`.
  void wait(const std::shared_ptr<Group>& group, Duration limit) {
    const auto deadline = Clock::now() + limit;
    auto sleep = std::chrono::microseconds(20);
    std::unique_lock lock(mutex);
    if (group->finished) return;
    if (dead_locked()) throw_failure_locked(true);
    if (pending == group) flush_locked();
    while (!finished_locked(*group)) {
      if (dead_locked()) throw_failure_locked(true);
      if (Clock::now() >= deadline) {
        fail_locked(Failure::kTimeout, describe(*group) + " was waited for " + std::to_string(limit.count()) + " ms");
        throw_failure_locked(true);
      }
      changed.wait_for(lock, sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::Impl> impl, std::shared_ptr<Group> group)
      : impl_(std::move(impl)), group_(std::move(group)) {}
  void wait(std::chrono::milliseconds timeout) override {
    impl_->wait(group_, timeout > std::chrono::milliseconds::zero() ? timeout : impl_->timeout);
  }

 private:
  std::shared_ptr<NcclCommunicator::Impl> impl_;
  std::shared_ptr<Group> group_;
};

// Waits for the id record rank 0 writes, asking `superseded` between slices.
nccl::UniqueId read_id(const NcclConnectOptions& options, Clock::time_point deadline) {
  const std::vector<std::string> key{std::string(kNcclIdKey)};
  for (;;) {
    if (options.superseded && options.superseded()) throw PeerLost("NCCL bootstrap: a newer generation exists");
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      throw TimeoutError("NCCL bootstrap: rank 0 did not publish " + std::string(kNcclIdKey) + " within " +
                         std::to_string(options.timeout.count()) + " ms");
    }
    try {
      options.store->wait(key, std::min(left, std::chrono::milliseconds(200)));
    } catch (const TimeoutError&) {
      continue;
    }
    if (auto record = options.store->get(kNcclIdKey)) return decode_nccl_id(*record, options.size);
  }
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::connect(const NcclConnectOptions& options,
                                                            std::shared_ptr<nccl::Backend> backend) {
  check_group("NcclCommunicator", options.rank, options.size);
  check_positive("NcclCommunicator", "timeout", options.timeout);
  check_positive("NcclCommunicator", "watchdog tick", options.watchdog_tick);
  check_given(options.store != nullptr, "NcclCommunicator", "store");
  check_given(backend != nullptr, "NcclCommunicator", "backend");
  const auto deadline = Clock::now() + options.timeout;

  nccl::UniqueId id{};
  if (options.rank == 0) {
    id = backend->unique_id();
    options.store->set(kNcclIdKey, encode_nccl_id(options.size, id));
  } else {
    id = read_id(options, deadline);
  }

  auto impl = std::make_shared<Impl>();
  impl->rank = options.rank;
  impl->size = options.size;
  impl->timeout = options.timeout;
  impl->tick = options.watchdog_tick;
  impl->superseded = options.superseded;
  impl->backend = backend;
  impl->init_deadline = deadline;
  impl->comm = backend->init(id, options.size, options.rank);
  impl->watchdog = std::thread([raw = impl.get()] { raw->watch(); });
  std::unique_ptr<NcclCommunicator> result(new NcclCommunicator(impl));  // stops the watchdog on a throw

  std::unique_lock lock(impl->mutex);
  auto sleep = std::chrono::microseconds(100);
  for (;;) {
    if (impl->dead_locked()) impl->throw_failure_locked(true);
    nccl::Status status;
    try {
      status = impl->comm->poll();
    } catch (const Error& e) {
      status = {nccl::Status::Code::kFailed, e.what()};
    }
    if (status.code == nccl::Status::Code::kReady) break;
    if (status.code == nccl::Status::Code::kFailed) {
      impl->fail_locked(Impl::Failure::kPeerLost, "NCCL init failed: " + status.message);
      continue;
    }
    // The watchdog enforces the deadline and asks `superseded`; this loop only notices.
    impl->changed.wait_for(lock, sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
  }
  impl->ready = true;
  return result;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  std::lock_guard lock(impl_->mutex);
  if (!impl_->dead_locked()) {
    for (const auto& group : std::vector<std::shared_ptr<Group>>(impl_->in_flight)) impl_->finished_locked(*group);
    const bool busy = impl_->pending || !impl_->in_flight.empty() || !impl_->ready;
    if (busy) {
      impl_->fail_locked(Impl::Failure::kPeerLost, "destroyed with operations in flight");
    } else {
      impl_->failure_kind = Impl::Failure::kPeerLost;
      impl_->failure = "destroyed";
    }
  }
  impl_->comm.reset();  // ncclCommDestroy when it was healthy and idle; nothing after an abort
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
Communicator::Duration NcclCommunicator::timeout() const { return impl_->timeout; }
ops::Device NcclCommunicator::home() const { return impl_->backend->device(); }

namespace {

std::string what_of(const char* op, const NcclCommunicator::Impl& impl) {
  return std::string("NcclCommunicator::") + op + " (rank " + std::to_string(impl.rank) + " of " +
         std::to_string(impl.size) + ")";
}

void check_reducible(const ops::Tensor& t, const std::string& what) {
  if (!is_reducible(t.dtype())) throw InvalidArgument(what + ": cannot reduce " + ops::dtype_name(t.dtype()));
}

// A message: queued into the pending group (launched by a wait or the next collective).
std::unique_ptr<Work> post_message(const std::shared_ptr<NcclCommunicator::Impl>& impl, const ops::Tensor& buffer,
                                   int peer, Tag tag, Stream stream, bool send) {
  const std::string what = what_of(send ? "isend" : "irecv", *impl);
  check_p2p(what, buffer, peer, tag, impl->size, impl->backend->device());
  nccl::Op op;
  op.kind = send ? Kind::kSend : Kind::kRecv;
  op.send = buffer.raw();
  op.recv = buffer.raw();
  op.count = buffer.numel();
  op.dtype = buffer.dtype();
  op.peer = peer;
  std::lock_guard lock(impl->mutex);
  impl->require_alive_locked();
  if (impl->pending && impl->pending->stream.handle != stream.handle) impl->flush_locked();
  if (!impl->pending) {
    impl->pending = std::make_shared<Group>();
    impl->pending->stream = stream;
  }
  impl->pending->ops.push_back(op);
  return std::make_unique<NcclWork>(impl, impl->pending);
}

// A collective: the queued messages are launched first (program order), then `ops` as one group.
std::unique_ptr<Work> launch_collective(const std::shared_ptr<NcclCommunicator::Impl>& impl,
                                        std::vector<nccl::Op> ops, Stream stream) {
  auto group = std::make_shared<Group>();
  group->ops = std::move(ops);
  group->stream = stream;
  std::lock_guard lock(impl->mutex);
  impl->require_alive_locked();
  impl->flush_locked();
  if (group->ops.empty()) {
    group->finished = true;  // nothing to move (every count zero)
  } else {
    impl->launch_locked(group);
  }
  return std::make_unique<NcclWork>(impl, group);
}

}  // namespace

std::unique_ptr<Work> NcclCommunicator::isend(const ops::Tensor& buffer, int dst, Tag tag, Stream stream) {
  return post_message(impl_, buffer, dst, tag, stream, true);
}

std::unique_ptr<Work> NcclCommunicator::irecv(const ops::Tensor& buffer, int src, Tag tag, Stream stream) {
  return post_message(impl_, buffer, src, tag, stream, false);
}

std::unique_ptr<Work> NcclCommunicator::iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream stream) {
  const std::string what = what_of("iallreduce", *impl_);
  check_tensor(buffer, what, "buffer", impl_->backend->device());
  check_reducible(buffer, what);
  nccl::Op o{Kind::kAllReduce, buffer.raw(), buffer.raw(), buffer.numel(), buffer.dtype(), op, -1};
  return launch_collective(impl_, {o}, stream);
}

std::unique_ptr<Work> NcclCommunicator::ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                        std::span<const std::int64_t> counts, ReduceOp op,
                                                        Stream stream) {
  const std::string what = what_of("ireduce_scatter", *impl_);
  const Blocks blocks =
      check_blocks(what, input, "input", output, "output", counts, impl_->rank, impl_->size, impl_->backend->device());
  check_reducible(input, what);
  const auto& offsets = blocks.offsets;
  std::vector<nccl::Op> ops;
  if (std::all_of(counts.begin(), counts.end(), [&](std::int64_t c) { return c == counts[0]; })) {
    if (counts[0] > 0) ops.push_back({Kind::kReduceScatter, input.raw(), output.raw(), counts[0], input.dtype(), op, -1});
  } else {  // uneven: one reduce to each rank of its block
    for (int r = 0; r < impl_->size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (counts[i] == 0) continue;
      ops.push_back({Kind::kReduce, bytes_of(input) + static_cast<std::size_t>(offsets[i]) * blocks.elem, r == impl_->rank ? output.raw() : nullptr, counts[i],
                     input.dtype(), op, r});
    }
  }
  return launch_collective(impl_, std::move(ops), stream);
}

std::unique_ptr<Work> NcclCommunicator::iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                                   std::span<const std::int64_t> counts, Stream stream) {
  const std::string what = what_of("iallgather", *impl_);
  const Blocks blocks =
      check_blocks(what, output, "output", input, "input", counts, impl_->rank, impl_->size, impl_->backend->device());
  const auto& offsets = blocks.offsets;
  std::vector<nccl::Op> ops;
  if (std::all_of(counts.begin(), counts.end(), [&](std::int64_t c) { return c == counts[0]; })) {
    if (counts[0] > 0) ops.push_back({Kind::kAllGather, input.raw(), output.raw(), counts[0], input.dtype(), ReduceOp::kSum, -1});
  } else {  // uneven: every rank broadcasts its block into its place
    for (int r = 0; r < impl_->size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (counts[i] == 0) continue;
      ops.push_back({Kind::kBroadcast, r == impl_->rank ? input.raw() : nullptr,
                     bytes_of(output) + static_cast<std::size_t>(offsets[i]) * blocks.elem, counts[i], input.dtype(), ReduceOp::kSum, r});
    }
  }
  return launch_collective(impl_, std::move(ops), stream);
}

std::unique_ptr<Work> NcclCommunicator::ibroadcast(const ops::Tensor& buffer, int root, Stream stream) {
  const std::string what = what_of("ibroadcast", *impl_);
  check_tensor(buffer, what, "buffer", impl_->backend->device());
  check_rank(what, "root", root, impl_->size);
  nccl::Op o{Kind::kBroadcast, buffer.raw(), buffer.raw(), buffer.numel(), buffer.dtype(), ReduceOp::kSum, root};
  return launch_collective(impl_, {o}, stream);
}

std::unique_ptr<Work> NcclCommunicator::ibarrier() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->require_alive_locked();
    if (!impl_->barrier_scratch.defined()) {
      impl_->barrier_scratch = ops::Tensor::zeros({1}, ops::DType::kI32, impl_->backend->device());
    }
  }
  const auto& scratch = impl_->barrier_scratch;
  nccl::Op o{Kind::kAllReduce, scratch.raw(), scratch.raw(), 1, ops::DType::kI32, ReduceOp::kSum, -1};
  return launch_collective(impl_, {o}, Stream{});
}

void NcclCommunicator::abort(const std::string& reason) {
  std::lock_guard lock(impl_->mutex);
  impl_->fail_locked(Impl::Failure::kPeerLost, "aborted: " + reason);
}

bool NcclCommunicator::dead() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->dead_locked();
}

std::string NcclCommunicator::failure() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->failure;
}

int NcclCommunicator::aborts() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->aborts;
}

}  // namespace hdp::mesh
