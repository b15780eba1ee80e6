// File: trainer/memory_model.h
//
// What one rank needs in memory at its peak, stated before the first step so that a job that
// cannot fit is refused with the figures instead of failing in an allocation. A pure model: it
// reads a LlamaConfig and how the rank trains, allocates nothing and asks no device.
//
// The peak of a rank is the step's: every persistent buffer, plus the activations the forward of
// one micro-batch of C tokens keeps for its backward (a rank runs its micro-batches one after
// another, and the model keeps them until the next forward), plus the largest transient of the
// backward. Components, in bytes (n parameters; s = ceil(n / W), the largest ZeRO-1 shard):
//   parameters         f32 master weights, 4n (every rank holds all of them)
//   bf16 compute copy  2n under bf16 mixed precision (LlamaModel's rounded copy), else 0
//   gradients          f32, 4n (the full flat buffer the backward adds into)
//   optimizer shard    exp_avg, exp_avg_sq and the summed gradient shard: 3 x 4s
//   bf16 wire buffer   2n under bf16 (ZeroOptimizer's buffer both collectives run on), else 0
//   activations        C x layers x layer_activation_bytes(): what LlamaModel's LayerActs keeps
//   loss head          C x head_activation_bytes(): the final norm, the logits, the loss's
//                      log-sum-exp and the token ids, kept from the forward to the next one
//   backward workspace the largest set of gradient temporaries alive at once: the loss head's
//                      (dlogits) or one layer's (every d* tensor of its backward); on the CPU
//                      also the f32 copies of bf16 operands that its bf16 GEMM and attention
//                      make, and each kernel thread's attention tiles (P and dS, f32)
//   ring blocks        with ring attention: the K/V block received and two dK/dV accumulators
//   buddy copies       per copy of another rank's shard held (mesh/step/buddies.h; one in the
//                      usual plan): its exp_avg, exp_avg_sq, gradient and parameters, 4 x 4s
//   previous versions  with keep_previous (mesh/step/replicas.cc sets it when every shard has a
//                      copy): the triple (parameters, exp_avg, exp_avg_sq) of the own shard and
//                      of every copy, 3 x 4s each
// Where the buddy copies and the previous versions live is an input (copies_on_host): on a CUDA
// device they may go to pinned host memory (GPU memory is the scarce one; they are touched once per
// step), which ZeroOptimizer does not do yet (it keeps them beside its own shard, on the device, so
// the trainer passes false). device_bytes() is what must fit the GPU, host_bytes() what the host
// pins. On the CPU everything is host memory and counts as device.
// Upper bounds where the code's lifetimes overlap only in part: the workspace sums temporaries
// that are alive together at the end of a layer's backward, plus the largest operand copy.
//
// The one count of a layer's activations is layer_activation_bytes(); offload_model() hands it to
// the planner (ByteScale Eq. 3, mesh/plan/sharding.h) and tests/trainer/memory_model_test.cc checks
// it against the bytes a real forward leaves allocated.
//
// Offloading (ByteScale's selective activation offloading): ops/model/offload_schedule.h says
// which layers' activations a micro-batch of ratio r moves to pinned host memory, and LlamaModel
// runs it; offload_model() gives the planner the activation sizes it decides r from.
//
// Example:
//   MemoryInputs in{.model = config, .precision = Precision::kBF16, .device = ops::Device::kCuda,
//                   .device_ordinal = 0, .world_size = 64, .capacity = 8192, .buddy_copies = 1,
//                   .keep_previous = true, .ring = true};
//   MemoryBreakdown need = estimate_memory(in);
//   check_fits(need, free_bytes, "free on cuda:0", MemoryMargin::gpu());
//   in.capacity = max_capacity(in, free_bytes, MemoryMargin::gpu(), /*granule=*/128);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/plan/cost_model.h"
#include "ops/dtype.h"
#include "ops/model/llama_config.h"
#include "ops/model/offload_schedule.h"

namespace hdp::trainer {

// How one rank trains.
struct MemoryInputs {
  ops::model::LlamaConfig model;
  ops::model::Precision precision = ops::model::Precision::kFull;
  ops::Device device = ops::Device::kCpu;
  int device_ordinal = -1;      // for the figures' "cuda:0"; -1 on the CPU
  int world_size = 1;           // ZeRO-1 shards the optimizer state over all ranks
  std::int64_t capacity = 1024; // C: tokens of one micro-batch on this rank
  int buddy_copies = 0;         // copies of other ranks' shards this rank holds
  bool keep_previous = false;   // the previous triple of every shard kept (redundancy on)
  bool ring = false;            // sequences longer than C are sharded over rings (ring attention)
  int threads = 1;              // the CPU's kernel threads: each runs attention with its own tiles
  bool copies_on_host = false;  // CUDA: buddy copies and previous versions in pinned host memory

  // InvalidArgument naming a bad field (the model's own validate(), a world or C below 1, ...).
  void validate() const;
};

// Activation bytes one layer keeps per token for its backward (LlamaModel's LayerActs), and those
// independent of the token count (none today).
struct LayerActivationBytes {
  std::int64_t per_token = 0;
  std::int64_t fixed = 0;
};
LayerActivationBytes layer_activation_bytes(const ops::model::LlamaConfig& model, ops::model::Precision precision);
// Bytes per token the forward keeps outside the layers: the final norm's input and output, the
// logits, the loss's log-sum-exp and the batch's token ids, targets and positions.
std::int64_t head_activation_bytes(const ops::model::LlamaConfig& model, ops::model::Precision precision);

enum class MemoryPlace { kDevice, kPinnedHost };

struct MemoryComponent {
  std::string name;
  std::int64_t bytes;
  MemoryPlace place;
};

struct MemoryBreakdown {
  MemoryInputs inputs;
  std::int64_t parameters = 0;
  std::int64_t compute_copy = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_shard = 0;
  std::int64_t wire_buffer = 0;
  std::int64_t activations = 0;
  std::int64_t loss_head = 0;
  std::int64_t workspace = 0;
  std::int64_t ring_blocks = 0;
  std::int64_t buddy_copies = 0;
  std::int64_t previous_versions = 0;

  // Every component above with its name and where it lives, in this order.
  std::vector<MemoryComponent> components() const;
  std::int64_t device_bytes() const;
  std::int64_t host_bytes() const;  // pinned host memory (0 on the CPU)
  // "cpu" or "cuda:N".
  std::string device_name() const;
  // One line: the device total and every non-zero component in MiB/GiB, then the pinned host
  // total and its components when there are any.
  std::string describe() const;
};

// InvalidArgument from inputs.validate().
MemoryBreakdown estimate_memory(const MemoryInputs& inputs);

// Headroom kept out of a free byte count: fraction x free + reserve_bytes (the caching allocator's
// fragmentation, cuBLAS and communication workspaces, the kernels' own scratch).
struct MemoryMargin {
  double fraction = 0;
  std::int64_t reserve_bytes = 0;
  static MemoryMargin none() { return {}; }
  // 8% of the free memory and 1 GiB.
  static MemoryMargin gpu() { return {.fraction = 0.08, .reserve_bytes = std::int64_t{1} << 30}; }
  // What the model may use of `free_bytes`: free - fraction x free - reserve, at least 0.
  std::int64_t usable(std::int64_t free_bytes) const;
};

// InvalidArgument with one line when need.device_bytes() exceeds margin.usable(free_bytes): the
// need, its largest components, the limit and where it comes from (`what`, e.g. "free on
// cuda:0" or "--max-rank-memory-mb"), and what to change.
void check_fits(const MemoryBreakdown& need, std::int64_t free_bytes, const std::string& what,
                MemoryMargin margin = MemoryMargin::none());

// The largest capacity C, a multiple of `granule` tokens, whose device bytes fit
// margin.usable(free_bytes) with everything else in `inputs` unchanged; 0 when not even one
// granule fits. The need grows with C, so the answer is monotone in free_bytes.
std::int64_t max_capacity(MemoryInputs inputs, std::int64_t free_bytes, MemoryMargin margin = MemoryMargin::none(),
                          std::int64_t granule = 1);

// The planner's OffloadModel of this model: layer_activation_bytes() as Act(s) = a s + b, and the
// given copy bandwidths (GB/s, 1e9 bytes per second).
mesh::OffloadModel offload_model(const ops::model::LlamaConfig& model, ops::model::Precision precision,
                                 double d2h_gbps, double h2d_gbps);

// The offloading schedule lives with the model that runs it (ops/model/offload_schedule.h).
using ops::model::LayerOffload;
using ops::model::offload_schedule;
using ops::model::OffloadSchedule;
using ops::model::peak_resident_activation_bytes;

// "512.0 KiB", "3.2 MiB", "81.3 GiB".
std::string format_bytes(std::int64_t bytes);

}  // namespace hdp::trainer
