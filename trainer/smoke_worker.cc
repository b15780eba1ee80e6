#include "trainer/smoke_worker.h"

#include <thread>

#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "ops/tensor.h"
#include "trainer/elastic_loop.h"

namespace hdp::trainer {

SmokeResult run_smoke_worker(elastic::ElasticContext& ctx, const SmokeOptions& options, const std::atomic<bool>& stop) {
  elastic::JobState job(ctx.store());
  std::int64_t step = 0;
  bool wrong_sum = false;

  auto body = [&](const elastic::Membership& m, mesh::Communicator& comm) {
    // Newcomers start at 0, survivors where they were: everyone continues from the furthest step.
    step = comm.allreduce_max(step);
    const std::int64_t world = m.world_size;
    const ops::Tensor tensor = ops::Tensor::zeros({static_cast<std::int64_t>(options.elements)}, ops::DType::kI64);
    std::int64_t* data = tensor.data<std::int64_t>();
    while (step < options.steps) {
      if (stop) return BodyResult::kFinished;
      if (ctx.changed(m)) return BodyResult::kGenerationChanged;
      for (std::size_t i = 0; i < options.elements; ++i) data[i] = (m.rank + 1) * static_cast<std::int64_t>(i + 1) + step;
      comm.allreduce(tensor, mesh::ReduceOp::kSum);
      for (std::size_t i = 0; i < options.elements; ++i) {
        const std::int64_t expected = static_cast<std::int64_t>(i + 1) * world * (world + 1) / 2 + world * step;
        if (data[i] != expected) {
          log()->error("smoke: generation {} step {}: element {} is {}, expected {}", m.generation, step, i, data[i],
                       expected);
          wrong_sum = true;
          return BodyResult::kFinished;
        }
      }
      ++step;
      if (m.rank == 0 && step % options.report_every == 0) {
        job.fenced_update(m.generation, {{"step", std::to_string(step)}});
      }
      std::this_thread::sleep_for(options.step_time);
    }
    if (m.rank == 0) job.complete(m.generation, step);
    return BodyResult::kFinished;
  };

  LoopOptions loop;
  loop.connect_timeout = options.timeout;
  const LoopResult result = run_elastic_loop(ctx, loop, stop, body);
  if (wrong_sum) return SmokeResult::kWrongSum;
  if (result == LoopResult::kStopped || stop) return SmokeResult::kStopped;
  log()->info("smoke: worker {}/{} finished {} steps", ctx.identity().node, ctx.identity().local_rank, step);
  return SmokeResult::kCompleted;
}

}  // namespace hdp::trainer
