#include "trainer/elastic_loop.h"

#include "common/error.h"
#include "common/log.h"
#include "mesh/communicator_factory.h"

namespace hdp::trainer {
namespace {

// The generation cannot go on: say so in the store (the leader will publish a new one even if
// every member is still alive) and wait for the next.
void abandon(elastic::ElasticContext& ctx, const elastic::Membership& m, const std::string& reason) {
  const auto& who = ctx.identity();
  log()->warn("worker {}/{}: generation {}: {}; waiting for the next generation", who.node, who.local_rank, m.generation,
              reason);
  ctx.report_broken(m, who.node + "/" + std::to_string(who.local_rank) + ": " + reason);
}

}  // namespace

LoopResult run_elastic_loop(elastic::ElasticContext& ctx, const LoopOptions& options, const std::atomic<bool>& stop,
                            const GenerationBody& body) {
  const auto& who = ctx.identity();
  std::int64_t seen = 0;
  while (!stop) {
    elastic::Membership membership;
    try {
      membership = ctx.wait_for_next(seen, options.wait_slice);
    } catch (const TimeoutError&) {
      continue;  // nothing new yet; look at `stop` and wait again
    }
    seen = membership.generation;
    log()->info("worker {}/{}: generation {}: rank {} of {}", who.node, who.local_rank, membership.generation,
                membership.rank, membership.world_size);
    try {
      auto comm = mesh::connect_communicator(ctx.bootstrap(membership), "main", options.connect_timeout);
      if (body(membership, *comm) == BodyResult::kFinished) return LoopResult::kFinished;
    } catch (const RecoverableError& e) {
      abandon(ctx, membership, e.what());
    }
  }
  return LoopResult::kStopped;
}

}  // namespace hdp::trainer
