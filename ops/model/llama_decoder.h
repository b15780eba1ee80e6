// File: ops/model/llama_decoder.h
//
// Generation with a KV cache: the model's forward for new tokens only, each layer's keys and values
// of the tokens before them kept (f32, on the parameters' device). The same ops and numerics as
// LlamaModel::forward (ops/model/llama_model.h), so the logits of a position equal those of a full
// forward over the sequence up to it, to f32 summation order (tests/ops/llama_decoder_test.cc).
// No backward; the parameters are read, never written.
//
// Example:
//   LlamaDecoder decoder(config, params, /*max_tokens=*/512);
//   std::vector<float> logits = decoder.append(prompt);   // the prompt in one pass
//   while (...) logits = decoder.append({next_token});     // then one token at a time
#pragma once

#include <cstdint>
#include <vector>

#include "ops/model/llama_config.h"
#include "ops/model/llama_params.h"
#include "ops/tensor.h"

namespace hdp::ops::model {

class LlamaDecoder {
 public:
  // `params`: the flat f32 parameter buffer (llama_params.h's layout), which must outlive this
  // object. `max_tokens`: the most tokens the cache holds (prompt and generated together).
  LlamaDecoder(const LlamaConfig& config, const Tensor& params, int64_t max_tokens);

  // Runs `tokens` at the positions after those already in the cache and returns the logits of the
  // last one ([vocab]). InvalidArgument for no token, a token id outside the vocabulary, or a cache
  // that would exceed max_tokens.
  std::vector<float> append(const std::vector<int32_t>& tokens);
  int64_t length() const { return length_; }
  int64_t max_tokens() const { return max_tokens_; }

 private:
  LlamaConfig config_;
  LlamaWeights weights_;
  Tensor rope_table_;  // config_.rope_inv_freq(), f32
  int64_t max_tokens_;
  int64_t length_ = 0;
  std::vector<Tensor> keys_, values_;  // per layer, [max_tokens, n_kv_heads, head_dim]
};

}  // namespace hdp::ops::model
