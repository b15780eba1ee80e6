#include "mesh/comm/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "mesh/comm/gloo_store.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Slots (data-plane.md §1.4): Gloo's own collectives use top bytes 0x01-0x08; hdp's start at 0x10.
constexpr std::uint64_t kP2pSlot = std::uint64_t{0x10} << 56;         // | tag (< 2^56)
constexpr std::uint64_t kDescriptorSlot = std::uint64_t{0x11} << 56;  // every collective's descriptor
constexpr std::uint64_t kCollectiveSlot = std::uint64_t{0x12} << 56;  // | seq << 20 | phase
constexpr std::uint64_t kProbeSlot = std::uint64_t{0x13} << 56;       // never sent to: see Impl::probes
constexpr int kPhaseBits = 20;
constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << (56 - kPhaseBits)) - 1;
constexpr int kMaxSize = 1 << (kPhaseBits - 2);  // allreduce uses 2(n-1) phases

std::uint64_t collective_slot(std::uint64_t seq, int phase) {
  return kCollectiveSlot | ((seq & kSeqMask) << kPhaseBits) | static_cast<std::uint64_t>(phase);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// ---- reductions: out[i] = a[i] (op) b[i]; out may be a or b ------------------------------------
using Combine = void (*)(void* out, const void* a, const void* b, std::size_t n);

template <typename T, ReduceOp Op>
void combine(void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (Op == ReduceOp::kSum) o[i] = x[i] + y[i];
    if constexpr (Op == ReduceOp::kMax) o[i] = x[i] < y[i] ? y[i] : x[i];
    if constexpr (Op == ReduceOp::kMin) o[i] = y[i] < x[i] ? y[i] : x[i];
  }
}

template <typename T>
Combine combine_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return &combine<T, ReduceOp::kSum>;
    case ReduceOp::kMax: return &combine<T, ReduceOp::kMax>;
    case ReduceOp::kMin: return &combine<T, ReduceOp::kMin>;
  }
  throw InvalidArgument("reduce op " + std::to_string(static_cast<int>(op)) + " is not sum, max or min");
}

Combine combine_for(ops::DType dtype, ReduceOp op) {
  switch (dtype) {
    case ops::DType::kF32: return combine_for<float>(op);
    case ops::DType::kF64: return combine_for<double>(op);
    case ops::DType::kI32: return combine_for<std::int32_t>(op);
    case ops::DType::kI64: return combine_for<std::int64_t>(op);
  }
  throw InvalidArgument("dtype " + std::to_string(static_cast<int>(dtype)) + " cannot be reduced");
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

// ---- the descriptor every collective starts with ----------------------------------------------
enum class Kind : std::uint32_t { kAllreduce = 1, kReduceScatter, kAllgather, kBroadcast, kBarrier };

const char* kind_name(std::uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

struct Descriptor {
  std::uint64_t magic = kMagic;
  std::uint64_t seq = 0;
  std::uint32_t kind = 0;
  std::int32_t dtype = -1;  // -1: no data (barrier)
  std::int32_t op = -1;     // -1: no reduction
  std::int32_t root = -1;   // broadcast only
  std::int64_t elements = 0;       // numel, or sum(counts)
  std::uint64_t counts_hash = 0;   // reduce_scatter and allgather: FNV-1a of the counts

  static constexpr std::uint64_t kMagic = 0x6864702d636f6c6cULL;  // "hdp-coll"

  bool operator==(const Descriptor&) const = default;
};
static_assert(std::is_trivially_copyable_v<Descriptor> && sizeof(Descriptor) == 48);

std::uint64_t hash_counts(const std::vector<std::int64_t>& counts) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::int64_t c : counts) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<std::uint64_t>(c >> (8 * b)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

std::string describe(const Descriptor& d) {
  if (d.magic != Descriptor::kMagic) return "a message that is not a collective descriptor";
  std::string s = std::string(kind_name(d.kind)) + " #" + std::to_string(d.seq);
  if (d.dtype >= 0) {
    s += " of " + std::to_string(d.elements) + " " + ops::dtype_name(static_cast<ops::DType>(d.dtype));
  }
  if (d.op >= 0) s += std::string(" (") + op_name(static_cast<ReduceOp>(d.op)) + ")";
  if (d.root >= 0) s += " from root " + std::to_string(d.root);
  if (d.kind == static_cast<std::uint32_t>(Kind::kReduceScatter) || d.kind == static_cast<std::uint32_t>(Kind::kAllgather)) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(d.counts_hash));
    s += std::string(", counts hash ") + hex;
  }
  return s;
}

// ---- validation ---------------------------------------------------------------------------------
void check_tensor(const ops::Tensor& t, const std::string& what, const char* name) {
  if (!t.defined()) throw InvalidArgument(what + ": " + name + " is an undefined tensor");
  // ops::Tensor is always dense and contiguous (ops/tensor.h): no stride to check.
  if (t.device() != ops::Device::kCpu) {
    throw InvalidArgument(what + ": " + name + " is " + t.describe() + "; GlooCommunicator takes CPU tensors only");
  }
}

std::vector<std::int64_t> check_counts(std::span<const std::int64_t> counts, int size, const std::string& what) {
  if (std::ssize(counts) != size) {
    throw InvalidArgument(what + ": counts has " + std::to_string(counts.size()) + " entries for " +
                          std::to_string(size) + " ranks");
  }
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) throw InvalidArgument(what + ": counts[" + std::to_string(i) + "] is " + std::to_string(counts[i]));
  }
  return {counts.begin(), counts.end()};
}

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> offsets(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

std::byte* bytes_of(const ops::Tensor& t) { return static_cast<std::byte*>(t.raw()); }

bool overlaps(const std::byte* a, std::size_t a_bytes, const std::byte* b, std::size_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

// The checks reduce_scatter (whole = input, part = output) and allgather (part = input, whole =
// output) share: the same dtype, the part holds counts[rank], the whole sum(counts), and the two
// overlap only where the part is this rank's own block of the whole.
struct Blocks {
  std::vector<std::int64_t> counts, offsets;
  std::size_t elem = 0;
};
Blocks check_blocks(const std::string& what, const ops::Tensor& whole, const char* whole_name, const ops::Tensor& part,
                    const char* part_name, std::span<const std::int64_t> counts_in, int rank, int size) {
  check_tensor(whole, what, whole_name);
  check_tensor(part, what, part_name);
  Blocks b{check_counts(counts_in, size, what), {}, ops::dtype_size(whole.dtype())};
  b.offsets = offsets_of(b.counts);
  if (whole.dtype() != part.dtype()) {
    throw InvalidArgument(what + ": " + whole_name + " is " + whole.describe() + " but " + part_name + " is " +
                          part.describe());
  }
  if (whole.numel() != b.offsets.back()) {
    throw InvalidArgument(what + ": " + whole_name + " has " + std::to_string(whole.numel()) +
                          " elements, the counts sum to " + std::to_string(b.offsets.back()));
  }
  const std::int64_t mine = b.counts[static_cast<std::size_t>(rank)];
  if (part.numel() != mine) {
    throw InvalidArgument(what + ": " + part_name + " has " + std::to_string(part.numel()) + " elements, counts[" +
                          std::to_string(rank) + "] is " + std::to_string(mine));
  }
  const std::byte* own = bytes_of(whole) + static_cast<std::size_t>(b.offsets[static_cast<std::size_t>(rank)]) * b.elem;
  if (overlaps(bytes_of(part), part.bytes(), bytes_of(whole), whole.bytes()) && bytes_of(part) != own) {
    throw InvalidArgument(what + ": " + part_name + " overlaps " + whole_name + " other than as this rank's block");
  }
  return b;
}

// SIGPIPE (common/sigpipe.h): Gloo writes with writev(2) without MSG_NOSIGNAL, so a write to a
// peer that reset the connection raises SIGPIPE (seen here: a survivor of a killed peer died of
// it). It is blocked for good in the threads this file creates (and in Gloo's network thread,
// which inherits the mask of the thread that creates the device), and around each post on a
// caller's thread.

// One Gloo unbound buffer: one message in flight.
struct Op {
  std::shared_ptr<const void> keep;  // owns the memory Gloo reads or writes
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool send = false;
  int peer = -1;
};

// A message from this rank to itself, matched in memory.
struct SelfMessage {
  ops::Tensor buffer;
  bool done = false;  // guarded by Impl::mutex
};

struct Job {
  std::string name;  // "allreduce #3"
  std::function<void(Clock::time_point deadline)> body;
  bool done = false;  // guarded by Impl::mutex
  std::exception_ptr error;
};

}  // namespace

struct GlooCommunicator::Impl {
  Impl(int rank, int size, Millis timeout) : rank(rank), size(size), timeout(timeout) {}

  const int rank;
  const int size;
  const Millis timeout;
  // Destroyed in reverse order: the context (its pairs) before the device (the network thread).
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  // The failure detector. When a connection fails, Gloo signals the operations queued on it, but
  // not one whose bytes are moving at that moment (tcp/pair.cc signalException visits the pending
  // queues, and the message being read or written has left them; unbound sends in the write queue
  // are skipped too), so a recv or send cut mid-transfer would wait out its whole timeout. A probe
  // is one 0-byte recv from every live peer on a slot nobody sends to: it stays queued on every
  // pair, so any pair's failure reaches it. The monitor thread waits on the newest probe; when it
  // fires, it posts a new one (posting to a failed pair throws: that names the lost peers), marks
  // those peers lost and aborts the waits of the operations with them. Those waits then fail the
  // communicator unless their operation had completed before (a peer that sent its last message
  // and closed cleanly, at the end of a generation). A peer that leaves while nothing of ours
  // involves it fails nothing: the next operation with it does (Gloo refuses to post to it).
  // Old probes stay queued on the live pairs until the end (nothing ever arrives for them).
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes;  // guarded by mutex
  std::byte probe_byte{};
  std::vector<bool> lost;      // by peer; written under mutex, by the monitor thread only
  bool monitor_stop = false;   // guarded by mutex
  std::thread monitor;

  mutable std::mutex mutex;
  std::condition_variable changed;  // a job finished, a self message matched, the communicator died/closed
  bool dead = false;
  bool closed = false;  // dead, and the connections closed: Gloo touches no buffer any more
  std::string reason;
  std::unordered_set<std::shared_ptr<Op>> in_flight;
  std::vector<std::shared_ptr<Op>> graveyard;  // never completed; destroyed after the connections closed
  std::map<Tag, std::deque<std::shared_ptr<SelfMessage>>> self_sends, self_recvs;
  std::uint64_t next_seq = 0;
  std::deque<std::shared_ptr<Job>> queue;
  bool running = false;
  bool stopping = false;
  std::condition_variable queue_changed;
  std::thread worker;

  Millis resolve(Millis t) const { return t <= Millis::zero() ? timeout : t; }

  // ---- failure --------------------------------------------------------------------------------
  // Kills the communicator: closes every connection (so nothing is read into or written from a
  // buffer any more), then wakes every wait. A second caller waits until the first has closed.
  void fail(const std::string& why) {
    {
      std::unique_lock lock(mutex);
      if (dead) {
        changed.wait(lock, [&] { return closed; });
        return;
      }
      dead = true;
      reason = why;
    }
    log()->warn("communicator rank {} of {}: {}", rank, size, why);
    close_connections();
    std::lock_guard lock(mutex);
    for (const auto& op : in_flight) {
      if (op->send) {
        op->buffer->abortWaitSend();
      } else {
        op->buffer->abortWaitRecv();
      }
      graveyard.push_back(op);
    }
    in_flight.clear();
    if (!probes.empty()) probes.back()->abortWaitRecv();
    closed = true;
    changed.notify_all();
    queue_changed.notify_all();
  }

  // Hard close (RST) of every pair, in parallel: each Pair::close waits one tick of the network
  // loop (Loop::unregisterDescriptor), so closing n-1 pairs one after another could take
  // (n-1) x 10 ms.
  void close_connections() {
    if (!context) return;
    auto close_pair = [this](int peer) {
      try {
        auto& pair = context->getPair(peer);
        if (pair) pair->close();
      } catch (const std::exception& e) {  // gloo::EnforceNotMet included
        log()->warn("communicator rank {}: closing the connection to rank {}: {}", rank, peer, e.what());
      }
    };
    std::vector<std::thread> closers;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      try {
        closers.emplace_back(close_pair, peer);
      } catch (const std::system_error&) {
        close_pair(peer);  // no thread to spare: close it here
      }
    }
    for (auto& t : closers) t.join();
  }

  // PeerLost for a call on a dead communicator, once its connections are closed.
  [[noreturn]] void throw_dead(std::unique_lock<std::mutex>& lock, const std::string& what) {
    changed.wait(lock, [&] { return closed; });
    throw PeerLost(what + ": " + reason);
  }

  // Turns the exception being handled into hdp's, killing the communicator first.
  [[noreturn]] void rethrow(const std::string& what) {
    std::string message;
    bool timed_out = false;
    try {
      throw;
    } catch (const Error&) {
      throw;  // hdp's own (already handled where it was thrown)
    } catch (const gloo::IoException& e) {
      message = e.what();
      timed_out = message.find("Timed out") != std::string::npos;
    } catch (const gloo::Exception& e) {
      message = e.what();
    } catch (const gloo::EnforceNotMet& e) {
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    }
    const std::string why = what + (timed_out ? ": timed out: " : ": peer lost: ") + message;
    fail(why);
    if (timed_out) throw TimeoutError(why);
    std::lock_guard lock(mutex);
    throw PeerLost(reason == why ? why : what + ": " + reason);
  }

  // Posts a new probe to every peer not yet lost; returns the peers whose pair refused it.
  std::vector<int> arm() {
    auto probe = context->createUnboundBuffer(&probe_byte, 1);
    std::vector<int> failed;
    SigpipeBlock no_sigpipe;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank || lost[static_cast<std::size_t>(peer)]) continue;
      try {
        probe->recv(peer, kProbeSlot, 0, 0);
      } catch (const std::exception&) {  // gloo::IoException, or EnforceNotMet on a closed pair
        failed.push_back(peer);
      }
    }
    std::lock_guard lock(mutex);
    probes.push_back(std::move(probe));
    return failed;
  }

  void start_monitor() {
    lost.assign(static_cast<std::size_t>(size), false);
    if (size == 1) return;
    if (!arm().empty()) throw PeerLost("a connection failed right after the bootstrap");
    monitor = std::thread([this] {
      block_sigpipe_in_this_thread();
      run_monitor();
    });
  }

  void run_monitor() {
    // No deadline of its own (a year): it ends when the communicator dies or shuts down, or every
    // peer is lost. Gloo's wait_for(huge) would overflow, hence not "max".
    constexpr auto kForever = std::chrono::hours(24 * 365);
    for (;;) {
      gloo::transport::UnboundBuffer* probe = nullptr;
      {
        std::lock_guard lock(mutex);
        if (monitor_stop || dead) return;
        probe = probes.back().get();
      }
      std::string message;
      try {
        if (!probe->waitRecv(nullptr, kForever)) return;  // aborted by fail() or shutdown()
        fail("a peer sent on the probe slot, which no hdp code uses");
        return;
      } catch (const std::exception& e) {  // gloo::EnforceNotMet included
        message = e.what();
      }
      const std::vector<int> failed = arm();
      std::unique_lock lock(mutex);
      if (monitor_stop || dead) return;
      if (failed.empty()) {
        lock.unlock();
        fail("peer lost: " + message);  // cannot tell which: give up on all
        return;
      }
      std::string names;
      for (int peer : failed) {
        lost[static_cast<std::size_t>(peer)] = true;
        names += (names.empty() ? "" : ", ") + std::to_string(peer);
      }
      int aborted = 0;
      for (const auto& op : in_flight) {
        if (!lost[static_cast<std::size_t>(op->peer)]) continue;
        if (op->send) {
          op->buffer->abortWaitSend();
        } else {
          op->buffer->abortWaitRecv();
        }
        ++aborted;
      }
      log()->debug("communicator rank {} of {}: lost rank(s) {} ({}); {} wait(s) with them aborted", rank, size, names,
                   message, aborted);
      if (std::count(lost.begin(), lost.end(), true) == size - 1) return;  // nothing left to watch
    }
  }

  // ---- one message ----------------------------------------------------------------------------
  std::shared_ptr<Op> post(std::shared_ptr<const void> keep, void* ptr, std::size_t bytes, bool send, int peer,
                           std::uint64_t slot, const std::string& what) {
    auto op = std::make_shared<Op>();
    op->keep = std::move(keep);
    op->send = send;
    op->peer = peer;
    op->buffer = context->createUnboundBuffer(ptr, bytes);
    {
      std::unique_lock lock(mutex);
      if (dead) throw_dead(lock, what);
      in_flight.insert(op);
    }
    try {
      SigpipeBlock no_sigpipe;
      if (send) {
        op->buffer->send(peer, slot, 0, bytes);
      } else {
        op->buffer->recv(peer, slot, 0, bytes);
      }
    } catch (...) {
      rethrow(what);
    }
    return op;
  }

  void wait(const std::shared_ptr<Op>& op, Clock::time_point deadline, const std::string& what) {
    {
      std::unique_lock lock(mutex);
      if (!in_flight.contains(op)) throw_dead(lock, what);  // moved to the graveyard by fail()
    }
    // Never 0: Gloo's wait_for(0) times out at once and fails the context.
    const auto left = std::max(Millis(1), std::chrono::ceil<Millis>(deadline - Clock::now()));
    bool completed = false;
    try {
      completed = op->send ? op->buffer->waitSend(nullptr, left) : op->buffer->waitRecv(nullptr, left);
    } catch (...) {
      rethrow(what);
    }
    if (!completed) completed = completed_anyway(*op);
    std::unique_lock lock(mutex);
    if (!completed) {
      if (dead) throw_dead(lock, what);
      lock.unlock();  // aborted by the monitor: its peer is gone
      const std::string why = what + ": peer lost: rank " + std::to_string(op->peer) + " closed its connection";
      fail(why);
      throw PeerLost(why);
    }
    // Complete: no Gloo queue names the buffer any more. (If fail() moved it to the graveyard in
    // the meantime, it is destroyed there.)
    if (in_flight.erase(op)) op->buffer.reset();
  }

  // After an aborted wait: whether the operation had completed all the same (Gloo checks the abort
  // flag before the completion count). A 1 ms wait answers; when the operation is incomplete,
  // Gloo then times out and closes every pair, which is what comes next anyway (the
  // communicator is failing, or the operation's peer is lost).
  static bool completed_anyway(Op& op) {
    try {
      return op.send ? op.buffer->waitSend(nullptr, Millis(1)) : op.buffer->waitRecv(nullptr, Millis(1));
    } catch (const std::exception&) {  // gloo::EnforceNotMet included
      return false;
    }
  }

  // ---- messages to self -----------------------------------------------------------------------
  std::shared_ptr<SelfMessage> post_self(const ops::Tensor& buffer, bool send, Tag tag, const std::string& what) {
    std::unique_lock lock(mutex);
    if (dead) throw_dead(lock, what);
    auto message = std::make_shared<SelfMessage>(SelfMessage{buffer});
    auto& other = send ? self_recvs : self_sends;
    auto it = other.find(tag);
    if (it == other.end()) {
      (send ? self_sends : self_recvs)[tag].push_back(message);
      return message;
    }
    auto peer = it->second.front();
    const auto& from = send ? buffer : peer->buffer;
    const auto& to = send ? peer->buffer : buffer;
    if (from.bytes() != to.bytes()) {
      throw InvalidArgument(what + ": the send to self is " + std::to_string(from.bytes()) +
                            " bytes, the matching recv " + std::to_string(to.bytes()));
    }
    std::memcpy(to.raw(), from.raw(), from.bytes());
    it->second.pop_front();
    if (it->second.empty()) other.erase(it);
    peer->done = message->done = true;
    changed.notify_all();
    return message;
  }

  void wait_self(const SelfMessage& message, Clock::time_point deadline, Millis timeout, const std::string& what) {
    std::unique_lock lock(mutex);
    if (changed.wait_until(lock, deadline, [&] { return message.done || dead; })) {
      if (message.done) return;
      throw_dead(lock, what);
    }
    lock.unlock();
    const std::string why = what + ": not matched within " + std::to_string(timeout.count()) + " ms";
    fail(why);
    throw TimeoutError(why);
  }

  // ---- collectives ----------------------------------------------------------------------------
  std::shared_ptr<Job> start(Kind kind, std::function<void(std::uint64_t seq, Clock::time_point deadline)> body) {
    auto job = std::make_shared<Job>();
    std::unique_lock lock(mutex);
    const std::uint64_t seq = next_seq++;
    job->name = std::string(kind_name(static_cast<std::uint32_t>(kind))) + " #" + std::to_string(seq);
    if (dead) throw_dead(lock, job->name);
    job->body = [seq, body = std::move(body)](Clock::time_point deadline) { body(seq, deadline); };
    queue.push_back(job);
    queue_changed.notify_all();
    return job;
  }

  void run_worker() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex);
        queue_changed.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
        running = true;
      }
      std::exception_ptr error;
      try {
        {
          std::unique_lock lock(mutex);
          if (dead) throw_dead(lock, job->name);
        }
        job->body(Clock::now() + timeout);
      } catch (const Error&) {
        error = std::current_exception();
      } catch (const std::exception& e) {
        // Not a communication failure (e.g. bad_alloc), but the ranks are out of step now.
        fail(job->name + ": " + e.what());
        error = std::current_exception();
      }
      std::lock_guard lock(mutex);
      job->done = true;
      job->error = error;
      running = false;
      changed.notify_all();
    }
  }

  void wait_job(const Job& job, Millis timeout) {
    const Millis t = resolve(timeout);
    std::unique_lock lock(mutex);
    if (!changed.wait_until(lock, Clock::now() + t, [&] { return job.done; })) {
      lock.unlock();
      const std::string why = job.name + ": not complete within " + std::to_string(t.count()) + " ms";
      fail(why);
      lock.lock();
      // Every wait of the worker has been aborted, so the job ends within moments; wait for it so
      // that the worker no longer touches the caller's buffers when this throws. The bound only
      // guards against a reduction loop still running on a huge buffer.
      changed.wait_for(lock, timeout_grace(), [&] { return job.done; });
      throw TimeoutError(why);
    }
    if (job.error) std::rethrow_exception(job.error);
  }

  Millis timeout_grace() const { return std::max(Millis(1000), timeout); }

  // Every collective's first step: the same fixed-size message to and from both ring neighbours,
  // on one slot for all collectives (FIFO per peer and slot keeps them in collective order).
  void exchange_descriptor(const Descriptor& mine, Clock::time_point deadline, const std::string& what) {
    if (size == 1) return;
    const int next = mod(rank + 1, size), prev = mod(rank - 1, size);
    auto space = std::make_shared<std::array<Descriptor, 3>>();
    (*space)[0] = mine;
    const int peers = size == 2 ? 1 : 2;
    std::vector<std::shared_ptr<Op>> ops;
    ops.push_back(post(space, &(*space)[1], sizeof(Descriptor), false, prev, kDescriptorSlot, what));
    if (peers == 2) ops.push_back(post(space, &(*space)[2], sizeof(Descriptor), false, next, kDescriptorSlot, what));
    ops.push_back(post(space, &(*space)[0], sizeof(Descriptor), true, next, kDescriptorSlot, what));
    if (peers == 2) ops.push_back(post(space, &(*space)[0], sizeof(Descriptor), true, prev, kDescriptorSlot, what));
    for (const auto& op : ops) wait(op, deadline, what);
    for (int i = 1; i <= peers; ++i) {
      const Descriptor& theirs = (*space)[i];
      if (theirs == mine) continue;
      const int peer = i == 1 ? prev : next;
      const std::string why = "collectives differ across ranks: rank " + std::to_string(rank) + " started " +
                              describe(mine) + ", rank " + std::to_string(peer) + " started " + describe(theirs);
      fail(why);
      throw InvalidArgument(why);
    }
  }

  // Ring reduce-scatter (data-plane.md §4): at step s, send block (r-s-1) to r+1 and receive block
  // (r-s-2) from r-1, adding this rank's own part; block r ends fully reduced. `in` is never
  // written; `out` may be in's block r. Messages of zero elements are skipped on both sides (the
  // counts are the same everywhere, the descriptor checked that).
  void reduce_scatter(std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_in, const std::byte* in,
                      std::byte* out, const std::vector<std::int64_t>& counts, ops::DType dtype, Combine combine,
                      Clock::time_point deadline, const std::string& what) {
    const std::size_t elem = ops::dtype_size(dtype);
    const auto off = offsets_of(counts);
    if (size == 1) {
      if (out != in) std::memmove(out, in, static_cast<std::size_t>(counts[0]) * elem);
      return;
    }
    const int next = mod(rank + 1, size), prev = mod(rank - 1, size);
    const std::int64_t widest = *std::max_element(counts.begin(), counts.end());
    auto scratch = std::make_shared<ops::Tensor>(ops::Tensor::empty({2 * widest}, dtype));
    std::byte* half[2] = {bytes_of(*scratch), bytes_of(*scratch) + static_cast<std::size_t>(widest) * elem};
    for (int s = 0; s < size - 1; ++s) {
      const int sb = mod(rank - s - 1, size), rb = mod(rank - s - 2, size);
      const std::byte* src = s == 0 ? in + static_cast<std::size_t>(off[sb]) * elem : half[(s - 1) % 2];
      std::byte* dst = half[s % 2];
      const std::uint64_t slot = collective_slot(seq, phase0 + s);
      std::shared_ptr<Op> recv, send;
      if (counts[rb] > 0) recv = post(scratch, dst, static_cast<std::size_t>(counts[rb]) * elem, false, prev, slot, what);
      if (counts[sb] > 0) {
        send = post(s == 0 ? keep_in : scratch, const_cast<std::byte*>(src), static_cast<std::size_t>(counts[sb]) * elem,
                    true, next, slot, what);
      }
      if (recv) wait(recv, deadline, what);
      if (send) wait(send, deadline, what);
      const auto n = static_cast<std::size_t>(counts[rb]);
      if (s < size - 2) {
        combine(dst, dst, in + static_cast<std::size_t>(off[rb]) * elem, n);
      } else {
        combine(out, in + static_cast<std::size_t>(off[rank]) * elem, dst, n);  // rb == rank
      }
    }
  }

  // Ring allgather: at step s, send block (r-s) to r+1 and receive block (r-s-1) from r-1.
  void allgather(std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_out, const std::byte* in,
                 std::byte* out, const std::vector<std::int64_t>& counts, std::size_t elem,
                 Clock::time_point deadline, const std::string& what) {
    const auto off = offsets_of(counts);
    std::byte* own = out + static_cast<std::size_t>(off[rank]) * elem;
    if (own != in) std::memmove(own, in, static_cast<std::size_t>(counts[rank]) * elem);
    const int next = mod(rank + 1, size), prev = mod(rank - 1, size);
    for (int s = 0; s < size - 1; ++s) {
      const int sb = mod(rank - s, size), rb = mod(rank - s - 1, size);
      const std::uint64_t slot = collective_slot(seq, phase0 + s);
      std::shared_ptr<Op> recv, send;
      if (counts[rb] > 0) {
        recv = post(keep_out, out + static_cast<std::size_t>(off[rb]) * elem, static_cast<std::size_t>(counts[rb]) * elem,
                    false, prev, slot, what);
      }
      if (counts[sb] > 0) {
        send = post(keep_out, out + static_cast<std::size_t>(off[sb]) * elem, static_cast<std::size_t>(counts[sb]) * elem,
                    true, next, slot, what);
      }
      if (recv) wait(recv, deadline, what);
      if (send) wait(send, deadline, what);
    }
  }

  // Binomial tree from `root`: in round k, relative ranks below 2^k send to v + 2^k.
  void broadcast(std::uint64_t seq, const std::shared_ptr<const void>& keep, std::byte* data, std::size_t bytes,
                 int root, Clock::time_point deadline, const std::string& what) {
    if (bytes == 0) return;
    const int v = mod(rank - root, size);
    std::vector<std::shared_ptr<Op>> sends;
    int phase = 0;
    for (int mask = 1; mask < size; mask <<= 1, ++phase) {
      if (v < mask) {
        if (v + mask < size) sends.push_back(post(keep, data, bytes, true, mod(v + mask + root, size), collective_slot(seq, phase), what));
      } else if (v < 2 * mask) {
        wait(post(keep, data, bytes, false, mod(v - mask + root, size), collective_slot(seq, phase), what), deadline, what);
      }
    }
    for (const auto& op : sends) wait(op, deadline, what);
  }

  // Dissemination: in round k, one byte to r + 2^k and one from r - 2^k.
  void barrier(std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    auto token = std::make_shared<std::array<std::byte, 2>>();
    int phase = 0;
    for (int k = 1; k < size; k <<= 1, ++phase) {
      auto recv = post(token, &(*token)[1], 1, false, mod(rank - k, size), collective_slot(seq, phase), what);
      auto send = post(token, &(*token)[0], 1, true, mod(rank + k, size), collective_slot(seq, phase), what);
      wait(recv, deadline, what);
      wait(send, deadline, what);
    }
  }

  // ---- teardown -------------------------------------------------------------------------------
  void shutdown() {
    bool busy = false;
    {
      std::lock_guard lock(mutex);
      busy = !in_flight.empty() || !queue.empty() || running;
      stopping = true;
    }
    if (busy) fail("the communicator was destroyed with operations in flight");
    queue_changed.notify_all();
    if (worker.joinable()) worker.join();
    {
      std::lock_guard lock(mutex);
      monitor_stop = true;
      if (!probes.empty()) probes.back()->abortWaitRecv();
    }
    if (monitor.joinable()) monitor.join();
    std::lock_guard lock(mutex);
    if (!dead) {
      dead = closed = true;
      reason = "the communicator was destroyed";
    }
    // Connections: closed hard by fail(), or closed gently (FIN) when the last buffer and the
    // context are gone (the pairs' destructors). The probes are still queued on open pairs when
    // this communicator is healthy; destroying them then is safe because nothing is ever sent to
    // their slot (what makes a destroyed buffer wedge a pair is data arriving for it).
    for (const auto& op : graveyard) op->buffer.reset();
    graveyard.clear();
    probes.clear();
    context.reset();
    device.reset();
    changed.notify_all();
  }
};

namespace {

class P2pWork final : public Work {
 public:
  P2pWork(std::shared_ptr<GlooCommunicator::Impl> impl, std::shared_ptr<Op> op, std::shared_ptr<SelfMessage> self,
          std::string what)
      : impl_(std::move(impl)), op_(std::move(op)), self_(std::move(self)), what_(std::move(what)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (finished_) return;
    const Millis t = impl_->resolve(timeout);
    if (self_) {
      impl_->wait_self(*self_, Clock::now() + t, t, what_);
    } else {
      impl_->wait(op_, Clock::now() + t, what_);
    }
    finished_ = true;
  }

 private:
  std::shared_ptr<GlooCommunicator::Impl> impl_;
  std::shared_ptr<Op> op_;
  std::shared_ptr<SelfMessage> self_;
  std::string what_;
  bool finished_ = false;
};

class CollectiveWork final : public Work {
 public:
  CollectiveWork(std::shared_ptr<GlooCommunicator::Impl> impl, std::shared_ptr<Job> job)
      : impl_(std::move(impl)), job_(std::move(job)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (finished_) return;
    impl_->wait_job(*job_, timeout);
    finished_ = true;
  }

 private:
  std::shared_ptr<GlooCommunicator::Impl> impl_;
  std::shared_ptr<Job> job_;
  bool finished_ = false;
};

std::string p2p_name(const char* kind, int peer, Tag tag) {
  return std::string(kind) + (kind[0] == 's' ? " to rank " : " from rank ") + std::to_string(peer) + " tag " +
         std::to_string(tag);
}

}  // namespace

// ---- GlooCommunicator ---------------------------------------------------------------------------

GlooCommunicator::GlooCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

GlooCommunicator::~GlooCommunicator() { impl_->shutdown(); }


namespace {

// The bootstrap: Gloo's connectFullMesh, which waits in the store (GlooStore: hdp's deadline, and
// `superseded` every 250 ms) and then in each pair's connect (Gloo's own wait, which nothing
// cancels: a peer that stopped or vanished after publishing its address holds it for the pair's
// timeout). So it runs on a thread of its own while the caller asks `superseded` every 100 ms and
// gives up with PeerLost as soon as it says so. An abandoned bootstrap thread runs on until Gloo's
// waits end (each bounded by the timeout) and then drops what it built; it no longer calls
// `superseded` (whose captures may be gone by then) and owns everything else it touches.
std::shared_ptr<gloo::rendezvous::Context> bootstrap_context(const GlooConnectOptions& options,
                                                             std::shared_ptr<gloo::transport::Device> device,
                                                             const std::string& what) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::mutex superseded_mutex;  // held while `superseded` runs; `abandoned` set under it
    bool abandoned = false;
    std::function<bool()> superseded;
  };
  auto state = std::make_shared<State>();
  state->superseded = options.superseded;
  std::function<bool()> guarded;
  if (options.superseded) {
    guarded = [state] {
      std::lock_guard lock(state->superseded_mutex);
      return state->abandoned || state->superseded();
    };
  }
  std::thread([state, options_store = options.store, rank = options.rank, size = options.size,
               timeout = options.timeout, device, guarded]() mutable {
    block_sigpipe_in_this_thread();
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::exception_ptr error;
    try {
      context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      // Gloo copies this into every pair, where it bounds each pair's connect at 5x the value
      // (tcp/pair.h waitUntil) and is the default of waits that name no timeout (hdp's always do).
      // A fifth keeps one connect within `timeout`; GlooStore bounds the store waits by its own
      // deadline.
      context->setTimeout(std::max(Millis(1), timeout / 5));
      GlooStore store(options_store, timeout, guarded);
      context->connectFullMesh(store, device);
    } catch (...) {
      error = std::current_exception();
      context.reset();
    }
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->error = error;
    if (!state->abandoned) state->context = std::move(context);
    state->done_cv.notify_all();
  }).detach();

  auto abandon = [&] {
    std::scoped_lock lock(state->superseded_mutex, state->mutex);
    state->abandoned = true;
    state->context.reset();
  };
  constexpr Millis kCheckEvery{100};
  // Gloo's own waits end every attempt within the timeout (store) plus size - 1 pair connects of
  // a fifth of it each; the caller's bound adds a margin over that.
  const auto deadline = Clock::now() + options.timeout + (options.size - 1) * (options.timeout / 5) + Millis(1000);
  for (;;) {
    {
      std::unique_lock lock(state->mutex);
      if (state->done_cv.wait_for(lock, kCheckEvery, [&] { return state->done; })) break;
    }
    if (guarded && guarded()) {  // under the mutex: the bootstrap thread may be asking too
      abandon();
      throw PeerLost(what + ": the generation was superseded before every peer connected");
    }
    if (Clock::now() >= deadline) {
      abandon();
      throw TimeoutError(what + ": the bootstrap did not finish within " + std::to_string(options.timeout.count()) +
                         " ms");
    }
  }
  try {
    if (state->error) std::rethrow_exception(state->error);
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const std::string message = e.what();
    if (message.find("timeout") != std::string::npos) throw TimeoutError(what + ": " + message);
    throw PeerLost(what + ": " + message);
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet
    throw PeerLost(what + ": " + e.what());
  }
  return std::move(state->context);
}

}  // namespace

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(const GlooConnectOptions& options) {
  if (options.size < 1 || options.size > kMaxSize) {
    throw InvalidArgument("communicator size " + std::to_string(options.size) + " is not in [1, " +
                          std::to_string(kMaxSize) + "]");
  }
  if (options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("rank " + std::to_string(options.rank) + " is not in [0, " + std::to_string(options.size) + ")");
  }
  if (options.timeout <= Millis::zero()) {
    throw InvalidArgument("communicator timeout " + std::to_string(options.timeout.count()) + " ms is not positive");
  }
  if (!options.store) throw InvalidArgument("communicator bootstrap: no store");

  auto impl = std::make_shared<Impl>(options.rank, options.size, options.timeout);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    SigpipeBlock no_sigpipe;  // inherited by the device's network thread, created here
    impl->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {  // gloo::EnforceNotMet included
    throw InvalidArgument("communicator: cannot listen on '" + options.hostname + "': " + e.what());
  }
  const std::string what = "connecting rank " + std::to_string(options.rank) + " of " + std::to_string(options.size);
  impl->context = bootstrap_context(options, impl->device, what);
  impl->start_monitor();
  Impl* raw = impl.get();
  impl->worker = std::thread([raw] {
    block_sigpipe_in_this_thread();
    raw->run_worker();
  });
  return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(std::move(impl)));
}

int GlooCommunicator::rank() const { return impl_->rank; }
int GlooCommunicator::size() const { return impl_->size; }
Communicator::Duration GlooCommunicator::timeout() const { return impl_->timeout; }

bool GlooCommunicator::dead() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->dead;
}

void GlooCommunicator::abort(const std::string& reason) { impl_->fail("aborted: " + reason); }

std::unique_ptr<Work> GlooCommunicator::isend(const ops::Tensor& buffer, int dst, Tag tag, Stream) {
  const std::string what = p2p_name("send", dst, tag);
  check_tensor(buffer, what, "buffer");
  if (dst < 0 || dst >= size()) throw InvalidArgument(what + ": rank " + std::to_string(dst) + " is not in [0, " + std::to_string(size()) + ")");
  if (tag >= kMaxTag) throw InvalidArgument(what + ": tag " + std::to_string(tag) + " is reserved (at or above 2^56)");
  if (dst == rank()) return std::make_unique<P2pWork>(impl_, nullptr, impl_->post_self(buffer, true, tag, what), what);
  auto op = impl_->post(std::make_shared<ops::Tensor>(buffer), buffer.raw(), buffer.bytes(), true, dst, kP2pSlot | tag, what);
  return std::make_unique<P2pWork>(impl_, std::move(op), nullptr, what);
}

std::unique_ptr<Work> GlooCommunicator::irecv(const ops::Tensor& buffer, int src, Tag tag, Stream) {
  const std::string what = p2p_name("recv", src, tag);
  check_tensor(buffer, what, "buffer");
  if (src < 0 || src >= size()) throw InvalidArgument(what + ": rank " + std::to_string(src) + " is not in [0, " + std::to_string(size()) + ")");
  if (tag >= kMaxTag) throw InvalidArgument(what + ": tag " + std::to_string(tag) + " is reserved (at or above 2^56)");
  if (src == rank()) return std::make_unique<P2pWork>(impl_, nullptr, impl_->post_self(buffer, false, tag, what), what);
  auto op = impl_->post(std::make_shared<ops::Tensor>(buffer), buffer.raw(), buffer.bytes(), false, src, kP2pSlot | tag, what);
  return std::make_unique<P2pWork>(impl_, std::move(op), nullptr, what);
}

std::unique_ptr<Work> GlooCommunicator::iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream) {
  check_tensor(buffer, "allreduce", "buffer");
  const Combine combine = combine_for(buffer.dtype(), op);
  Descriptor d;
  d.kind = static_cast<std::uint32_t>(Kind::kAllreduce);
  d.dtype = static_cast<std::int32_t>(buffer.dtype());
  d.op = static_cast<std::int32_t>(op);
  d.elements = buffer.numel();
  Impl* impl = impl_.get();
  auto job = impl_->start(Kind::kAllreduce, [impl, buffer, d, combine](std::uint64_t seq, Clock::time_point deadline) {
    Descriptor mine = d;
    mine.seq = seq;
    const std::string what = "allreduce #" + std::to_string(seq);
    impl->exchange_descriptor(mine, deadline, what);
    const int n = impl->size;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) counts[static_cast<std::size_t>(i)] = d.elements / n + (i < d.elements % n ? 1 : 0);
    const std::size_t elem = ops::dtype_size(buffer.dtype());
    std::byte* data = bytes_of(buffer);
    std::byte* own = data + static_cast<std::size_t>(offsets_of(counts)[static_cast<std::size_t>(impl->rank)]) * elem;
    auto keep = std::make_shared<ops::Tensor>(buffer);
    impl->reduce_scatter(seq, 0, keep, data, own, counts, buffer.dtype(), combine, deadline, what);
    if (n > 1) impl->allgather(seq, n - 1, keep, own, data, counts, elem, deadline, what);
  });
  return std::make_unique<CollectiveWork>(impl_, std::move(job));
}

std::unique_ptr<Work> GlooCommunicator::ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                        std::span<const std::int64_t> counts_in, ReduceOp op, Stream) {
  const Blocks blocks = check_blocks("reduce_scatter", input, "input", output, "output", counts_in, rank(), size());
  const std::vector<std::int64_t>& counts = blocks.counts;
  const Combine combine = combine_for(input.dtype(), op);
  Descriptor d;
  d.kind = static_cast<std::uint32_t>(Kind::kReduceScatter);
  d.dtype = static_cast<std::int32_t>(input.dtype());
  d.op = static_cast<std::int32_t>(op);
  d.elements = blocks.offsets.back();
  d.counts_hash = hash_counts(counts);
  Impl* impl = impl_.get();
  auto job = impl_->start(Kind::kReduceScatter, [impl, input, output, counts, d, combine](std::uint64_t seq,
                                                                                          Clock::time_point deadline) {
    Descriptor mine = d;
    mine.seq = seq;
    const std::string name = "reduce_scatter #" + std::to_string(seq);
    impl->exchange_descriptor(mine, deadline, name);
    impl->reduce_scatter(seq, 0, std::make_shared<ops::Tensor>(input), bytes_of(input), bytes_of(output), counts,
                         input.dtype(), combine, deadline, name);
  });
  return std::make_unique<CollectiveWork>(impl_, std::move(job));
}

std::unique_ptr<Work> GlooCommunicator::iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                                   std::span<const std::int64_t> counts_in, Stream) {
  const Blocks blocks = check_blocks("allgather", output, "output", input, "input", counts_in, rank(), size());
  const std::vector<std::int64_t>& counts = blocks.counts;
  const std::size_t elem = blocks.elem;
  Descriptor d;
  d.kind = static_cast<std::uint32_t>(Kind::kAllgather);
  d.dtype = static_cast<std::int32_t>(input.dtype());
  d.elements = blocks.offsets.back();
  d.counts_hash = hash_counts(counts);
  Impl* impl = impl_.get();
  auto job = impl_->start(Kind::kAllgather, [impl, input, output, counts, d, elem](std::uint64_t seq,
                                                                                   Clock::time_point deadline) {
    Descriptor mine = d;
    mine.seq = seq;
    const std::string name = "allgather #" + std::to_string(seq);
    impl->exchange_descriptor(mine, deadline, name);
    impl->allgather(seq, 0, std::make_shared<ops::Tensor>(output), bytes_of(input), bytes_of(output), counts, elem,
                    deadline, name);
  });
  return std::make_unique<CollectiveWork>(impl_, std::move(job));
}

std::unique_ptr<Work> GlooCommunicator::ibroadcast(const ops::Tensor& buffer, int root, Stream) {
  check_tensor(buffer, "broadcast", "buffer");
  if (root < 0 || root >= size()) {
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " is not in [0, " + std::to_string(size()) + ")");
  }
  Descriptor d;
  d.kind = static_cast<std::uint32_t>(Kind::kBroadcast);
  d.dtype = static_cast<std::int32_t>(buffer.dtype());
  d.root = root;
  d.elements = buffer.numel();
  Impl* impl = impl_.get();
  auto job = impl_->start(Kind::kBroadcast, [impl, buffer, d, root](std::uint64_t seq, Clock::time_point deadline) {
    Descriptor mine = d;
    mine.seq = seq;
    const std::string name = "broadcast #" + std::to_string(seq);
    impl->exchange_descriptor(mine, deadline, name);
    impl->broadcast(seq, std::make_shared<ops::Tensor>(buffer), bytes_of(buffer), buffer.bytes(), root, deadline, name);
  });
  return std::make_unique<CollectiveWork>(impl_, std::move(job));
}

std::unique_ptr<Work> GlooCommunicator::ibarrier() {
  Descriptor d;
  d.kind = static_cast<std::uint32_t>(Kind::kBarrier);
  Impl* impl = impl_.get();
  auto job = impl_->start(Kind::kBarrier, [impl, d](std::uint64_t seq, Clock::time_point deadline) {
    Descriptor mine = d;
    mine.seq = seq;
    const std::string name = "barrier #" + std::to_string(seq);
    impl->exchange_descriptor(mine, deadline, name);
    impl->barrier(seq, deadline, name);
  });
  return std::make_unique<CollectiveWork>(impl_, std::move(job));
}

}  // namespace hdp::mesh
