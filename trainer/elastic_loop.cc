#include "trainer/elastic_loop.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_state.h"
#include "mesh/comm/communicator_factory.h"

namespace hdp::trainer {
namespace {

// The generation cannot go on: say so in the store (the leader will publish a new one even if
// every member is still alive) and wait for the next.
void abandon(elastic::ElasticContext& ctx, const LoopOptions& options, const elastic::Membership& m,
             const RecoverableError& error) {
  const auto& who = ctx.identity();
  log()->warn("worker {}/{}: generation {}: {}; waiting for the next generation", who.node, who.local_rank, m.generation,
              error.what());
  const elastic::AbandonReport report{.node = who.node,
                                      .slot = who.local_rank,
                                      .timed_out = dynamic_cast<const TimeoutError*>(&error) != nullptr,
                                      .timeout_ms = options.connect_timeout.count(),
                                      .cooldown = options.cooldown};
  ctx.report_broken(m, who.node + "/" + std::to_string(who.local_rank) + ": " + error.what(), report);
}

// Aborts `comm` as soon as the store names a generation other than m's, and calls `on_peer_lost`
// (once) as soon as a peer's connection failed, also while this rank computes and waits on nobody:
// the generation is reported broken and its communicator aborted at once, not at this rank's next
// call, so the leader learns of a dead peer process within the poll. Stops when destroyed.
class SupersededWatch {
 public:
  SupersededWatch(const elastic::ElasticContext& ctx, const elastic::Membership& m, mesh::Communicator& comm,
                  std::chrono::milliseconds every, std::function<void(const std::string&)> on_peer_lost)
      : thread_([this, &ctx, &m, &comm, generation = m.generation, every, on_peer_lost = std::move(on_peer_lost)] {
          std::unique_lock lock(mutex_);
          bool reported = false;
          while (!wake_.wait_for(lock, every, [this] { return stop_; })) {
            lock.unlock();
            if (!reported && !comm.dead()) {
              if (const std::string why = comm.peer_lost(); !why.empty()) {
                on_peer_lost(why);
                reported = true;
              }
            }
            const std::optional<std::int64_t> current = ctx.read_generation();
            if (current && *current != 0 && *current != generation && !ctx.keeps_every_worker(m, *current)) {
              comm.abort("generation " + std::to_string(generation) + " was superseded by generation " +
                         std::to_string(*current));
              return;
            }
            lock.lock();
          }
        }) {}
  ~SupersededWatch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  SupersededWatch(const SupersededWatch&) = delete;
  SupersededWatch& operator=(const SupersededWatch&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

LoopResult run_elastic_loop(elastic::ElasticContext& ctx, const LoopOptions& options, const std::atomic<bool>& stop,
                            const GenerationBody& body) {
  const auto& who = ctx.identity();
  std::int64_t seen = 0;
  bool holds_state = false;  // the generation `seen` ended with this worker staying (LoopOptions::stop_wait)
  std::optional<std::chrono::steady_clock::time_point> stop_since;
  for (;;) {
    if (stop) {
      if (!holds_state) break;
      const auto now = std::chrono::steady_clock::now();
      if (!stop_since) {
        stop_since = now;
        log()->info("worker {}/{}: asked to stop between generations; it holds the job's state, so it stops in the "
                    "next generation, with the others (waiting up to {} ms for it)",
                    who.node, who.local_rank, options.stop_wait.count());
      } else if (now - *stop_since >= options.stop_wait) {
        log()->warn("worker {}/{}: no generation to stop in came within {} ms; stopping without it", who.node,
                    who.local_rank, options.stop_wait.count());
        break;
      }
    }
    elastic::Membership membership;
    try {
      membership = ctx.wait_for_next(seen, stop ? std::min(options.wait_slice, std::chrono::milliseconds(100))
                                                : options.wait_slice);
    } catch (const TimeoutError&) {
      // Nothing new yet. A job that completed publishes no further generation: a worker started
      // (or restarted) after the others finished would otherwise wait for ever.
      if (elastic::job_completed(*ctx.store())) {
        log()->info("worker {}/{}: the job has completed; nothing to do", who.node, who.local_rank);
        return LoopResult::kFinished;
      }
      if (stop) {
        // A generation without this worker (or one waiting for more nodes) was published: none
        // will come to stop in.
        const std::optional<std::int64_t> current = ctx.read_generation();
        if (current && *current > seen) holds_state = false;
      }
      continue;  // look at `stop` and wait again
    }
    seen = membership.generation;
    log()->info("worker {}/{}: generation {}: rank {} of {}", who.node, who.local_rank, membership.generation,
                membership.rank, membership.world_size);
    try {
      auto comm = mesh::connect_communicator(ctx.bootstrap(membership), "main", options.connect_timeout,
                                             mesh::Connect::kRingNow, options.device, options.data_plane);
      // With an agent's channel a look costs no store read, so it looks every 20 ms.
      SupersededWatch watch(ctx, membership, *comm,
                            ctx.has_agent_channel() ? std::chrono::milliseconds(20) : options.watch_every,
                            [&](const std::string& why) {
                              abandon(ctx, options, membership, PeerLost("peer lost: " + why));
                              // No collective of this generation can complete without that peer:
                              // the rank leaves its compute at the next layer (DistributedStep).
                              comm->abort("peer lost: " + why);
                            });
      if (body(membership, *comm) == BodyResult::kFinished) return LoopResult::kFinished;
    } catch (const RecoverableError& e) {
      abandon(ctx, options, membership, e);
    }
    holds_state = true;
  }
  return LoopResult::kStopped;
}

}  // namespace hdp::trainer
