// File: agents/worker_count.h
//
// How many workers an agent starts (`hdp agent --nproc-per-node`, HDP_NPROC_PER_NODE), torchrun's
// convention:
//   - N (1..1024): N workers, whatever the node has (several may then share a GPU, or all run on
//     the CPU);
//   - gpu: one worker per CUDA device the agent sees (after CUDA_VISIBLE_DEVICES); refused when it
//     sees none, so a GPU job never starts on a node without GPUs;
//   - auto (the default): one per CUDA device, else 1.
// Each worker then binds to its local rank's device (trainer/device_placement.h).
#pragma once

#include <string>

namespace hdp::agents {

// InvalidArgument naming the value (and, for gpu, what was found).
int resolve_worker_count(const std::string& text, int visible_cuda_devices);

}  // namespace hdp::agents
