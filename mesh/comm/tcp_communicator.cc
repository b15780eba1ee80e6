#include "mesh/comm/tcp_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/collectives.h"
#include "mesh/comm/descriptor.h"
#include "mesh/comm/reductions.h"
#include "mesh/comm/self_messages.h"
#include "mesh/comm/tcp_network.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

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
// and waiting below are that transport's implementation over the network (tcp_network.h).
struct TcpCommunicator::Impl final : Transport {
  Impl(int rank, int size, Millis timeout) : Transport(rank, size), timeout(timeout) {}

  const Millis timeout;
  std::unique_ptr<TcpNetwork> network;

  mutable std::mutex mutex;
  std::condition_variable changed;  // a job finished, a self message matched, the communicator died
  SelfMessages self_messages;  // to and from this rank itself (self_messages.h)
  std::uint64_t next_seq = 0;
  std::deque<std::shared_ptr<Job>> queue;
  bool running = false;
  bool stopping = false;
  std::condition_variable queue_changed;
  std::thread worker;

  Millis resolve(Millis t) const { return t <= Millis::zero() ? timeout : t; }

  // ---- failure --------------------------------------------------------------------------------
  // Kills the communicator: the network closes every connection (so nothing is read into or
  // written from a buffer any more), then every wait is woken. A second caller waits until the
  // first one's close is done.
  void fail(const std::string& why) override {
    network->fail(why);
    wake();
  }

  // Wakes every wait of this object (the network died: TcpNetwork::Options::on_closed).
  void wake() {
    std::lock_guard lock(mutex);
    changed.notify_all();
    queue_changed.notify_all();
  }

  bool dead() const { return network->dead(); }

  // PeerLost for a call on a dead communicator.
  [[noreturn]] void throw_dead(const std::string& what) { throw PeerLost(what + ": " + network->reason()); }

  // ---- one message ----------------------------------------------------------------------------
  std::shared_ptr<NetOp> post(std::shared_ptr<const void> keep, void* ptr, std::size_t bytes, bool send, int peer,
                              std::uint64_t slot, const std::string& what) {
    return network->post(send, peer, slot, static_cast<std::byte*>(ptr), bytes, std::move(keep), what);
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
    wait_op(*std::static_pointer_cast<NetOp>(message), deadline, what);
  }

  void wait_op(const NetOp& op, Clock::time_point deadline, const std::string& what) {
    switch (network->wait(op, deadline)) {
      case TcpNetwork::Outcome::kDone:
        return;
      case TcpNetwork::Outcome::kDead:
        throw_dead(what);
      case TcpNetwork::Outcome::kFailed: {
        const std::string why = what + ": peer lost: " + op.error;
        fail(why);
        throw PeerLost(network->reason() == why ? why : what + ": " + network->reason());
      }
      case TcpNetwork::Outcome::kTimedOut:
        break;
    }
    const std::string why = what + ": timed out: not complete within the deadline";
    fail(why);
    if (network->reason() == why) throw TimeoutError(why);
    throw_dead(what);
  }

  // ---- messages to self -----------------------------------------------------------------------
  std::shared_ptr<SelfMessage> post_self(const ops::Tensor& buffer, bool send, Tag tag, const std::string& what) {
    if (dead()) throw_dead(what);
    std::unique_lock lock(mutex);
    auto message = self_messages.post(buffer, send, tag, what);
    if (message->done) changed.notify_all();
    return message;
  }

  void wait_self(const SelfMessage& message, Clock::time_point deadline, Millis timeout, const std::string& what) {
    std::unique_lock lock(mutex);
    if (changed.wait_until(lock, deadline, [&] { return message.done || dead(); })) {
      if (message.done) return;
      lock.unlock();
      throw_dead(what);
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
    if (dead()) {
      lock.unlock();
      throw_dead(job->name);
    }
    job->body = std::move(body);
    queue.push_back(job);
    queue_changed.notify_all();
    return job;
  }

  // Runs the collectives in start order; between them, rewrites the address record when it is
  // due (TcpNetwork::republish: one SET every record_refresh, so no thread of its own).
  void run_worker() {
    auto refresh_at = Clock::now() + network->record_refresh();
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex);
        while (!stopping && queue.empty()) {
          if (queue_changed.wait_until(lock, refresh_at, [&] { return stopping || !queue.empty(); })) break;
          lock.unlock();
          network->republish();
          refresh_at = Clock::now() + network->record_refresh();
          lock.lock();
        }
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
        running = true;
      }
      std::exception_ptr error;
      try {
        if (dead()) throw_dead(job->name);
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
      {
        std::lock_guard lock(mutex);
        job->done = true;
        job->error = error;
        running = false;
        changed.notify_all();
      }
      if (Clock::now() >= refresh_at) {
        network->republish();
        refresh_at = Clock::now() + network->record_refresh();
      }
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
      busy = !queue.empty() || running;
      stopping = true;
    }
    if (busy) fail("the communicator was destroyed with operations in flight");
    queue_changed.notify_all();
    if (worker.joinable()) worker.join();
    // Gently (FIN) unless it failed: data a peer has not read yet still arrives.
    network->shutdown();
    std::lock_guard lock(mutex);
    changed.notify_all();
  }
};

namespace {

class P2pWork final : public Work {
 public:
  P2pWork(std::shared_ptr<TcpCommunicator::Impl> impl, std::shared_ptr<NetOp> op, std::shared_ptr<SelfMessage> self,
          std::string what)
      : impl_(std::move(impl)), op_(std::move(op)), self_(std::move(self)), what_(std::move(what)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (finished_) return;
    const Millis t = impl_->resolve(timeout);
    if (self_) {
      impl_->wait_self(*self_, Clock::now() + t, t, what_);
    } else {
      impl_->wait_op(*op_, Clock::now() + t, what_);
    }
    finished_ = true;
  }

 private:
  std::shared_ptr<TcpCommunicator::Impl> impl_;
  std::shared_ptr<NetOp> op_;
  std::shared_ptr<SelfMessage> self_;
  std::string what_;
  bool finished_ = false;
};

class CollectiveWork final : public Work {
 public:
  CollectiveWork(std::shared_ptr<TcpCommunicator::Impl> impl, std::shared_ptr<Job> job)
      : impl_(std::move(impl)), job_(std::move(job)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (finished_) return;
    impl_->wait_job(*job_, timeout);
    finished_ = true;
  }

 private:
  std::shared_ptr<TcpCommunicator::Impl> impl_;
  std::shared_ptr<Job> job_;
  bool finished_ = false;
};

std::string p2p_name(const char* kind, int peer, Tag tag) {
  return std::string(kind) + (kind[0] == 's' ? " to rank " : " from rank ") + std::to_string(peer) + " tag " +
         std::to_string(tag);
}

// isend and irecv: the checks, then a message to self (matched in memory) or one network message.
std::unique_ptr<Work> start_p2p(const std::shared_ptr<TcpCommunicator::Impl>& impl, const ops::Tensor& buffer,
                                bool send, int peer, Tag tag) {
  const std::string what = p2p_name(send ? "send" : "recv", peer, tag);
  check_p2p(what, buffer, peer, tag, impl->size, ops::Device::kCpu);
  if (peer == impl->rank) return std::make_unique<P2pWork>(impl, nullptr, impl->post_self(buffer, send, tag, what), what);
  auto op = impl->post(std::make_shared<ops::Tensor>(buffer), buffer.raw(), buffer.bytes(), send, peer, kP2pSlot | tag, what);
  return std::make_unique<P2pWork>(impl, std::move(op), nullptr, what);
}

// Every i-collective, once its arguments are checked: queued with its descriptor (the worker
// exchanges it with the ring neighbours, then runs `body`).
std::unique_ptr<Work> start_collective(const std::shared_ptr<TcpCommunicator::Impl>& impl, const Descriptor& d,
                                       CollectiveBody body) {
  return std::make_unique<CollectiveWork>(impl, impl->start(d, std::move(body)));
}

}  // namespace

// ---- TcpCommunicator ---------------------------------------------------------------------------

TcpCommunicator::TcpCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpCommunicator::~TcpCommunicator() { impl_->shutdown(); }

std::unique_ptr<TcpCommunicator> TcpCommunicator::connect(const TcpConnectOptions& options) {
  check_group("communicator", options.rank, options.size, kMaxSize);
  check_positive("communicator", "timeout", options.timeout);
  check_given(options.store != nullptr, "communicator bootstrap", "store");
  const auto deadline = Clock::now() + options.timeout;
  TcpNetwork::Options net;
  net.identity = {.group = wire::group_of(options.group), .generation = options.generation, .rank = options.rank,
                  .size = options.size};
  net.hostname = options.hostname;
  net.store = options.store;
  net.timeout = options.timeout;
  net.record_refresh = options.record_refresh;
  auto impl = std::make_shared<Impl>(options.rank, options.size, options.timeout);
  Impl* raw = impl.get();
  net.on_closed = [raw] { raw->wake(); };
  impl->network = std::make_unique<TcpNetwork>(std::move(net));
  impl->network->publish();
  // The ring neighbours: every collective begins with them.
  if (options.size > 1 && options.connect_neighbours) {
    const int next = (options.rank + 1) % options.size, prev = (options.rank + options.size - 1) % options.size;
    try {
      impl->network->connect_now({prev, next}, deadline, options.superseded);
    } catch (const Error& e) {
      impl->network->fail(e.what());
      throw;
    }
  }
  impl->worker = std::thread([raw] { raw->run_worker(); });
  return std::unique_ptr<TcpCommunicator>(new TcpCommunicator(std::move(impl)));
}

int TcpCommunicator::rank() const { return impl_->rank; }
int TcpCommunicator::size() const { return impl_->size; }
Communicator::Duration TcpCommunicator::timeout() const { return impl_->timeout; }

bool TcpCommunicator::dead() const { return impl_->dead(); }
std::string TcpCommunicator::peer_lost() const { return impl_->network->first_loss(); }

std::int64_t TcpCommunicator::refused_connections() const { return impl_->network->refused(); }
std::int64_t TcpCommunicator::connections() const { return impl_->network->connections(); }
std::int64_t TcpCommunicator::bytes_sent() const { return impl_->network->bytes_sent(); }

void TcpCommunicator::abort(const std::string& reason) { impl_->fail("aborted: " + reason); }


std::unique_ptr<Work> TcpCommunicator::isend(const ops::Tensor& buffer, int dst, Tag tag, Stream) {
  return start_p2p(impl_, buffer, true, dst, tag);
}

std::unique_ptr<Work> TcpCommunicator::irecv(const ops::Tensor& buffer, int src, Tag tag, Stream) {
  return start_p2p(impl_, buffer, false, src, tag);
}

std::unique_ptr<Work> TcpCommunicator::iallreduce(const ops::Tensor& buffer, ReduceOp op, Stream) {
  check_tensor(buffer, "allreduce", "buffer", ops::Device::kCpu);
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

std::unique_ptr<Work> TcpCommunicator::ireduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                                        std::span<const std::int64_t> counts_in, ReduceOp op, Stream) {
  const Blocks blocks = check_blocks("reduce_scatter", input, "input", output, "output", counts_in, rank(), size(), ops::Device::kCpu);
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

std::unique_ptr<Work> TcpCommunicator::iallgather(const ops::Tensor& input, const ops::Tensor& output,
                                                   std::span<const std::int64_t> counts_in, Stream) {
  const Blocks blocks = check_blocks("allgather", output, "output", input, "input", counts_in, rank(), size(), ops::Device::kCpu);
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kAllgather), .dtype = static_cast<std::int32_t>(input.dtype()),
                     .elements = blocks.offsets.back(), .counts_hash = hash_counts(blocks.counts)};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, input, output, counts = blocks.counts, elem = blocks.elem](
                                        std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    mesh::allgather(*impl, seq, 0, std::make_shared<ops::Tensor>(output), bytes_of(input), bytes_of(output), counts,
                    elem, deadline, what);
  });
}

std::unique_ptr<Work> TcpCommunicator::ibroadcast(const ops::Tensor& buffer, int root, Stream) {
  check_tensor(buffer, "broadcast", "buffer", ops::Device::kCpu);
  check_rank("broadcast", "root", root, size());
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kBroadcast), .dtype = static_cast<std::int32_t>(buffer.dtype()),
                     .root = root, .elements = buffer.numel()};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl, buffer, root](std::uint64_t seq, Clock::time_point deadline,
                                                         const std::string& what) {
    mesh::broadcast(*impl, seq, std::make_shared<ops::Tensor>(buffer), bytes_of(buffer), buffer.bytes(), root, deadline,
                    what);
  });
}

std::unique_ptr<Work> TcpCommunicator::ibarrier() {
  const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kBarrier)};
  Impl* impl = impl_.get();
  return start_collective(impl_, d, [impl](std::uint64_t seq, Clock::time_point deadline, const std::string& what) {
    mesh::barrier(*impl, seq, deadline, what);
  });
}

}  // namespace hdp::mesh
