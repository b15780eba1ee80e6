#include "ops/model/llama_params.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace hdp::ops::model {

std::vector<ParamEntry> param_layout(const LlamaConfig& config) {
  config.validate();
  const int64_t d = config.d_model, v = config.vocab_size, f = config.ffn_dim;
  const int64_t q_out = int64_t(config.n_heads) * config.head_dim();
  const int64_t kv_out = int64_t(config.n_kv_heads) * config.head_dim();
  std::vector<ParamEntry> out;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape) {
    ParamEntry e{std::move(name), offset, std::move(shape)};
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    offset += n;
    out.push_back(std::move(e));
  };
  add("model.embed_tokens.weight", {v, d});
  for (int i = 0; i < config.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {d});
    add(p + "self_attn.q_proj.weight", {q_out, d});
    add(p + "self_attn.k_proj.weight", {kv_out, d});
    add(p + "self_attn.v_proj.weight", {kv_out, d});
    if (config.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q_out});
      add(p + "self_attn.k_proj.bias", {kv_out});
      add(p + "self_attn.v_proj.bias", {kv_out});
    }
    add(p + "self_attn.o_proj.weight", {d, q_out});
    add(p + "post_attention_layernorm.weight", {d});
    add(p + "mlp.gate_proj.weight", {f, d});
    add(p + "mlp.up_proj.weight", {f, d});
    add(p + "mlp.down_proj.weight", {d, f});
  }
  add("model.norm.weight", {d});
  if (!config.tie_embeddings) add("lm_head.weight", {v, d});
  return out;
}

int64_t param_count(const LlamaConfig& config) {
  const std::vector<ParamEntry> layout = param_layout(config);
  const ParamEntry& last = layout.back();
  int64_t n = 1;
  for (int64_t s : last.shape) n *= s;
  return last.offset + n;
}

namespace {

void check_flat(const LlamaConfig& config, const Tensor& flat, const char* op) {
  const int64_t n = param_count(config);
  if (!flat.defined() || flat.shape() != Shape{n})
    throw InvalidArgument(std::string(op) + ": flat buffer is " + flat.describe() + ", expected shape [" +
                          std::to_string(n) + "]");
}

}  // namespace

LlamaWeights bind_weights(const LlamaConfig& config, const Tensor& flat) {
  check_flat(config, flat, "bind_weights");
  const std::vector<ParamEntry> layout = param_layout(config);
  size_t next = 0;
  auto view = [&]() {
    const ParamEntry& e = layout[next++];
    return flat.view(e.offset, e.shape);
  };
  LlamaWeights w;
  w.embed = view();
  w.layers.resize(static_cast<size_t>(config.n_layers));
  for (LayerWeights& l : w.layers) {
    l.input_norm = view();
    l.q = view();
    l.k = view();
    l.v = view();
    if (config.qkv_bias) {
      l.q_bias = view();
      l.k_bias = view();
      l.v_bias = view();
    }
    l.o = view();
    l.post_norm = view();
    l.gate = view();
    l.up = view();
    l.down = view();
  }
  w.norm = view();
  w.lm_head = config.tie_embeddings ? w.embed : view();
  return w;
}

Tensor named_view(const LlamaConfig& config, const Tensor& flat, const std::string& name) {
  check_flat(config, flat, "named_view");
  for (const ParamEntry& e : param_layout(config))
    if (e.name == name) return flat.view(e.offset, e.shape);
  throw InvalidArgument("named_view: no parameter named '" + name + "'");
}

namespace {

// splitmix64, a generator whose output is fixed by its definition (unlike std distributions) and
// whose n-th draw is a function of n alone: draw n (from 1) of the stream seeded with `seed`.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
uint64_t splitmix64_draw(uint64_t seed, uint64_t n) {
  uint64_t z = seed + n * kGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double uniform01(uint64_t draw) { return (double(draw >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)

// Every parameter's initial value into `out` (the flat layout): matrices N(0, 0.02) by Box-Muller, two
// draws an element, the matrices in layout order drawing from one stream; norm weights 1, biases 0.
// Each element's draws are found from its index, so the loop is parallel and its values are those of
// drawing the stream in order (one thread or many: the same bits).
template <typename T>
void fill_initial(const LlamaConfig& config, T* out, uint64_t seed) {
  constexpr double kStd = 0.02;  // biases start at 0, as HF's _init_weights sets them
  uint64_t drawn = 0;            // draws taken by the matrices before this entry
  for (const ParamEntry& e : param_layout(config)) {
    const bool is_vector = e.shape.size() == 1, is_bias = e.name.ends_with(".bias");
    const int64_t n = is_vector ? e.shape[0] : e.shape[0] * e.shape[1];
    T* at = out + e.offset;
    if (is_vector) {
      std::fill(at, at + n, static_cast<T>(is_bias ? 0.0 : 1.0));
      continue;
    }
    const uint64_t first = drawn;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t k = first + 2 * static_cast<uint64_t>(i);
      const double u1 = uniform01(splitmix64_draw(seed, k + 1)), u2 = uniform01(splitmix64_draw(seed, k + 2));
      at[i] = static_cast<T>(kStd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
    }
    drawn += 2 * static_cast<uint64_t>(n);
  }
}

}  // namespace

void init_params(const LlamaConfig& config, const Tensor& flat, uint64_t seed) {
  check_flat(config, flat, "init_params");
  // Drawn on the host (in place on the CPU), then copied to the model's device once.
  const Tensor host = flat.device() == Device::kCpu ? flat : Tensor::empty(flat.shape(), flat.dtype());
  if (host.dtype() == DType::kF64) {
    fill_initial(config, host.data<double>(), seed);
  } else {
    fill_initial(config, host.data<float>(), seed);
  }
  if (host.raw() != flat.raw()) flat.copy_from(host);
}

}  // namespace hdp::ops::model
