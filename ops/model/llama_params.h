// File: ops/model/llama_params.h
//
// The parameters of a LlamaConfig laid out in ONE flat buffer (ZeRO-1 shards slice it by range),
// each tensor a named view with its Hugging Face LLaMA name and shape:
//   model.embed_tokens.weight                          [vocab, d]
//   model.layers.{i}.input_layernorm.weight            [d]
//   model.layers.{i}.self_attn.{q,k,v}_proj.weight     [n_heads*hd, d] / [n_kv*hd, d]
//   model.layers.{i}.self_attn.{q,k,v}_proj.bias       [n_heads*hd] / [n_kv*hd]   (qkv_bias only)
//   model.layers.{i}.self_attn.o_proj.weight           [d, n_heads*hd]
//   model.layers.{i}.post_attention_layernorm.weight   [d]
//   model.layers.{i}.mlp.{gate,up}_proj.weight         [ffn, d]
//   model.layers.{i}.mlp.down_proj.weight              [d, ffn]
//   model.norm.weight                                  [d]
//   lm_head.weight                                     [vocab, d]   (untied only)
// in that order. A tied model (tie_embeddings) has no lm_head.weight: its head is the embedding,
// one parameter in the buffer, sharded and checkpointed once. Linear weights are [out_features, in_features], as HF stores them, so a
// checkpoint's tensors load unchanged into a standard LLaMA implementation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/model/llama_config.h"
#include "ops/tensor.h"

namespace hdp::ops::model {

struct ParamEntry {
  std::string name;
  int64_t offset;  // in elements, into the flat buffer
  Shape shape;
};

// Every parameter's name, offset and shape, in buffer order.
std::vector<ParamEntry> param_layout(const LlamaConfig& config);
int64_t param_count(const LlamaConfig& config);

struct LayerWeights {
  Tensor input_norm, q, k, v, o, post_norm, gate, up, down;
  Tensor q_bias, k_bias, v_bias;  // undefined without qkv_bias
};

// Typed views of one flat buffer (the parameters, or their gradients) in the layout above.
struct LlamaWeights {
  Tensor embed;
  std::vector<LayerWeights> layers;
  Tensor norm;
  Tensor lm_head;  // tied: the same view as embed
};

LlamaWeights bind_weights(const LlamaConfig& config, const Tensor& flat);

// The named view of `flat`; InvalidArgument for an unknown name.
Tensor named_view(const LlamaConfig& config, const Tensor& flat, const std::string& name);

// Deterministic initialisation: linear and embedding weights ~ N(0, 0.02^2) (HF's
// initializer_range), norm weights 1, biases 0. The same seed gives the same bytes on every machine
// (splitmix64 + Box-Muller, no library distribution).
void init_params(const LlamaConfig& config, const Tensor& flat, uint64_t seed);

}  // namespace hdp::ops::model
