#include "mesh/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace hdp::mesh {
namespace {

void require_finite_non_negative(double value, const char* what) {
  if (!std::isfinite(value) || value < 0) {
    throw InvalidArgument(std::string("cost model: ") + what + " must be a finite number >= 0, got " +
                          std::to_string(value));
  }
}

void require_positive(double value, const char* what) {
  if (!std::isfinite(value) || value <= 0) {
    throw InvalidArgument(std::string("cost model: ") + what + " must be a finite number > 0, got " +
                          std::to_string(value));
  }
}

// Attention is the quadratic part; per ring step a rank computes 1/D of its share.
double ring_time(double linear_per_rank, double attention_per_rank, double transfer, std::int64_t ring_size,
                 double gamma) {
  const double step = attention_per_rank / static_cast<double>(ring_size);
  return gamma + linear_per_rank + step + static_cast<double>(ring_size - 1) * std::max(step, transfer);
}

}  // namespace

double CostModel::sequence_ms(std::int64_t tokens) const {
  const double s = static_cast<double>(tokens);
  return alpha_ms * s * s + beta_ms * s;
}

double CostModel::transfer_ms(double tokens_on_rank) const {
  return ring_bytes_per_token * tokens_on_rank / (link_gbps * 1e6);  // GB/s = 1e6 bytes per ms
}

double CostModel::ring_ms(std::int64_t tokens, std::int64_t ring_size) const {
  const double s = static_cast<double>(tokens);
  const double d = static_cast<double>(ring_size);
  return ring_time(beta_ms * s / d, alpha_ms * s * s / d, ring_size > 1 ? transfer_ms(s / d) : 0.0, ring_size,
                   gamma_ms);
}

double CostModel::micro_batch_ms(std::span<const std::int64_t> lengths, std::int64_t ring_size) const {
  double tokens = 0;
  double squares = 0;
  for (std::int64_t s : lengths) {
    tokens += static_cast<double>(s);
    squares += static_cast<double>(s) * static_cast<double>(s);
  }
  const double d = static_cast<double>(ring_size);
  return ring_time(beta_ms * tokens / d, alpha_ms * squares / d, ring_size > 1 ? transfer_ms(tokens / d) : 0.0,
                   ring_size, gamma_ms);
}

double CostModel::ring_bytes(std::int64_t total_tokens, std::int64_t ring_size) const {
  return static_cast<double>(ring_size - 1) * ring_bytes_per_token * static_cast<double>(total_tokens);
}

void CostModel::validate() const {
  require_finite_non_negative(alpha_ms, "alpha_ms");
  require_finite_non_negative(beta_ms, "beta_ms");
  require_finite_non_negative(gamma_ms, "gamma_ms");
  require_finite_non_negative(ring_bytes_per_token, "ring_bytes_per_token");
  require_positive(link_gbps, "link_gbps");
  if (alpha_ms + beta_ms + gamma_ms <= 0) {
    throw InvalidArgument("cost model: alpha_ms, beta_ms and gamma_ms are all 0; a plan needs some cost");
  }
  if (offload) {
    if (offload->layers < 3) {
      throw InvalidArgument("cost model: offload.layers must be >= 3 (two layers stay resident), got " +
                            std::to_string(offload->layers));
    }
    require_positive(offload->act_bytes_per_token, "offload.act_bytes_per_token");
    require_finite_non_negative(offload->act_bytes_fixed, "offload.act_bytes_fixed");
    require_positive(offload->d2h_gbps, "offload.d2h_gbps");
    require_positive(offload->h2d_gbps, "offload.h2d_gbps");
  }
}

CostModel gpu_preset_7b(double link_gbps) {
  CostModel model;
  model.name = "gpu-7b";
  model.alpha_ms = 5.128e-6;
  model.beta_ms = 0.1839576;
  model.gamma_ms = 629.36;
  model.ring_bytes_per_token = 32.0 * 4096.0 * 3.0;
  model.link_gbps = link_gbps;
  model.offload = OffloadModel{.layers = 32,
                               .act_bytes_per_token = 34.0 * 4096.0,
                               .act_bytes_fixed = 0,
                               .d2h_gbps = 25.0,
                               .h2d_gbps = 25.0};
  return model;
}

}  // namespace hdp::mesh
