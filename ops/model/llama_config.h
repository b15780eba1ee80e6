// File: ops/model/llama_config.h
//
// The shape of a LLaMA-style decoder, with Hugging Face LlamaConfig's meaning for every field.
// The defaults are the byte-level (256-token) 4-layer, d_model 256 model of bench/ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hdp::ops::model {

// Hugging Face's rope_scaling.rope_type: kDefault plain RoPE, kLinear every inverse frequency
// divided by `factor`, kLlama3 Llama 3's frequency-band rule (rope_inv_freq below).
enum class RopeType { kDefault, kLinear, kLlama3 };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;            // kLinear, kLlama3
  double low_freq_factor = 1.0;   // kLlama3
  double high_freq_factor = 4.0;  // kLlama3
  int original_max_positions = 8192;  // kLlama3: original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

// The model families hdp reads and writes: the same decoder, their config and parameter names.
// kQwen2 has q/k/v biases (qkv_bias); kMistral may carry a sliding window.
enum class Family { kLlama, kMistral, kQwen2 };
std::string family_name(Family family);  // "llama" | "mistral" | "qwen2"
Family parse_family(const std::string& name);  // InvalidArgument for another name
std::string rope_type_name(RopeType type);      // "default" | "linear" | "llama3"
RopeType parse_rope_type(const std::string& name);  // InvalidArgument for another name

struct LlamaConfig {
  int vocab_size = 256;  // bytes: no tokenizer needed
  int d_model = 256;     // hidden_size
  int n_layers = 4;      // num_hidden_layers
  int n_heads = 4;       // num_attention_heads
  int n_kv_heads = 4;    // num_key_value_heads (GQA when < n_heads)
  int ffn_dim = 768;     // intermediate_size
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;  // rms_norm_eps
  // max_position_embeddings: the longest context the model is meant for (0: not known). Not part of
  // the shape (hdp's RoPE has no table, the parameters do not depend on it) and no limit on
  // --context: hdp extends a model's context by training it longer; `hdp export` writes the larger
  // of it and the context the job trained at (trainer/hf_model.h).
  int max_positions = 0;
  RopeScaling rope_scaling;
  // head_dim when set (> 0), free of d_model / n_heads: q and o are [n_heads * head_dim, d_model]
  // and [d_model, n_heads * head_dim]. 0: d_model / n_heads, which must divide.
  int explicit_head_dim = 0;
  bool tie_embeddings = false;  // tie_word_embeddings: lm_head is the embedding matrix
  bool qkv_bias = false;        // q/k/v projections carry biases (Qwen2)
  Family family = Family::kLlama;
  // Mistral's sliding_window (0: none). The attention is full causal, so a job runs only at a
  // context no longer than it (trainer_config.cc refuses a longer one).
  int sliding_window = 0;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : d_model / n_heads; }
  // RoPE's inverse frequencies, head_dim / 2 of them: theta^(-2i/head_dim), rescaled by
  // rope_scaling as Hugging Face's _compute_{linear_scaling,llama3}_parameters do (in f64; the
  // kernels round them to their dtype).
  std::vector<double> rope_inv_freq() const;
  // Throws InvalidArgument naming the field when the shape is inconsistent.
  void validate() const;
  // Multiply-adds of one token through the weights, times 2: the GEMM FLOPs of a forward pass,
  // excluding attention's score and value products (causal_attention_flops).
  int64_t weight_flops_per_token() const;
  // FLOPs of one training step (forward and backward, 3x the forward's, GEMMs and attention alike)
  // on one causal sequence of `tokens` tokens: what benchmarks divide by time.
  double step_flops(int64_t tokens) const;
};

// FLOPs of causal attention's forward over one sequence of `tokens` tokens: Q K^T and P V over the
// tokens(tokens+1)/2 visible pairs, 2 FLOPs per multiply-add. Its backward counts 2.5 times that
// (five products against two), as FlashAttention's figures do.
double causal_attention_flops(int64_t tokens, int heads, int head_dim);

// How LlamaModel computes (ops/model/llama_model.h): kFull in its parameters' dtype, kBF16 mixed
// precision (bf16 operands, f32 master weights and accumulation).
enum class Precision { kFull, kBF16 };
Precision parse_precision(const std::string& name);  // "f32" | "bf16"; InvalidArgument otherwise
std::string precision_name(Precision precision);      // "f32" | "bf16"

}  // namespace hdp::ops::model
