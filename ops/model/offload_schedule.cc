#include "ops/model/offload_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace hdp::ops::model {

int OffloadSchedule::offloaded() const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [](const LayerOffload& l) { return l.offloaded; }));
}

OffloadSchedule offload_schedule(double ratio, int layers) {
  if (!(ratio >= 0 && ratio <= 1)) {
    throw InvalidArgument("offload_schedule: the ratio " + std::to_string(ratio) + " must lie in [0, 1]");
  }
  if (layers < 1) throw InvalidArgument("offload_schedule: " + std::to_string(layers) + " layers (at least 1)");
  OffloadSchedule schedule{.ratio = ratio, .layers = std::vector<LayerOffload>(static_cast<std::size_t>(layers))};
  const int candidates = std::max(0, layers - 2);
  // ceil, less a rounding error's worth: 0.3 x 10 is 3.0000000000000004 in binary.
  const int count = std::min(candidates, static_cast<int>(std::ceil(ratio * candidates - 1e-9)));
  for (int i = 0; i < count; ++i) {
    schedule.layers[static_cast<std::size_t>(i)] = {.offloaded = true, .copy_out_during = i + 1, .copy_back_during = i + 1};
  }
  return schedule;
}

std::int64_t peak_resident_activation_bytes(const OffloadSchedule& schedule, std::int64_t layer_bytes) {
  const int l = static_cast<int>(schedule.layers.size());
  auto offloaded = [&](int i) { return i >= 0 && i < l && schedule.layers[static_cast<std::size_t>(i)].offloaded; };
  std::int64_t resident = 0, peak = 0;
  for (int i = 0; i < l; ++i) {  // forward
    ++resident;                  // layer i's activations
    peak = std::max(peak, resident);
    if (offloaded(i - 1)) --resident;  // its copy out overlapped this forward
  }
  if (offloaded(l - 1)) --resident;
  for (int i = l - 1; i >= 0; --i) {  // backward
    if (offloaded(i - 1)) ++resident;  // its copy back overlaps this backward
    peak = std::max(peak, resident);
    --resident;  // layer i's activations are used up
  }
  return peak * layer_bytes;
}

}  // namespace hdp::ops::model
