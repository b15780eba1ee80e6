#include "trainer/memory_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "kernels/cpu/attention.h"
#include "ops/model/llama_params.h"

namespace hdp::trainer {
namespace {

using ops::model::LlamaConfig;
using ops::model::Precision;

constexpr std::int64_t kF32 = 4, kBF16 = 2;

// The model's widths, in elements.
struct Widths {
  std::int64_t d, q, kv, heads, ffn, vocab;
};

Widths widths(const LlamaConfig& m) {
  const std::int64_t hd = m.head_dim();
  return {m.d_model, m.n_heads * hd, m.n_kv_heads * hd, m.n_heads, m.ffn_dim, m.vocab_size};
}

// Bytes of a GEMM or attention operand: bf16 under mixed precision, else f32.
std::int64_t operand_bytes(Precision p) { return p == Precision::kBF16 ? kBF16 : kF32; }

// The largest set of temporaries of the backward of C tokens (the gradients are f32 either way).
std::int64_t workspace_bytes(const MemoryInputs& in) {
  const Widths w = widths(in.model);
  const std::int64_t c = in.capacity;
  const bool mixed = in.precision == Precision::kBF16;
  // The CPU has no bf16 GEMM or attention kernel: each call widens its bf16 operands to f32.
  const bool widens = mixed && in.device == ops::Device::kCpu;
  // The loss head: dlogits and the final norm's input gradient, dlogits rounded to bf16, and for
  // lm_head's GEMMs the widened dlogits, lm_head's weight and the final norm's output.
  std::int64_t head = c * kF32 * (w.vocab + w.d);
  if (mixed) head += c * kBF16 * w.vocab;
  if (widens) head += c * kF32 * (w.vocab + w.d) + kF32 * w.vocab * w.d;
  // One layer (all alive at its end): dx and the head's dn, dh, dgate, dup, dn2, datt, dq, dq_lin,
  // dk, dv, dk_lin, dn1; one bf16 operand copy at a time; the widened GEMM operands (the two of
  // one call and its weight) or attention's four (q, k, v, dout).
  std::int64_t layer = c * kF32 * (4 * w.d + 3 * w.ffn + 3 * w.q + 3 * w.kv);
  if (mixed) layer += c * kBF16 * std::max({w.ffn, w.q, w.d});
  if (widens) {
    const std::int64_t gemm = w.ffn + std::max(w.ffn, w.d);
    layer += c * kF32 * std::max(gemm, 2 * w.q + 2 * w.kv) + kF32 * w.d * std::max(w.ffn, w.q);
  }
  // The CPU attention backward's P and dS tiles, per thread (f32: bf16 operands are widened).
  if (in.device == ops::Device::kCpu) {
    layer += in.threads * 2 * kF32 * kernels::cpu::kAttentionQueryTile * kernels::cpu::kAttentionKeyTile;
  }
  return std::max(head, layer);
}

std::string component_list(const MemoryBreakdown& b, MemoryPlace place, std::size_t most) {
  std::vector<MemoryComponent> parts;
  for (const MemoryComponent& c : b.components()) {
    if (c.place == place && c.bytes > 0) parts.push_back(c);
  }
  std::stable_sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  std::string out;
  for (std::size_t i = 0; i < parts.size() && i < most; ++i) {
    out += (i ? ", " : "") + parts[i].name + " " + format_bytes(parts[i].bytes);
  }
  if (parts.size() > most) out += ", ...";
  return out;
}

}  // namespace

void MemoryInputs::validate() const {
  model.validate();
  if (world_size < 1) throw InvalidArgument("memory model: world size " + std::to_string(world_size) + " must be >= 1");
  if (capacity < 1) throw InvalidArgument("memory model: capacity " + std::to_string(capacity) + " must be >= 1 token");
  if (threads < 1) throw InvalidArgument("memory model: " + std::to_string(threads) + " kernel threads (at least 1)");
  if (buddy_copies < 0 || buddy_copies >= world_size) {
    throw InvalidArgument("memory model: " + std::to_string(buddy_copies) + " buddy copies on a world of " +
                          std::to_string(world_size) + " (0 to " + std::to_string(world_size - 1) + ")");
  }
}

LayerActivationBytes layer_activation_bytes(const LlamaConfig& model, Precision precision) {
  const Widths w = widths(model);
  const std::int64_t op = operand_bytes(precision);
  // LayerActs (ops/model/llama_model.h), per token. f32 always: the block input x, the residual
  // x_mid, both RMSNorms' rstd, attention's output and log-sum-exp (f32 for bf16 operands too),
  // the MLP's gate and up. Operands: q, k, v after RoPE, the normed inputs in1 and in2, att_in
  // and h_in. Under kFull in1, in2 and att_in are the norms' outputs and attention's output
  // themselves, and h_in the SwiGLU output; under kBF16 they are bf16 copies and the norms' f32
  // outputs are dropped.
  std::int64_t bytes = kF32 * (2 * w.d + 2 + w.q + w.heads + 2 * w.ffn) + op * (w.q + 2 * w.kv);
  if (precision == Precision::kBF16) {
    bytes += kBF16 * (2 * w.d + w.q + w.ffn);
  } else {
    bytes += kF32 * (2 * w.d + w.ffn);
  }
  return {.per_token = bytes, .fixed = 0};
}

std::int64_t head_activation_bytes(const LlamaConfig& model, Precision precision) {
  const Widths w = widths(model);
  // x_final, the final norm's output and rstd, the logits (f32: GEMMs return f32) and the loss's
  // log-sum-exp; under kBF16 also in_final, the bf16 copy of the norm's output. Tokens and targets
  // (i32) and positions (i64).
  std::int64_t bytes = kF32 * (2 * w.d + 1 + w.vocab + 1) + 4 + 4 + 8;
  if (precision == Precision::kBF16) bytes += kBF16 * w.d;
  return bytes;
}

MemoryBreakdown estimate_memory(const MemoryInputs& in) {
  in.validate();
  const std::int64_t n = ops::model::param_count(in.model);
  const std::int64_t shard = (n + in.world_size - 1) / in.world_size;
  const bool mixed = in.precision == Precision::kBF16;
  const LayerActivationBytes layer = layer_activation_bytes(in.model, in.precision);
  MemoryBreakdown b;
  b.inputs = in;
  b.parameters = kF32 * n;
  b.compute_copy = mixed ? kBF16 * n : 0;
  b.gradients = kF32 * n;
  b.optimizer_shard = 3 * kF32 * shard;
  b.wire_buffer = mixed ? kBF16 * n : 0;
  b.activations = in.model.n_layers * (in.capacity * layer.per_token + layer.fixed);
  b.loss_head = in.capacity * head_activation_bytes(in.model, in.precision);
  b.workspace = workspace_bytes(in);
  // The K/V block arriving (operands) and the two dK/dV accumulators (f32) of a ring's backward:
  // at most C rows each.
  if (in.ring && in.world_size > 1) {
    b.ring_blocks = in.capacity * widths(in.model).kv * (2 * operand_bytes(in.precision) + 4 * kF32);
  }
  b.buddy_copies = in.buddy_copies * 4 * kF32 * shard;
  b.previous_versions = in.keep_previous ? (1 + in.buddy_copies) * 3 * kF32 * shard : 0;
  return b;
}

std::vector<MemoryComponent> MemoryBreakdown::components() const {
  const MemoryPlace copies =
      inputs.device == ops::Device::kCuda && inputs.copies_on_host ? MemoryPlace::kPinnedHost : MemoryPlace::kDevice;
  return {{"parameters", parameters, MemoryPlace::kDevice},
          {"bf16 compute copy", compute_copy, MemoryPlace::kDevice},
          {"gradients", gradients, MemoryPlace::kDevice},
          {"optimizer shard", optimizer_shard, MemoryPlace::kDevice},
          {"bf16 wire buffer", wire_buffer, MemoryPlace::kDevice},
          {"activations of " + std::to_string(inputs.capacity) + " tokens", activations, MemoryPlace::kDevice},
          {"loss head", loss_head, MemoryPlace::kDevice},
          {"backward workspace", workspace, MemoryPlace::kDevice},
          {"ring blocks", ring_blocks, MemoryPlace::kDevice},
          {"buddy copies", buddy_copies, copies},
          {"previous versions", previous_versions, copies}};
}

std::int64_t MemoryBreakdown::device_bytes() const {
  std::int64_t sum = 0;
  for (const MemoryComponent& c : components()) sum += c.place == MemoryPlace::kDevice ? c.bytes : 0;
  return sum;
}

std::int64_t MemoryBreakdown::host_bytes() const {
  std::int64_t sum = 0;
  for (const MemoryComponent& c : components()) sum += c.place == MemoryPlace::kPinnedHost ? c.bytes : 0;
  return sum;
}

std::string MemoryBreakdown::device_name() const {
  if (inputs.device == ops::Device::kCpu) return "cpu";
  return "cuda:" + std::to_string(std::max(0, inputs.device_ordinal));
}

std::string MemoryBreakdown::describe() const {
  std::string line = format_bytes(device_bytes()) + " on " + device_name() + " (" +
                     component_list(*this, MemoryPlace::kDevice, 16) + ")";
  if (host_bytes() > 0) {
    line += ", " + format_bytes(host_bytes()) + " pinned host (" + component_list(*this, MemoryPlace::kPinnedHost, 16) + ")";
  }
  return line;
}

std::int64_t MemoryMargin::usable(std::int64_t free_bytes) const {
  const double kept = static_cast<double>(free_bytes) * fraction + static_cast<double>(reserve_bytes);
  return std::max<std::int64_t>(0, free_bytes - static_cast<std::int64_t>(std::ceil(kept)));
}

void check_fits(const MemoryBreakdown& need, std::int64_t free_bytes, const std::string& what, MemoryMargin margin) {
  const std::int64_t usable = margin.usable(free_bytes);
  if (need.device_bytes() <= usable) return;
  const MemoryInputs& in = need.inputs;
  std::string limit = format_bytes(usable) + " (" + what;
  if (usable != free_bytes) limit += ": " + format_bytes(free_bytes) + " less a margin of " + format_bytes(free_bytes - usable);
  limit += ")";
  throw InvalidArgument("the model needs " + format_bytes(need.device_bytes()) + " per rank on " + need.device_name() +
                        " at C = " + std::to_string(in.capacity) + " on " + std::to_string(in.world_size) +
                        " rank(s) (" + component_list(need, MemoryPlace::kDevice, 4) + "), above the limit of " +
                        limit + ": use more ranks, a smaller --capacity" +
                        (in.precision == Precision::kFull ? ", or --dtype bf16" : ""));
}

std::int64_t max_capacity(MemoryInputs inputs, std::int64_t free_bytes, MemoryMargin margin, std::int64_t granule) {
  if (granule < 1) throw InvalidArgument("max_capacity: granule " + std::to_string(granule) + " must be >= 1");
  const std::int64_t usable = margin.usable(free_bytes);
  auto fits = [&](std::int64_t granules) {
    inputs.capacity = granules * granule;
    return estimate_memory(inputs).device_bytes() <= usable;
  };
  // The need grows with C: double to a bound that does not fit, then bisect. 2^32 tokens keep
  // every product of the estimate far inside 64 bits.
  const std::int64_t most = std::max<std::int64_t>(1, (std::int64_t{1} << 32) / granule);
  if (!fits(1)) return 0;
  std::int64_t lo = 1, hi = 2;
  while (hi <= most && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > most) return lo * granule;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * granule;
}

mesh::OffloadModel offload_model(const LlamaConfig& model, Precision precision, double d2h_gbps, double h2d_gbps) {
  const LayerActivationBytes layer = layer_activation_bytes(model, precision);
  return {.layers = model.n_layers,
          .act_bytes_per_token = static_cast<double>(layer.per_token),
          .act_bytes_fixed = static_cast<double>(layer.fixed),
          .d2h_gbps = d2h_gbps,
          .h2d_gbps = h2d_gbps};
}

std::string format_bytes(std::int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::int64_t{1} << 30)) std::snprintf(text, sizeof text, "%.1f GiB", b / (1 << 30));
  else if (bytes >= (1 << 20)) std::snprintf(text, sizeof text, "%.1f MiB", b / (1 << 20));
  else if (bytes >= (1 << 10)) std::snprintf(text, sizeof text, "%.1f KiB", b / (1 << 10));
  else std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

}  // namespace hdp::trainer
