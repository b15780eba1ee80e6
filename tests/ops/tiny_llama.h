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

}  // namespace hdp::ops::testing
