// File: ops/model/llama_model.h
//
// A LLaMA-style decoder (Hugging Face LlamaForCausalLM numerics: pre-norm RMSNorm blocks, RoPE in
// rotate-half layout with the config's inverse frequencies (scaled or not), GQA attention, SwiGLU
// MLP; q/k/v biases for Qwen2; lm_head its own matrix or, tied, the embedding's) with an explicit forward
// and backward over one packed micro-batch. Parameters and gradients are two flat buffers in the
// layout of llama_params.h. Not thread-safe: one model object per training thread.
//
// Precision: kFull runs every op in the parameters' dtype (f32, or f64 for the gradient checks).
// kBF16 is mixed precision (as PyTorch's bf16 autocast): the parameters and gradients stay f32 (the
// master copy, what the optimizer and checkpoints see); each forward() rounds them to a bf16
// compute copy; every GEMM and the attention take bf16 operands (that compute copy's weights and
// bf16 activations, the ones kept for the backward) and accumulate and return f32; embedding,
// RMSNorm, RoPE, SwiGLU, the residual stream, the loss and every gradient are f32. Attention's bf16
// K/V is also what ring attention sends.
//
// Example:
//   LlamaModel model(config);             // f32 on the CPU
//   model.init(/*seed=*/1234);
//   model.zero_grad();
//   double loss_sum = model.forward(batch);  // summed over counted tokens
//   model.backward(1.0 / global_tokens);     // adds d(loss_sum / global_tokens) into grads()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_executor.h"
#include "ops/model/llama_config.h"
#include "ops/model/llama_params.h"
#include "ops/model/offload_schedule.h"
#include "ops/rmsnorm.h"
#include "ops/tensor.h"

namespace hdp::ops::model {

// One packed micro-batch of whole or partial sequences.
struct Batch {
  Tensor tokens;                    // i32 [T]
  Tensor targets;                   // i32 [T], -1 where the token is not counted
  Tensor positions;                 // i64 [T], each token's position in its sequence (RoPE)
  // n_seqs + 1 offsets into the T tokens (host): the sequences PackedAttention attends within, when
  // forward() is given no executor. A batch of shards (mesh/step/batch_builder.h) leaves it empty and
  // comes with its own executor.
  std::vector<int32_t> cu_seqlens;
};

// A Batch of documents packed back to back: targets are the next byte within each document, and
// the last token of each document is not counted.
Batch pack_documents(const std::vector<std::vector<int32_t>>& documents, Device device = Device::kCpu);

class LlamaModel {
 public:
  // kBF16 needs dtype f32 (InvalidArgument otherwise).
  explicit LlamaModel(const LlamaConfig& config, DType dtype = DType::kF32, Device device = Device::kCpu,
                      Precision precision = Precision::kFull);
  Precision precision() const { return precision_; }

  const LlamaConfig& config() const { return config_; }
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  const LlamaWeights& weights() const { return weights_; }

  void init(uint64_t seed);
  void zero_grad();

  // Runs the model, keeps the activations for backward(), and returns the summed token loss.
  // Attention runs through `attention` (which must outlive the backward() that follows), or when
  // null through PackedAttention over batch.cu_seqlens.
  double forward(const Batch& batch, AttentionExecutor* attention = nullptr);
  // Logits [T, vocab] of the last forward().
  const Tensor& logits() const { return logits_; }
  // Adds dloss * d(summed loss)/d(params) into grads(); needs the forward() just before, whose
  // activations it releases layer by layer (a second backward() needs another forward()).
  void backward(double dloss);

  // Activation offloading (ops/model/offload_schedule.h): the next forward() moves the
  // activations of the schedule's offloaded layers to pinned host memory once each layer's forward
  // is done, and its backward() brings each back before that layer's backward; the gradients are
  // the same bits as without. For one forward only: a later one keeps every layer resident unless
  // asked again. The copies are synchronous here (the schedule's overlap with the next layer's
  // compute, on a copy stream, is for the GPU to come). InvalidArgument for a schedule of another
  // layer count.
  void offload_next(const OffloadSchedule& schedule);
  // Bytes the last forward moved to host memory (0 when it offloaded nothing).
  std::int64_t offloaded_bytes() const { return offloaded_bytes_; }
  // The most bytes of layer activations on the model's device at once during the last forward
  // and backward (each layer's are released once its backward is done): what offloading lowers.
  std::int64_t peak_resident_activation_bytes() const { return peak_resident_bytes_; }
  // Called before each layer's forward and backward (empty: nothing). It may throw to abandon the
  // pass, as a distributed step does when its communicator died meanwhile (the step is lost
  // anyway; the next forward starts afresh, and zero_grad() clears a backward cut short).
  void set_between_layers(std::function<void()> check) { between_layers_ = std::move(check); }

 private:
  // What the backward needs; "operand" tensors are bf16 under kBF16 (GEMM and attention inputs).
  struct LayerActs {
    Tensor x;            // block input (residual stream)
    RmsNormOutput n1;    // its y only under kFull (it is in1 then)
    Tensor in1;          // operand: the normed input of q, k, v
    Tensor q, k, v;      // operands: after RoPE (q, k), [T, heads, head_dim]
    AttentionOutput att;
    Tensor att_in;       // operand: the attention output, input of o
    Tensor x_mid;        // after the attention residual
    RmsNormOutput n2;
    Tensor in2;          // operand: the normed input of gate and up
    Tensor gate, up;     // MLP: h = silu(gate) * up
    Tensor h_in;         // operand: h, input of down
  };

  // Moves every tensor of `a` to `device` (host memory: pinned), a tensor that shares another's
  // memory once; returns the bytes moved.
  static std::int64_t move_acts(LayerActs& a, Device device);
  // The bytes of `a`'s tensors, a tensor that shares another's memory once.
  static std::int64_t acts_bytes(LayerActs& a);
  template <typename F>
  static void for_each_act(LayerActs& a, F&& f);
  // Zeros in the gradients' dtype (f32 under kBF16 too) on the model's device.
  Tensor grad_zeros(const Shape& shape) const { return Tensor::zeros(shape, grads_.dtype(), grads_.device()); }
  // t as an operand: rounded to bf16 under kBF16, else t itself.
  Tensor operand(const Tensor& t) const;

  LlamaConfig config_;
  Precision precision_;
  Tensor rope_table_;  // config_.rope_inv_freq() in the parameters' dtype, on their device
  Tensor params_;
  Tensor compute_;                // kBF16: the bf16 copy of params_ each forward() makes
  LlamaWeights compute_weights_;  // views of compute_ (kBF16) or params_ (kFull)
  Tensor grads_;
  LlamaWeights weights_;
  LlamaWeights grad_views_;

  // The last forward's inputs and activations.
  Batch batch_;
  std::unique_ptr<AttentionExecutor> packed_;  // the default executor of the last forward
  AttentionExecutor* attention_ = nullptr;
  std::vector<LayerActs> acts_;
  std::vector<bool> offload_;      // by layer: the next forward's schedule (empty: none)
  std::function<void()> between_layers_;
  std::vector<bool> offloaded_;    // by layer: the last forward moved it to host memory
  std::int64_t offloaded_bytes_ = 0;
  std::vector<std::int64_t> layer_bytes_;  // by layer: what the last forward kept
  std::int64_t resident_bytes_ = 0, peak_resident_bytes_ = 0;
  Tensor x_final_;
  RmsNormOutput n_final_;
  Tensor in_final_;  // operand: the final norm's output, input of lm_head
  Tensor logits_;
  Tensor ce_lse_;
};

}  // namespace hdp::ops::model
