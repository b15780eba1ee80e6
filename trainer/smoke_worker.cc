#include "trainer/smoke_worker.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <thread>
#include <vector>

#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "trainer/elastic_loop.h"

namespace hdp::trainer {
namespace {

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

void allreduce(const std::shared_ptr<gloo::Context>& comm, std::vector<std::int64_t>& data, ReduceFunction fn,
               std::uint32_t tag) {
  gloo::AllreduceOptions options(comm);
  options.setOutput(data.data(), data.size());
  options.setReduceFunction(fn);
  options.setTag(tag);
  gloo::allreduce(options);
}

}  // namespace

SmokeResult run_smoke_worker(elastic::ElasticContext& ctx, const SmokeOptions& options, const std::atomic<bool>& stop) {
  elastic::JobState job(ctx.store());
  std::int64_t step = 0;
  bool wrong_sum = false;
  const auto sum = static_cast<ReduceFunction>(&gloo::sum<std::int64_t>);
  const auto max = static_cast<ReduceFunction>(&gloo::max<std::int64_t>);

  auto body = [&](const elastic::Membership& m, const std::shared_ptr<gloo::Context>& comm) {
    // Newcomers start at 0, survivors where they were: everyone continues from the furthest step.
    std::vector<std::int64_t> agreed{step};
    allreduce(comm, agreed, max, 1);
    step = agreed[0];
    const std::int64_t world = m.world_size;
    std::vector<std::int64_t> data(options.elements);
    while (step < options.steps) {
      if (stop) return BodyResult::kFinished;
      if (ctx.changed(m)) return BodyResult::kGenerationChanged;
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = (m.rank + 1) * static_cast<std::int64_t>(i + 1) + step;
      allreduce(comm, data, sum, 2);
      for (std::size_t i = 0; i < data.size(); ++i) {
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
