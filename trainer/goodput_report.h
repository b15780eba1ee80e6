// File: trainer/goodput_report.h
//
// Rank 0's share of the job's goodput (elastic/goodput.h): at each generation's first step report
// it continues the totals the `state` hash holds (read once, after the reports in flight were
// written: `before_read`), accounts every step reported, and hands back the fields the step's
// state write carries (StepReporter, fenced with it) and the figures for the worker's metrics.
//
// A state that cannot be read leaves the goodput fields out of the reports (logged once a
// generation) and is read again at a later step, at most every kRetry: totals started afresh
// would overwrite the job's. Not thread-safe (the training thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "elastic/goodput.h"
#include "elastic/store.h"

namespace hdp::trainer {

class GoodputReport {
 public:
  explicit GoodputReport(std::shared_ptr<elastic::Store> store) : store_(std::move(store)) {}

  struct Figures {
    elastic::Fields fields;     // for the state hash (empty while the totals are unknown)
    std::optional<double> ettr; // as of this step (none while the totals are unknown)
    bool recomputed = false;    // the step was computed a second time
  };
  // Rank 0: step `step` of `generation` took `step_ms` and ended now.
  Figures step(std::int64_t generation, std::int64_t step, double step_ms, const std::function<void()>& before_read);

  static constexpr std::chrono::seconds kRetry{10};

 private:
  bool seed(std::int64_t generation, const std::function<void()>& before_read);

  std::shared_ptr<elastic::Store> store_;
  elastic::GoodputAccount account_;
  std::int64_t seeded_generation_ = -1;
  std::int64_t warned_generation_ = -1;
  std::optional<SteadyClock::time_point> failed_at_;
};

}  // namespace hdp::trainer
