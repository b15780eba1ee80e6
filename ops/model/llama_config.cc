#include "ops/model/llama_config.h"

#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "common/error.h"
#include "ops/rope.h"

namespace hdp::ops::model {

void LlamaConfig::validate() const {
  auto fail = [](const std::string& what) { throw InvalidArgument("LlamaConfig: " + what); };
  if (vocab_size <= 0 || d_model <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || ffn_dim <= 0)
    fail("every size must be positive");
  if (explicit_head_dim < 0) fail("head_dim must be positive (0: d_model / n_heads)");
  if (explicit_head_dim == 0 && d_model % n_heads != 0)
    fail("d_model " + std::to_string(d_model) + " is not divisible by n_heads " + std::to_string(n_heads));
  if (n_heads % n_kv_heads != 0)
    fail("n_heads " + std::to_string(n_heads) + " is not divisible by n_kv_heads " + std::to_string(n_kv_heads));
  if (head_dim() % 2 != 0) fail("head_dim " + std::to_string(head_dim()) + " must be even for RoPE");
  if (rope_theta <= 0 || norm_eps <= 0) fail("rope_theta and norm_eps must be positive");
  if (max_positions < 0) fail("max_positions must be >= 0 (0: not known)");
  if (sliding_window < 0) fail("sliding_window must be >= 0 (0: none)");
  const RopeScaling& r = rope_scaling;
  if (r.type != RopeType::kDefault && !(r.factor > 0)) fail("rope_scaling.factor must be positive");
  if (r.type == RopeType::kLlama3 && !(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
                                       r.original_max_positions > 0))
    fail("rope_scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
}

std::vector<double> LlamaConfig::rope_inv_freq() const {
  const RopeScaling& r = rope_scaling;
  std::vector<double> inv = rope_default_inv_freq(rope_theta, head_dim());
  for (double& f : inv) {
    if (r.type == RopeType::kLinear) f /= r.factor;
    if (r.type == RopeType::kLlama3) {
      // By wavelength against the original context L: high frequencies kept, low ones divided
      // by factor, the band between blended (transformers' _compute_llama3_parameters).
      const double wavelen = 2.0 * std::numbers::pi / f, L = r.original_max_positions;
      if (wavelen > L / r.low_freq_factor) {
        f /= r.factor;
      } else if (wavelen >= L / r.high_freq_factor) {
        const double s = (L / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1.0 - s) * f / r.factor + s * f;
      }
    }
  }
  return inv;
}

int64_t LlamaConfig::weight_flops_per_token() const {
  const int64_t d = d_model, q = int64_t(n_heads) * head_dim(), kv = int64_t(n_kv_heads) * head_dim();
  const int64_t per_layer = d * q * 2 + d * kv * 2 + 3 * d * ffn_dim;  // q, o; k, v; gate, up, down
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

namespace {

// An enum's names, in the enum's order (kFamilyNames[int(Family::kQwen2)] is "qwen2").
constexpr std::array<const char*, 3> kFamilyNames = {"llama", "mistral", "qwen2"};
constexpr std::array<const char*, 3> kRopeTypeNames = {"default", "linear", "llama3"};

// The enum value named `name`; InvalidArgument naming `what` and the names otherwise.
template <typename E, std::size_t N>
E parse_named(const std::string& name, const std::array<const char*, N>& names, const std::string& what) {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<E>(i);
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i];
  throw InvalidArgument(what + " '" + name + "': expected " + expected);
}

}  // namespace

std::string family_name(Family family) { return kFamilyNames.at(static_cast<std::size_t>(family)); }
Family parse_family(const std::string& name) { return parse_named<Family>(name, kFamilyNames, "model family"); }
std::string rope_type_name(RopeType type) { return kRopeTypeNames.at(static_cast<std::size_t>(type)); }
RopeType parse_rope_type(const std::string& name) { return parse_named<RopeType>(name, kRopeTypeNames, "rope_type"); }

std::string precision_name(Precision precision) { return precision == Precision::kBF16 ? "bf16" : "f32"; }

}  // namespace hdp::ops::model
