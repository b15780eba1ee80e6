#include "trainer/device_placement.h"

#include <cstdlib>

#include "common/error.h"
#include "hdp/config.h"
#include "ops/tensor.h"

namespace hdp::trainer {

DeviceRequest parse_device_request(const std::string& text) {
  if (text == "auto") return DeviceRequest::kAuto;
  if (text == "cpu") return DeviceRequest::kCpu;
  if (text == "cuda") return DeviceRequest::kCuda;
  throw InvalidArgument("--device '" + text + "': expected cuda, cpu or auto");
}

const char* device_request_name(DeviceRequest request) {
  switch (request) {
    case DeviceRequest::kAuto: return "auto";
    case DeviceRequest::kCpu: return "cpu";
    case DeviceRequest::kCuda: return "cuda";
  }
  return "?";
}

VisibleDevices VisibleDevices::probe() {
  VisibleDevices v;
  v.cuda_built = HDP_HAVE_CUDA == 1;
  v.cuda = ops::cuda_device_count();
  if (const char* list = std::getenv("CUDA_VISIBLE_DEVICES")) v.cuda_visible_devices = list;
  return v;
}

namespace {

// Why this process sees no CUDA device, as found.
std::string no_device_reason(const VisibleDevices& visible) {
  if (!visible.cuda_built) return "this build of hdp has no CUDA";
  if (visible.cuda_visible_devices) {
    return "no CUDA device visible to this worker (CUDA_VISIBLE_DEVICES='" + *visible.cuda_visible_devices + "')";
  }
  return "no CUDA device visible to this worker (the CUDA runtime reports none)";
}

}  // namespace

DevicePlacement place_worker(DeviceRequest request, std::optional<ops::model::Precision> precision, int local_rank,
                             int nproc_per_node, const VisibleDevices& visible) {
  if (nproc_per_node < 1 || local_rank < 0 || local_rank >= nproc_per_node) {
    throw InvalidArgument("local rank " + std::to_string(local_rank) + " of " + std::to_string(nproc_per_node) +
                          " workers per node");
  }
  const std::string where = "local rank " + std::to_string(local_rank) + " of " + std::to_string(nproc_per_node);
  DevicePlacement p;
  const bool cuda = request == DeviceRequest::kCuda || (request == DeviceRequest::kAuto && visible.cuda > 0);
  if (cuda && visible.cuda < 1) throw InvalidArgument("--device cuda: " + no_device_reason(visible));
  if (cuda) {
    p.device = ops::Device::kCuda;
    p.ordinal = local_rank % visible.cuda;
    // Local ranks r with r mod n == ordinal.
    p.sharing = (nproc_per_node - p.ordinal + visible.cuda - 1) / visible.cuda;
    p.why = where + (p.sharing > 1 ? ", sharing the device with " + std::to_string(p.sharing - 1) + " other worker(s)"
                                   : "");
  } else {
    p.why = request == DeviceRequest::kAuto ? "--device auto: " + no_device_reason(visible) : where;
  }
  p.precision = precision.value_or(cuda ? ops::model::Precision::kBF16 : ops::model::Precision::kFull);
  return p;
}

std::string DevicePlacement::describe() const {
  const std::string name = device == ops::Device::kCuda ? "cuda:" + std::to_string(ordinal) : "cpu";
  return name + ", " + ops::model::precision_name(precision) + " (" + why + ")";
}

}  // namespace hdp::trainer
