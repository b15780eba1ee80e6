// File: trainer/sample.h
//
// Text from a model (`hdp sample`): the next token drawn from the logits (greedy at temperature 0,
// else softmax(logits / T) over the top-k), generated with the KV-cache decoder
// (ops/model/llama_decoder.h) on the CPU. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "ops/model/llama_decoder.h"

namespace hdp::trainer {

struct SampleOptions {
  std::int64_t max_new_tokens = 128;
  double temperature = 0.8;  // 0: greedy (the argmax, the lowest id on a tie)
  int top_k = 40;            // 0: every token
  std::uint64_t seed = 1234;
  std::int32_t stop_token = -1;  // generation ends after this token (an end-of-document id); -1: none
};

// InvalidArgument for a negative temperature, top_k or max_new_tokens.
void check(const SampleOptions& options);

// The next token: argmax at temperature 0, else a draw from softmax(logits / temperature)
// restricted to the top_k largest logits (ties broken by the lower id).
std::int32_t pick_token(std::span<const float> logits, double temperature, int top_k, std::mt19937_64& rng);

// Runs `prompt` (at least one token) through `decoder`, then draws up to max_new_tokens tokens,
// calling on_token(token) as each is drawn; stops after stop_token or when the decoder's cache is
// full. Returns the tokens drawn.
std::vector<std::int32_t> generate(ops::model::LlamaDecoder& decoder, const std::vector<std::int32_t>& prompt,
                                   const SampleOptions& options, const std::function<void(std::int32_t)>& on_token = {});

}  // namespace hdp::trainer
