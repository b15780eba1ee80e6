#include "ops/model/llama_decoder.h"

#include "common/error.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace hdp::ops::model {

LlamaDecoder::LlamaDecoder(const LlamaConfig& config, const Tensor& params, int64_t max_tokens)
    : config_(config),
      weights_(bind_weights(config, params)),
      rope_table_(rope_table(config.rope_inv_freq(), DType::kF32, params.device())),
      max_tokens_(max_tokens) {
  if (params.dtype() != DType::kF32) throw InvalidArgument("LlamaDecoder: parameters are " + params.describe() + ", expected f32");
  if (max_tokens < 1) throw InvalidArgument("LlamaDecoder: max_tokens " + std::to_string(max_tokens) + " must be >= 1");
  const Shape cache{max_tokens, config.n_kv_heads, config.head_dim()};
  for (int i = 0; i < config.n_layers; ++i) {
    keys_.push_back(Tensor::zeros(cache, DType::kF32, params.device()));
    values_.push_back(Tensor::zeros(cache, DType::kF32, params.device()));
  }
}

std::vector<float> LlamaDecoder::append(const std::vector<int32_t>& tokens) {
  const LlamaConfig& c = config_;
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("LlamaDecoder::append: no token");
  if (length_ + n > max_tokens_) {
    throw InvalidArgument("LlamaDecoder::append: " + std::to_string(length_ + n) + " tokens exceed the cache of " +
                          std::to_string(max_tokens_));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      throw InvalidArgument("LlamaDecoder::append: token " + std::to_string(t) + " is outside the vocabulary of " +
                            std::to_string(c.vocab_size));
    }
  }
  const Device device = weights_.embed.device();
  const int64_t hd = c.head_dim(), p = length_, kv_row = int64_t{c.n_kv_heads} * hd;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = p + i;
  const Tensor ids = Tensor::from_vector(tokens, {n}).to(device);
  const Tensor positions = Tensor::from_vector(pos, {n}).to(device);
  // The new queries at positions p.. against every key up to theirs (kernels/attention_layout.h).
  const AttentionSpec spec = AttentionSpec::block(static_cast<int32_t>(n), p, static_cast<int32_t>(p + n), 0, true);

  Tensor x = embedding_forward(ids, weights_.embed);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(i)];
    const Tensor h1 = rmsnorm_forward(x, w.input_norm, c.norm_eps).y;
    const Tensor q = rope_forward(linear_forward(h1, w.q, w.q_bias).reshape({n, c.n_heads, hd}), positions, rope_table_);
    const Tensor k = rope_forward(linear_forward(h1, w.k, w.k_bias).reshape({n, c.n_kv_heads, hd}), positions, rope_table_);
    const Tensor v = linear_forward(h1, w.v, w.v_bias).reshape({n, c.n_kv_heads, hd});
    keys_[static_cast<size_t>(i)].view(p * kv_row, {n, c.n_kv_heads, hd}).copy_from(k);
    values_[static_cast<size_t>(i)].view(p * kv_row, {n, c.n_kv_heads, hd}).copy_from(v);
    const Tensor keys = keys_[static_cast<size_t>(i)].view(0, {p + n, c.n_kv_heads, hd});
    const Tensor values = values_[static_cast<size_t>(i)].view(0, {p + n, c.n_kv_heads, hd});
    const Tensor att = attention_forward(q, keys, values, spec).out;
    add_(x, linear_forward(att.reshape({n, c.n_heads * hd}), w.o));
    const Tensor h2 = rmsnorm_forward(x, w.post_norm, c.norm_eps).y;
    add_(x, linear_forward(swiglu_forward(linear_forward(h2, w.gate), linear_forward(h2, w.up)), w.down));
  }
  length_ += n;
  const Tensor last = x.view((n - 1) * c.d_model, {1, c.d_model});
  return linear_forward(rmsnorm_forward(last, weights_.norm, c.norm_eps).y, weights_.lm_head).to_vector<float>();
}

}  // namespace hdp::ops::model
