// File: tests/ops/tiny_llama.h
//
// The tiny LLaMA shape the model and step tests share: 2 layers, d_model 32, GQA (4 query heads
// on 2 kv heads), ffn 64, the byte vocabulary.
#pragma once

#include "ops/model/llama_config.h"

namespace hdp::ops::testing {

inline model::LlamaConfig tiny_llama() {
  model::LlamaConfig c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 64;
  return c;
}

// Llama 3.2's features at that size: llama3 RoPE scaling (original_max_position_embeddings 64
// puts head_dim 12's six frequencies in all three bands: wavelengths 6.3, 29, 135, ...), tied
// embeddings, head_dim 12 free of d_model / n_heads (q is 48 wide on d_model 32), GQA.
inline model::LlamaConfig tiny_llama3() {
  model::LlamaConfig c = tiny_llama();
  c.explicit_head_dim = 12;
  c.tie_embeddings = true;
  c.rope_theta = 10000.0;
  c.rope_scaling = {.type = model::RopeType::kLlama3, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                    .original_max_positions = 64};
  return c;
}

// Qwen2's features: q/k/v biases, tied embeddings.
inline model::LlamaConfig tiny_qwen2() {
  model::LlamaConfig c = tiny_llama();
  c.family = model::Family::kQwen2;
  c.qkv_bias = true;
  c.tie_embeddings = true;
  c.rope_theta = 1000000.0;
  return c;
}

}  // namespace hdp::ops::testing
