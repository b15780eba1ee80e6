// File: bench/checkpoint_stall.h
//
// The training stall of an asynchronous checkpoint against the demo model's training step: the
// default LlamaConfig (4 layers, d_model 256, vocabulary 256: the model of bench/ops) on one
// packed 4,096-token micro-batch, forward + backward + AdamW over its
// flat buffers. After every step the trainer saves parameters and both AdamW moments through
// AsyncSaver (the most frequent cadence there is), so each save may also wait for the previous
// one under the documented policy. The stall is the time save() blocks the caller: that wait
// plus the copy into the staging buffers.
#pragma once

#include <filesystem>

namespace hdp::bench {

// Runs `saves` steps each followed by a save under `root`, prints the report. Blocks for the steps.
void measure_stall(const std::filesystem::path& root, int saves);

}  // namespace hdp::bench
