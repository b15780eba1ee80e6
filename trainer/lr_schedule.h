// File: trainer/lr_schedule.h
//
// The learning-rate schedule of `hdp train`: linear warm-up, then cosine decay, as most LLaMA
// recipes use. For step t (the optimizer step about to be taken, counted from 1):
//   t <= warmup:          peak * t / warmup
//   warmup < t <= total:  min + (peak - min) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2
//   t > total:            min
// warmup = 0 starts at the peak; total = warmup makes the decay a step down to min at t > total.
// A pure function of the step, so a job resumed from a checkpoint (which saves the step) or resized
// mid-run continues on the same curve.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "common/error.h"

namespace hdp::trainer {

struct LrSchedule {
  double peak = 3e-4;
  double min = 3e-5;
  std::int64_t warmup = 100;
  std::int64_t total = 10000;

  // InvalidArgument naming the value: peak and min finite with 0 <= min <= peak, 0 <= warmup <= total.
  void validate() const {
    if (!std::isfinite(peak) || peak <= 0) throw InvalidArgument("--lr " + std::to_string(peak) + " must be > 0");
    if (!std::isfinite(min) || min < 0 || min > peak) {
      throw InvalidArgument("--min-lr " + std::to_string(min) + " must lie in [0, --lr]");
    }
    if (warmup < 0 || warmup > total) {
      throw InvalidArgument("--warmup-steps " + std::to_string(warmup) + " must lie in [0, --steps " +
                            std::to_string(total) + "]");
    }
  }

  double at(std::int64_t step) const {
    if (step <= warmup) return warmup == 0 ? peak : peak * static_cast<double>(std::max<std::int64_t>(step, 1)) / warmup;
    if (step > total) return min;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min + (peak - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
};

}  // namespace hdp::trainer
