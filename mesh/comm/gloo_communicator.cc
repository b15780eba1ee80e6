#include "mesh/comm/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "mesh/comm/bootstrap.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/collectives.h"
#include "mesh/comm/descriptor.h"
#include "mesh/comm/peer_monitor.h"
#include "mesh/comm/reductions.h"
#include "mesh/comm/self_messages.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// SIGPIPE (common/sigpipe.h): Gloo writes with writev(2) without MSG_NOSIGNAL, so a write to a
// peer that reset the connection raises SIGPIPE (seen here: a survivor of a killed peer died of
// it). It is blocked for good in the threads mesh/comm creates (the worker here, the monitor
// thread in peer_monitor.cc, the bootstrap thread in bootstrap.cc; and in Gloo's network thread,
// which inherits the mask of the thread that creates the device, bootstrap.cc), and around each
// post on a caller's thread.

// One Gloo unbound buffer: one message in flight.
struct Op final : Transport::Message {
  std::shared_ptr<const void> keep;  // owns the memory Gloo reads or writes
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool send = false;
  int peer = -1;

  // Wakes a wait on it (which then returns false, unless the message had arrived before).
  void abort_wait() const {
    if (send) {
      buffer->abortWaitSend();
    } else {
      buffer->abortWaitRecv();
    }
  }
};

// What a collective runs on the worker after the descriptor exchange.
using CollectiveBody = std::function<void(std::uint64_t seq, Clock::time_point deadline, const std::string& what)>;

struct Job {
  Descriptor descriptor;  // with the collective's sequence number
  std::string name;       // "allreduce #3", built once: every error message of the collective names it
  CollectiveBody body;
  bool done = false;  // guarded by Impl::mutex
  std::exception_ptr error;
};

}  // namespace

// The communicator's state, and the transport its collectives run over (collectives.h): posting
// and waiting below are that transport's Gloo implementation.
struct GlooCommunicator::Impl final : Transport {
  Impl(int rank, int size, Millis timeout) : Transport(rank, size), timeout(timeout) {}

  const Millis timeout;
  // Destroyed in reverse order: the monitor (its probes) before the context (its pairs) before
  // the device (the network thread).
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<PeerMonitor> monitor;  // the failure detector (peer_monitor.h)
  std::vector<bool> lost;  // by peer, as the monitor reported them; guarded by mutex

  mutable std::mutex mutex;
  std::condition_variable changed;  // a job finished, a self message matched, the communicator died/closed
  bool dead = false;
  bool closed = false;  // dead, and the connections closed: Gloo touches no buffer any more
  std::string reason;
  std::unordered_set<std::shared_ptr<Op>> in_flight;
  std::vector<std::shared_ptr<Op>> graveyard;  // never completed; destroyed after the connections closed
  SelfMessages self_messages;  // to and from this rank itself (self_messages.h)
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
  void fail(const std::string& why) override {
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
      op->abort_wait();
      graveyard.push_back(op);
    }
    in_flight.clear();
    if (monitor) monitor->stop();
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

  // The monitor's report (peer_monitor.h): the connections to `peers` failed. Aborts the waits of
  // the operations with every peer lost so far.
  void on_lost(const std::vector<int>& peers, const std::string& message) {
    std::lock_guard lock(mutex);
    if (dead) return;
    std::string names;
    for (int peer : peers) {
      lost[static_cast<std::size_t>(peer)] = true;
      names += (names.empty() ? "" : ", ") + std::to_string(peer);
    }
    int aborted = 0;
    for (const auto& op : in_flight) {
      if (!lost[static_cast<std::size_t>(op->peer)]) continue;
      op->abort_wait();
      ++aborted;
    }
    log()->debug("communicator rank {} of {}: lost rank(s) {} ({}); {} wait(s) with them aborted", rank, size, names,
                 message, aborted);
  }

  void start_monitor() {
    lost.assign(static_cast<std::size_t>(size), false);
    PeerMonitor::Callbacks callbacks;
    callbacks.lost = [this](const std::vector<int>& peers, const std::string& why) { on_lost(peers, why); };
    callbacks.fail = [this](const std::string& why) { fail(why); };
    monitor = std::make_unique<PeerMonitor>(*context, rank, size, kProbeSlot, std::move(callbacks));
    monitor->start();
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

  // The transport of the collectives (collectives.h).
  std::shared_ptr<Message> post_send(std::shared_ptr<const void> keep, const void* data, std::size_t bytes, int peer,
                                     std::uint64_t slot, const std::string& what) override {
    return post(std::move(keep), const_cast<void*>(data), bytes, true, peer, slot, what);
  }
  std::shared_ptr<Message> post_recv(std::shared_ptr<const void> keep, void* data, std::size_t bytes, int peer,
                                     std::uint64_t slot, const std::string& what) override {
    return post(std::move(keep), data, bytes, false, peer, slot, what);
  }
  void wait(const std::shared_ptr<Message>& message, Clock::time_point deadline, const std::string& what) override {
    wait_op(std::static_pointer_cast<Op>(message), deadline, what);
  }

  void wait_op(const std::shared_ptr<Op>& op, Clock::time_point deadline, const std::string& what) {
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
    auto message = self_messages.post(buffer, send, tag, what);
    if (message->done) changed.notify_all();
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
  // Queues a collective: takes the next sequence number (program order) and names the job after
  // it, here on the calling thread; the worker exchanges the descriptor, then runs `body`.
  std::shared_ptr<Job> start(Descriptor descriptor, CollectiveBody body) {
    auto job = std::make_shared<Job>();
    std::unique_lock lock(mutex);
    descriptor.seq = next_seq++;
    job->descriptor = descriptor;
    job->name = std::string(kind_name(descriptor.kind)) + " #" + std::to_string(descriptor.seq);
    if (dead) throw_dead(lock, job->name);
    job->body = std::move(body);
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
        const Clock::time_point deadline = Clock::now() + timeout;
        exchange_descriptor(*this, job->descriptor, deadline, job->name);
        job->body(job->descriptor.seq, deadline, job->name);
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
    if (monitor) {
      monitor->stop();
      monitor->join();
    }
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
    monitor.reset();
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
      impl_->wait_op(op_, Clock::now() + t, what_);
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

// isend and irecv: the checks, then a message to self (matched in memory) or one Gloo message.
std::unique_ptr<Work> start_p2p(const std::shared_ptr<GlooCommunicator::Impl>& impl, const ops::Tensor& buffer,
                                bool send, int peer, Tag tag) {
  const std::string what = p2p_name(send ? "send" : "recv", peer, tag);
  check_tensor(buffer, what, "buffer");
  if (peer < 0 || peer >= impl->size) {
    throw InvalidArgument(what + ": rank " + std::to_string(peer) + " is not in [0, " + std::to_string(impl->size) + ")");
  }
  if (tag >= kMaxTag) throw InvalidArgument(what + ": tag " + std::to_string(tag) + " is reserved (at or above 2^56)");
  if (peer == impl->rank) return std::make_unique<P2pWork>(impl, nullptr, impl->post_self(buffer, send, tag, what), what);
  auto op = impl->post(std::make_shared<ops::Tensor>(buffer), buffer.raw(), buffer.bytes(), send, peer, kP2pSlot | tag, what);
  return std::make_unique<P2pWork>(impl, std::move(op), nullptr, what);
}

// Every i-collective, once its arguments are checked: queued with its descriptor (the worker
// exchanges it with the ring neighbours, then runs `body`).
std::unique_ptr<Work> start_collective(const std::shared_ptr<GlooCommunicator::Impl>& impl, const Descriptor& d,
                                       CollectiveBody body) {
  return std::make_unique<CollectiveWork>(impl, impl->start(d, std::move(body)));
}

}  // namespace

// ---- GlooCommunicator ---------------------------------------------------------------------------

GlooCommunicator::GlooCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

GlooCommunicator::~GlooCommunicator() { impl_->shutdown(); }

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(const GlooConnectOptions& options) {
  Bootstrapped connected = bootstrap(options);
  auto impl = std::make_shared<Impl>(options.rank, options.size, options.timeout);
  impl->device = std::move(connected.device);
  impl->context = std::move(connected.context);
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
  return start_p2p(impl_, buffer, true, dst, tag);
}

std::unique_ptr<Work> GlooCommunicator::irecv(const ops::Tensor& buffer, int src, Tag tag, Stream) {
  return start_p2p(impl_, buffer, false, src, tag);
}

std::unique_ptr<Work> GlooCommunicator::iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream) {
  check_tensor(buffer, "allreduce", "buffer");
  const Combine combine = combine_for(buffer.dtype(), op);
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kAllreduce), .dtype = static_cast<std::int32_t>(buffer.dtype()),
                     .op = static_cast<std::int32_t>(op), .elements = buffer.numel()};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, buffer, combine](std::uint64_t seq, Clock::time_point deadline,
                                                            const std::string& what) {
    mesh::allreduce(*impl, seq, std::make_shared<ops::Tensor>(buffer), bytes_of(buffer), buffer.numel(),
                    buffer.dtype(), combine, deadline, what);
  });
}

std::unique_ptr<Work> GlooCommunicator::ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                        std::span<const std::int64_t> counts_in, ReduceOp op, Stream) {
  const Blocks blocks = check_blocks("reduce_scatter", input, "input", output, "output", counts_in, rank(), size());
  const Combine combine = combine_for(input.dtype(), op);
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kReduceScatter), .dtype = static_cast<std::int32_t>(input.dtype()),
                     .op = static_cast<std::int32_t>(op), .elements = blocks.offsets.back(),
                     .counts_hash = hash_counts(blocks.counts)};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, input, output, counts = blocks.counts, combine](
                                        std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    mesh::reduce_scatter(*impl, seq, 0, std::make_shared<ops::Tensor>(input), bytes_of(input), bytes_of(output),
                         counts, input.dtype(), combine, deadline, what);
  });
}

std::unique_ptr<Work> GlooCommunicator::iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                                   std::span<const std::int64_t> counts_in, Stream) {
  const Blocks blocks = check_blocks("allgather", output, "output", input, "input", counts_in, rank(), size());
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kAllgather), .dtype = static_cast<std::int32_t>(input.dtype()),
                     .elements = blocks.offsets.back(), .counts_hash = hash_counts(blocks.counts)};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, input, output, counts = blocks.counts, elem = blocks.elem](
                                        std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    mesh::allgather(*impl, seq, 0, std::make_shared<ops::Tensor>(output), bytes_of(input), bytes_of(output), counts,
                    elem, deadline, what);
  });
}

std::unique_ptr<Work> GlooCommunicator::ibroadcast(const ops::Tensor& buffer, int root, Stream) {
  check_tensor(buffer, "broadcast", "buffer");
  if (root < 0 || root >= size()) {
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " is not in [0, " + std::to_string(size()) + ")");
  }
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kBroadcast), .dtype = static_cast<std::int32_t>(buffer.dtype()),
                     .root = root, .elements = buffer.numel()};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, buffer, root](std::uint64_t seq, Clock::time_point deadline,
                                                         const std::string& what) {
    mesh::broadcast(*impl, seq, std::make_shared<ops::Tensor>(buffer), bytes_of(buffer), buffer.bytes(), root, deadline,
                    what);
  });
}

std::unique_ptr<Work> GlooCommunicator::ibarrier() {
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kBarrier)};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl](std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    mesh::barrier(*impl, seq, deadline, what);
  });
}

}  // namespace hdp::mesh
