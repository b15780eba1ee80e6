#include "ops/model/llama_model.h"

#include <algorithm>

#include "common/error.h"
#include "ops/add.h"
#include "ops/convert.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace hdp::ops::model {

Batch pack_documents(const std::vector<std::vector<int32_t>>& documents, Device device) {
  std::vector<int32_t> tokens, targets;
  std::vector<int64_t> positions;
  Batch b;
  b.cu_seqlens.push_back(0);
  for (const std::vector<int32_t>& doc : documents) {
    for (size_t i = 0; i < doc.size(); ++i) {
      tokens.push_back(doc[i]);
      targets.push_back(i + 1 < doc.size() ? doc[i + 1] : -1);
      positions.push_back(static_cast<int64_t>(i));
    }
    b.cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  b.tokens = Tensor::from_vector(tokens, {n}).to(device);
  b.targets = Tensor::from_vector(targets, {n}).to(device);
  b.positions = Tensor::from_vector(positions, {n}).to(device);
  return b;
}

LlamaModel::LlamaModel(const LlamaConfig& config, DType dtype, Device device, Precision precision)
    : config_(config), precision_(precision) {
  if (precision_ == Precision::kBF16 && dtype != DType::kF32)
    throw InvalidArgument("LlamaModel: bf16 mixed precision keeps f32 parameters, not " + dtype_name(dtype));
  const int64_t n = param_count(config_);  // validates the config
  rope_table_ = rope_table(config_.rope_inv_freq(), dtype, device);
  params_ = Tensor::zeros({n}, dtype, device);
  grads_ = Tensor::zeros({n}, dtype, device);
  weights_ = bind_weights(config_, params_);
  grad_views_ = bind_weights(config_, grads_);
  if (precision_ == Precision::kBF16) {
    compute_ = Tensor::zeros({n}, DType::kBF16, device);
    compute_weights_ = bind_weights(config_, compute_);
  } else {
    compute_weights_ = weights_;
  }
}

Tensor LlamaModel::operand(const Tensor& t) const {
  return precision_ == Precision::kBF16 ? to_dtype(t, DType::kBF16) : t;
}

void LlamaModel::init(uint64_t seed) { init_params(config_, params_, seed); }

void LlamaModel::offload_next(const OffloadSchedule& schedule) {
  if (static_cast<int>(schedule.layers.size()) != config_.n_layers) {
    throw InvalidArgument("LlamaModel::offload_next: a schedule of " + std::to_string(schedule.layers.size()) +
                          " layers for a model of " + std::to_string(config_.n_layers));
  }
  offload_.clear();
  for (const LayerOffload& l : schedule.layers) offload_.push_back(l.offloaded);
}

template <typename F>
void LlamaModel::for_each_act(LayerActs& a, F&& f) {
  for (Tensor* t : {&a.x, &a.n1.y, &a.n1.rstd, &a.in1, &a.q, &a.k, &a.v, &a.att.out, &a.att.lse, &a.att_in, &a.x_mid,
                    &a.n2.y, &a.n2.rstd, &a.in2, &a.gate, &a.up, &a.h_in}) {
    if (t->defined()) f(*t);
  }
}

std::int64_t LlamaModel::acts_bytes(LayerActs& a) {
  std::vector<std::pair<const void*, std::size_t>> seen;
  std::int64_t bytes = 0;
  for_each_act(a, [&](Tensor& t) {
    const std::pair<const void*, std::size_t> key{t.raw(), t.bytes()};
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
    seen.push_back(key);
    bytes += static_cast<std::int64_t>(t.bytes());
  });
  return bytes;
}

std::int64_t LlamaModel::move_acts(LayerActs& a, Device device) {
  std::vector<std::pair<const void*, Tensor>> moved;  // by the original's first element
  std::int64_t bytes = 0;
  auto move = [&](Tensor& t) {
    const void* at = t.raw();
    for (const auto& [was, now] : moved) {
      if (was == at && now.bytes() == t.bytes()) {
        t = now.reshape(t.shape());
        return;
      }
    }
    Tensor to = device == Device::kCpu ? Tensor::pinned(t.shape(), t.dtype()) : Tensor::empty(t.shape(), t.dtype(), device);
    to.copy_from(t);
    bytes += static_cast<std::int64_t>(t.bytes());
    moved.emplace_back(at, to);
    t = to;
  };
  for_each_act(a, move);
  return bytes;
}

void LlamaModel::zero_grad() { grads_.zero_(); }

double LlamaModel::forward(const Batch& batch, AttentionExecutor* attention) {
  const LlamaConfig& c = config_;
  if (!batch.tokens.defined() || batch.tokens.rank() != 1)
    throw InvalidArgument("LlamaModel::forward: tokens is " + batch.tokens.describe() + ", expected i32 [T]");
  const int64_t t = batch.tokens.dim(0), hd = c.head_dim();
  batch_ = batch;
  packed_.reset();
  if (!attention) {
    packed_ = std::make_unique<PackedAttention>(batch.cu_seqlens);
    attention = packed_.get();
  }
  attention_ = attention;
  acts_.assign(static_cast<size_t>(c.n_layers), LayerActs{});
  offloaded_ = offload_.empty() ? std::vector<bool>(static_cast<size_t>(c.n_layers), false) : std::move(offload_);
  offload_.clear();
  offloaded_bytes_ = 0;
  layer_bytes_.assign(static_cast<size_t>(c.n_layers), 0);
  resident_bytes_ = peak_resident_bytes_ = 0;

  // The compute copy: rounded from the master parameters, whoever changed them since (the
  // optimizer, a restore, a test).
  if (precision_ == Precision::kBF16) convert_into(params_, compute_);
  const bool mixed = precision_ == Precision::kBF16;
  Tensor x = embedding_forward(batch.tokens, weights_.embed);
  for (int i = 0; i < c.n_layers; ++i) {
    if (between_layers_) between_layers_();
    const LayerWeights& w = weights_.layers[static_cast<size_t>(i)];
    const LayerWeights& wc = compute_weights_.layers[static_cast<size_t>(i)];
    LayerActs& a = acts_[static_cast<size_t>(i)];
    a.x = x;
    a.n1 = rmsnorm_forward(x, w.input_norm, c.norm_eps);
    a.in1 = operand(a.n1.y);
    a.q = operand(rope_forward(linear_forward(a.in1, wc.q, wc.q_bias).reshape({t, c.n_heads, hd}), batch.positions, rope_table_));
    a.k = operand(rope_forward(linear_forward(a.in1, wc.k, wc.k_bias).reshape({t, c.n_kv_heads, hd}), batch.positions, rope_table_));
    a.v = operand(linear_forward(a.in1, wc.v, wc.v_bias).reshape({t, c.n_kv_heads, hd}));
    if (mixed) a.n1.y = Tensor();  // in1 holds it (the backward needs rstd only)
    a.att = attention->forward(i, a.q, a.k, a.v);
    a.att_in = operand(a.att.out.reshape({t, c.n_heads * hd}));
    a.x_mid = x.clone();
    add_(a.x_mid, linear_forward(a.att_in, wc.o));
    a.n2 = rmsnorm_forward(a.x_mid, w.post_norm, c.norm_eps);
    a.in2 = operand(a.n2.y);
    if (mixed) a.n2.y = Tensor();
    a.gate = linear_forward(a.in2, wc.gate);
    a.up = linear_forward(a.in2, wc.up);
    a.h_in = operand(swiglu_forward(a.gate, a.up));
    x = a.x_mid.clone();
    add_(x, linear_forward(a.h_in, wc.down));
    // What this layer keeps, counted once whatever shares memory (a copy to the CPU's own memory
    // costs a copy: only the bytes are wanted, from the same walk).
    layer_bytes_[static_cast<size_t>(i)] = acts_bytes(a);
    resident_bytes_ += layer_bytes_[static_cast<size_t>(i)];
    peak_resident_bytes_ = std::max(peak_resident_bytes_, resident_bytes_);
    if (offloaded_[static_cast<size_t>(i)]) {
      offloaded_bytes_ += move_acts(a, Device::kCpu);
      resident_bytes_ -= layer_bytes_[static_cast<size_t>(i)];
    }
  }
  x_final_ = x;
  n_final_ = rmsnorm_forward(x, weights_.norm, c.norm_eps);
  in_final_ = operand(n_final_.y);
  logits_ = linear_forward(in_final_, compute_weights_.lm_head);
  CrossEntropyOutput ce = cross_entropy_forward(logits_, batch.targets);
  ce_lse_ = ce.lse;
  return ce.loss_sum;
}

void LlamaModel::backward(double dloss) {
  const LlamaConfig& c = config_;
  if (!logits_.defined() || acts_.empty() || !acts_.back().x.defined()) {
    throw InvalidArgument("LlamaModel::backward: needs a forward() before it (a backward uses up its activations)");
  }
  const int64_t t = batch_.tokens.dim(0), hd = c.head_dim();

  Tensor dlogits = grad_zeros(logits_.shape());
  cross_entropy_backward(logits_, batch_.targets, ce_lse_, dloss, dlogits);
  Tensor dn = grad_zeros(x_final_.shape());
  linear_backward(in_final_, compute_weights_.lm_head, operand(dlogits), dn, grad_views_.lm_head);
  dlogits = Tensor();
  Tensor dx = grad_zeros(x_final_.shape());  // gradient of the residual stream, walked down the layers
  rmsnorm_backward(x_final_, weights_.norm, n_final_.rstd, dn, dx, grad_views_.norm);

  for (int i = c.n_layers - 1; i >= 0; --i) {
    if (between_layers_) between_layers_();
    const LayerWeights& w = weights_.layers[static_cast<size_t>(i)];
    const LayerWeights& wc = compute_weights_.layers[static_cast<size_t>(i)];
    const LayerWeights& g = grad_views_.layers[static_cast<size_t>(i)];
    LayerActs& a = acts_[static_cast<size_t>(i)];
    if (offloaded_[static_cast<size_t>(i)]) {
      move_acts(a, params_.device());
      resident_bytes_ += layer_bytes_[static_cast<size_t>(i)];
      peak_resident_bytes_ = std::max(peak_resident_bytes_, resident_bytes_);
    }
    // x_next = x_mid + down(h): dx reaches x_mid unchanged and h through down_proj.
    Tensor dh = grad_zeros(a.gate.shape());
    linear_backward(a.h_in, wc.down, operand(dx), dh, g.down);
    Tensor dgate = grad_zeros(a.gate.shape()), dup = grad_zeros(a.up.shape());
    swiglu_backward(a.gate, a.up, dh, dgate, dup);
    Tensor dn2 = grad_zeros(a.x_mid.shape());
    linear_backward(a.in2, wc.gate, operand(dgate), dn2, g.gate);
    linear_backward(a.in2, wc.up, operand(dup), dn2, g.up);
    rmsnorm_backward(a.x_mid, w.post_norm, a.n2.rstd, dn2, dx, g.post_norm);  // dx is now d x_mid
    // x_mid = x + o(attention(...)): same split.
    Tensor datt = grad_zeros({t, c.n_heads * hd});
    linear_backward(a.att_in, wc.o, operand(dx), datt, g.o);
    Tensor dq = grad_zeros(a.q.shape()), dk = grad_zeros(a.k.shape()), dv = grad_zeros(a.v.shape());
    attention_->backward(i, a.q, a.k, a.v, a.att, operand(datt).reshape(a.q.shape()), dq, dk, dv);
    // The query path first: an executor may still be completing dk and dv meanwhile.
    Tensor dq_lin = grad_zeros(dq.shape()), dk_lin = grad_zeros(dk.shape());
    rope_backward(dq, batch_.positions, rope_table_, dq_lin);
    Tensor dn1 = grad_zeros(a.x.shape());
    // One of q, k, v: its weight's gradient, its bias's (qkv_bias), and dn1's share.
    auto project_back = [&](const Tensor& weight, const Tensor& bias, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias) {
      const Tensor d = operand(dy.reshape({t, weight.dim(0)}));
      linear_backward(a.in1, weight, d, dn1, dweight);
      if (bias.defined()) linear_bias_backward(bias, d, dbias);
    };
    project_back(wc.q, wc.q_bias, dq_lin, g.q, g.q_bias);
    attention_->finish_backward(i);
    rope_backward(dk, batch_.positions, rope_table_, dk_lin);
    project_back(wc.k, wc.k_bias, dk_lin, g.k, g.k_bias);
    project_back(wc.v, wc.v_bias, dv, g.v, g.v_bias);
    rmsnorm_backward(a.x, w.input_norm, a.n1.rstd, dn1, dx, g.input_norm);  // dx is now d x
    resident_bytes_ -= layer_bytes_[static_cast<size_t>(i)];
    a = LayerActs{};  // used up: what offloading saves is not brought back on top of it
  }
  embedding_backward(batch_.tokens, dx, grad_views_.embed);  // tied: adds to lm_head's share
}

}  // namespace hdp::ops::model
