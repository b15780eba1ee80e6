#include "ops/model/llama_config.h"

#include <string>

#include "common/error.h"

namespace hdp::ops::model {

void LlamaConfig::validate() const {
  auto fail = [](const std::string& what) { throw InvalidArgument("LlamaConfig: " + what); };
  if (vocab_size <= 0 || d_model <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || ffn_dim <= 0)
    fail("every size must be positive");
  if (d_model % n_heads != 0)
    fail("d_model " + std::to_string(d_model) + " is not divisible by n_heads " + std::to_string(n_heads));
  if (n_heads % n_kv_heads != 0)
    fail("n_heads " + std::to_string(n_heads) + " is not divisible by n_kv_heads " + std::to_string(n_kv_heads));
  if (head_dim() % 2 != 0) fail("head_dim " + std::to_string(head_dim()) + " must be even for RoPE");
  if (rope_theta <= 0 || norm_eps <= 0) fail("rope_theta and norm_eps must be positive");
  if (max_positions < 0) fail("max_positions must be >= 0 (0: not known)");
}

int64_t LlamaConfig::weight_flops_per_token() const {
  const int64_t d = d_model, kv = int64_t(n_kv_heads) * head_dim();
  const int64_t per_layer = d * d * 2 + d * kv * 2 + 3 * d * ffn_dim;  // q, o; k, v; gate, up, down
  return 2 * (n_layers * per_layer + int64_t(vocab_size) * d);         // + lm_head
}

double LlamaConfig::step_flops(int64_t tokens) const {
  return 3.0 * (double(weight_flops_per_token()) * double(tokens) +
                n_layers * causal_attention_flops(tokens, n_heads, head_dim()));
}

double causal_attention_flops(int64_t tokens, int heads, int head_dim) {
  return 4.0 * double(tokens) * double(tokens + 1) / 2.0 * heads * head_dim;
}

Precision parse_precision(const std::string& name) {
  if (name == "f32") return Precision::kFull;
  if (name == "bf16") return Precision::kBF16;
  throw InvalidArgument("precision '" + name + "': expected f32 or bf16");
}

std::string precision_name(Precision precision) { return precision == Precision::kBF16 ? "bf16" : "f32"; }

}  // namespace hdp::ops::model
