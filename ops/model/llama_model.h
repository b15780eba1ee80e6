// File: ops/model/llama_model.h
//
// A LLaMA-style decoder (Hugging Face LlamaForCausalLM numerics: pre-norm RMSNorm blocks, RoPE in
// rotate-half layout, GQA attention, SwiGLU MLP, no biases, untied lm_head) with an explicit forward
// and backward over one packed micro-batch. Parameters and gradients are two flat buffers in the
// layout of llama_params.h. Not thread-safe: one model object per training thread.
//
// Example:
//   LlamaModel model(config);             // f32 on the CPU
//   model.init(/*seed=*/1234);
//   model.zero_grad();
//   double loss_sum = model.forward(batch);  // summed over counted tokens
//   model.backward(1.0 / global_tokens);     // adds d(loss_sum / global_tokens) into grads()
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_executor.h"
#include "ops/model/llama_config.h"
#include "ops/model/llama_params.h"
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
  explicit LlamaModel(const LlamaConfig& config, DType dtype = DType::kF32, Device device = Device::kCpu);

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
  // Adds dloss * d(summed loss)/d(params) into grads(); needs the forward() just before.
  void backward(double dloss);

 private:
  struct LayerActs {
    Tensor x;            // block input (residual stream)
    RmsNormOutput n1;
    Tensor q, k, v;      // after RoPE (q, k), [T, heads, head_dim]
    AttentionOutput att;
    Tensor x_mid;        // after the attention residual
    RmsNormOutput n2;
    Tensor gate, up, h;  // MLP: h = silu(gate) * up
  };

  Tensor zeros_like(const Tensor& t) const { return Tensor::zeros(t.shape(), t.dtype(), t.device()); }

  LlamaConfig config_;
  Tensor params_;
  Tensor grads_;
  LlamaWeights weights_;
  LlamaWeights grad_views_;

  // The last forward's inputs and activations.
  Batch batch_;
  std::unique_ptr<AttentionExecutor> packed_;  // the default executor of the last forward
  AttentionExecutor* attention_ = nullptr;
  std::vector<LayerActs> acts_;
  Tensor x_final_;
  RmsNormOutput n_final_;
  Tensor logits_;
  Tensor ce_lse_;
};

}  // namespace hdp::ops::model
