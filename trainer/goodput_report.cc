#include "trainer/goodput_report.h"

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::trainer {

bool GoodputReport::seed(std::int64_t generation, const std::function<void()>& before_read) {
  if (failed_at_ && SteadyClock::now() - *failed_at_ < kRetry) return false;
  try {
    if (before_read) before_read();
    elastic::StateFields state = store_->hash_get_all(elastic::keys::kState);
    // Only the fields the totals come from, each as the state's readers validate it.
    for (const char* name : {elastic::goodput::kStartedAtMs, elastic::goodput::kFurthestStep,
                             elastic::goodput::kRecomputedSteps, elastic::goodput::kProductiveMs,
                             elastic::goodput::kRecomputedMs, elastic::goodput::kIdleMs, "step"}) {
      if (auto it = state.find(name); it != state.end()) elastic::validate_state_field(name, it->second);
    }
    account_.seed(state);
    seeded_generation_ = generation;
    failed_at_.reset();
    return true;
  } catch (const Error& e) {
    failed_at_ = SteadyClock::now();
    if (warned_generation_ != generation) {
      log()->warn("generation {}: cannot read the job's goodput totals ({}): the step reports leave them out until "
                  "they are read",
                  generation, e.what());
      warned_generation_ = generation;
    }
    return false;
  }
}

GoodputReport::Figures GoodputReport::step(std::int64_t generation, std::int64_t step, double step_ms,
                                           const std::function<void()>& before_read) {
  Figures figures;
  if (seeded_generation_ != generation && !seed(generation, before_read)) return figures;
  const std::int64_t now = elastic::now_ms();
  figures.recomputed = account_.step(step, step_ms, now);
  figures.fields = account_.fields(now);
  figures.ettr = account_.ettr(now);
  return figures;
}

}  // namespace hdp::trainer
