// File: mesh/plan/cost_model.h
//
// The time a micro-batch takes on a rank, in milliseconds, for the whole model (forward and backward):
//
//   compute of a sequence of s tokens     T(s) = α·s² + β·s            (ByteScale Eq. 3, FlexSP)
//   fixed cost of one micro-batch         γ
//   ring communication per ring step      ring_bytes_per_token · (tokens on the rank) / link bandwidth
//
// A micro-batch over a ring of D ranks (D = 1: no communication) gives each rank 1/D of every
// sequence (causal-balanced chunks i and 2D-1-i) and so 1/D of its compute. Ring attention runs D
// steps of attention, each 1/D of the rank's attention work; steps 1..D-1 each wait for one KV block,
// which overlaps the previous step's compute, so a step costs max(compute, transfer): communication
// is hidden only as far as compute hides it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace hdp::mesh {

// ByteScale's data-aware selective offloading (Eq. 3): activations of l layers, Act(s) = a·s + b bytes
// per layer, moved to host at min(d2h, h2d) bandwidth while compute runs.
struct OffloadModel {
  int layers = 32;
  double act_bytes_per_token = 0;  // a: activation bytes per token per layer
  double act_bytes_fixed = 0;      // b: activation bytes per layer independent of s
  double d2h_gbps = 0;             // device-to-host bandwidth, GB/s (1e9 bytes/s)
  double h2d_gbps = 0;             // host-to-device bandwidth, GB/s
};

struct CostModel {
  std::string name;
  double alpha_ms = 0;             // α, ms per token²
  double beta_ms = 0;              // β, ms per token
  double gamma_ms = 0;             // γ, ms per micro-batch
  double ring_bytes_per_token = 0; // bytes a ring member sends per token it holds, per ring step
  double link_gbps = 0;            // ring link bandwidth, GB/s (1e9 bytes/s)
  std::optional<OffloadModel> offload;

  // α·s² + β·s: the compute of one whole sequence, without γ.
  double sequence_ms(std::int64_t tokens) const;
  // Milliseconds one ring step needs to move the KV block of `tokens_on_rank` tokens.
  double transfer_ms(double tokens_on_rank) const;
  // Time of one micro-batch holding `lengths` (whole sequences), each sharded over a ring of
  // `ring_size` ranks; ring_size 1 is a local micro-batch.
  double micro_batch_ms(std::span<const std::int64_t> lengths, std::int64_t ring_size) const;
  // The same for a single sequence (the common case, without building a span).
  double ring_ms(std::int64_t tokens, std::int64_t ring_size) const;
  // Bytes all members of such a ring send in total: (D-1) steps, each moving every member's block.
  double ring_bytes(std::int64_t total_tokens, std::int64_t ring_size) const;

  // Throws InvalidArgument naming the first coefficient that is negative, NaN or infinite (and a
  // non-positive bandwidth).
  void validate() const;
};

// FlexSP's fitted GPT-7B coefficients (α = 5.128e-6 ms/token², β = 0.184 ms/token, γ = 629 ms) with
// LLaMA-7B's ring traffic: 32 layers × (K,V of 8 KV heads × 128 dims × bf16 = 4 KiB per token) × 3
// (forward KV, backward KV and dKV). `link_gbps` defaults to 20 GB/s, the rate of ByteScale's
// Fig. 18 ring steps (32 MiB per layer-step in about 1.7 ms). Offload: 34·h = 139,264 activation
// bytes per token per layer (Korthikanti et al., bf16, flash attention), PCIe at 25 GB/s.
CostModel gpu_preset_7b(double link_gbps = 20.0);

}  // namespace hdp::mesh
