// File: trainer/device_placement.h
//
// Which device a worker trains on, decided once when it starts, from what it is asked
// (`hdp train --device`), what it sees (the CUDA devices the runtime reports, which
// CUDA_VISIBLE_DEVICES already narrowed) and where it sits on its node (its local rank of the
// node's workers, elastic/worker_env.h). The one place this is decided: the train command asks
// place_worker() and nothing else looks at device counts.
//   - cpu: the CPU.
//   - cuda: visible device (local rank mod visible devices), torchrun's convention: with one
//     worker per GPU (`hdp agent --nproc-per-node gpu`) each binds to its local rank's device.
//     With more workers than devices several share one (`sharing` > 1), which the data plane's
//     choice must see (ranks that share a device cannot form an NCCL communicator). No device
//     visible: InvalidArgument naming what was found, so the worker exits 2 at once and its agent
//     does not restart it (agents/worker_supervisor.h: exit 2 is the job's failure).
//   - auto: cuda when a device is visible, else cpu.
// Precision: the one asked (--dtype) when given, else bf16 mixed precision on a GPU and f32 on the
// CPU (ops/model/llama_model.h).
#pragma once

#include <optional>
#include <string>

#include "ops/dtype.h"
#include "ops/model/llama_config.h"

namespace hdp::trainer {

enum class DeviceRequest { kAuto, kCpu, kCuda };

// "auto" | "cpu" | "cuda"; InvalidArgument naming anything else.
DeviceRequest parse_device_request(const std::string& text);
const char* device_request_name(DeviceRequest request);

// What this process sees.
struct VisibleDevices {
  bool cuda_built = false;  // this build of hdp has CUDA
  int cuda = 0;             // CUDA devices the runtime reports (0 without a driver or a device)
  std::optional<std::string> cuda_visible_devices;  // the variable, when it is set

  // This process's (asks the CUDA runtime once; never throws).
  static VisibleDevices probe();
};

struct DevicePlacement {
  ops::Device device = ops::Device::kCpu;
  int ordinal = -1;  // the CUDA device among the visible ones; -1 on the CPU
  int sharing = 1;   // workers of this node on this device, this one included
  ops::model::Precision precision = ops::model::Precision::kFull;

  // One line for the log: "cuda:1, bf16 (local rank 1 of 2)" or "cpu, f32 (--device auto: no CUDA
  // device visible)"; `why` is kept from place_worker.
  std::string describe() const;
  std::string why;
};

// The placement of local rank `local_rank` of `nproc_per_node` workers (0 <= local_rank <
// nproc_per_node, else InvalidArgument). `precision`: --dtype when it was given.
DevicePlacement place_worker(DeviceRequest request, std::optional<ops::model::Precision> precision, int local_rank,
                             int nproc_per_node, const VisibleDevices& visible);

}  // namespace hdp::trainer
