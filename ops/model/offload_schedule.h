// File: ops/model/offload_schedule.h
//
// ByteScale's selective activation offloading, as a schedule over a model's layers: which layers'
// activations (what LlamaModel keeps for the backward) go to pinned host memory in the forward, and
// when each comes back in the backward, for a micro-batch's offload ratio r (mesh/plan/plan.h's
// MicroBatch::offload_ratio, chosen by the planner with ByteScale's Eq. 3, mesh/plan/sharding.h).
// The last two layers stay resident (their backward comes first, with nothing to overlap a copy
// back); of the other l - 2, the first ceil(r (l - 2)) are offloaded: each copy to host overlaps
// the next layer's forward and each copy back the next layer's backward. ceil, not round: the peak
// must stay within Eq. 3's (2 + (1 - r)(l - 2)) Act(x), which the planner relied on to give the
// rank x tokens; offloading at most one layer more than r (l - 2) costs at most one layer's copy
// that compute may not hide. LlamaModel::offload_next() runs a schedule; trainer/memory_model.h
// sizes what it saves.
#pragma once

#include <cstdint>
#include <vector>

namespace hdp::ops::model {

// One layer's part of an offloading schedule.
struct LayerOffload {
  bool offloaded = false;
  // The layer whose forward the copy to host overlaps (this layer + 1); -1 when kept resident.
  int copy_out_during = -1;
  // The layer whose backward the copy back overlaps (this layer + 1): it must be resident again
  // before this layer's backward starts; -1 when kept resident.
  int copy_back_during = -1;
};

struct OffloadSchedule {
  double ratio = 0;
  std::vector<LayerOffload> layers;  // by layer index
  int offloaded() const;
};

// The schedule of a micro-batch with offload ratio `ratio` over `layers` layers (see above).
// InvalidArgument for a ratio outside [0, 1] (NaN included) or fewer than one layer.
OffloadSchedule offload_schedule(double ratio, int layers);

// The most activation bytes resident on the device at once when the schedule runs a forward then
// a backward, every layer keeping `layer_bytes`: a layer's activations arrive with its forward
// and leave after its backward; an offloaded one also stays through the next layer's forward
// (its copy out) and is back from the start of the next layer's backward (its copy back).
std::int64_t peak_resident_activation_bytes(const OffloadSchedule& schedule, std::int64_t layer_bytes);

}  // namespace hdp::ops::model
