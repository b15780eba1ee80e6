// File: trainer/host_shard.h
//
// The host side of a rank's checkpoint shard: checkpoints read and write plain host spans
// (checkpoint/state.h), while the trainer's state lives where its model does (the CPU or a CUDA
// device, trainer/device_placement.h). The shard is the rank's range of the parameters and both
// AdamW moments, three f32 tensors of one element count on one device.
//  - On the CPU the spans are the tensors' own memory: nothing is copied, as before.
//  - On a device they are three host buffers, page-locked (ops::Tensor::pinned), made once per
//    shard size and reused. for_save() copies the device ranges into them (the host waits for the
//    copies, which follow the work queued on the default stream; a save happens between steps);
//    for_restore() hands them to the reader, and upload() then copies them to the device.
// No handle to the shard outlives the call that used it (upload() releases the restored one), so
// an optimizer that a recovery replaces is freed at once.
//
// Example (trainer/recovery.cc):
//   HostShard host;
//   saver.save({..., host.for_save(range, {params_range, m, v})});          // a save
//   restore_latest(..., host.for_restore(range, {params_range, m, v}));       // a restore...
//   host.upload();                                                            // ...then to the device
#pragma once

#include <array>

#include "checkpoint/state.h"
#include "ops/tensor.h"

namespace hdp::trainer {

class HostShard {
 public:
  using Buffers = std::array<ops::Tensor, checkpoint::kBufferCount>;

  // Spans holding the shard's current values (copied from a device). InvalidArgument when the
  // tensors are not f32 of range.size() elements on one device.
  std::array<std::span<const float>, checkpoint::kBufferCount> for_save(const checkpoint::ShardRange& range,
                                                                          const Buffers& shard);
  // Spans a restore fills; on a device, upload() copies them into `shard` afterwards.
  checkpoint::ShardTarget for_restore(const checkpoint::ShardRange& range, const Buffers& shard);
  // The last for_restore()'s spans into its tensors (nothing on the CPU).
  void upload();
  // Whether the last call's spans were host copies (its shard was on a device).
  bool staged() const { return staged_; }

 private:
  // Checks the shard and, on a device, sizes host_ for it; true when staged.
  bool bind(const checkpoint::ShardRange& range, const Buffers& shard);

  Buffers host_;     // on a device: the pinned copies, reused (never the shard's own tensors)
  Buffers pending_;  // the shard the last for_restore() fills, until upload() (then released)
  bool staged_ = false;
};

}  // namespace hdp::trainer
