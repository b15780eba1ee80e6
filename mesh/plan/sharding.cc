#include "mesh/plan/sharding.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace hdp::mesh {

TokenRange chunk_range(std::int64_t tokens, std::int64_t ring_size, std::int64_t chunk) {
  const std::int64_t chunks = 2 * ring_size;
  HDP_CHECK(ring_size >= 1 && chunk >= 0 && chunk < chunks, "chunk index out of range");
  const std::int64_t base = tokens / chunks;
  const std::int64_t longer = tokens % chunks;  // the first `longer` chunks hold one more token
  const std::int64_t begin = chunk * base + std::min(chunk, longer);
  return {begin, begin + base + (chunk < longer ? 1 : 0)};
}

std::int64_t member_tokens(std::int64_t tokens, std::int64_t ring_size, std::int64_t position) {
  const TokenRange first = chunk_range(tokens, ring_size, position);
  const TokenRange second = chunk_range(tokens, ring_size, 2 * ring_size - 1 - position);
  return (first.end - first.begin) + (second.end - second.begin);
}

ShardLimit shard_limit(const CostModel& model, std::int64_t tokens, std::int64_t capacity, bool offload) {
  const std::int64_t plain = (tokens + capacity - 1) / capacity;
  ShardLimit limit{.min_ranks = std::max<std::int64_t>(1, plain), .offload_ratio = 0, .rank_capacity = capacity};
  if (!offload || tokens <= capacity) return limit;
  HDP_CHECK(model.offload.has_value(), "offload requested from a cost model without offload parameters");
  const OffloadModel& o = *model.offload;
  const double l = o.layers;
  const auto act = [&](double s) { return o.act_bytes_per_token * s + o.act_bytes_fixed; };
  const double s = static_cast<double>(tokens);
  const double layer_ms = (model.sequence_ms(tokens) + model.gamma_ms) / l;
  const double bytes_per_ms = std::min(o.d2h_gbps, o.h2d_gbps) * 1e6;
  const double ratio = std::min(1.0, layer_ms * bytes_per_ms / act(s));
  const double useful = std::min(1.0, l * act(static_cast<double>(capacity)) / ((l - 2) * act(s)));
  if (ratio < useful) return limit;
  const double budget = l * act(static_cast<double>(capacity)) / (2 + (1 - ratio) * (l - 2));
  const auto held = static_cast<std::int64_t>(std::floor((budget - o.act_bytes_fixed) / o.act_bytes_per_token));
  if (held <= capacity) return limit;
  const std::int64_t ranks = (tokens + held - 1) / held;
  if (ranks >= plain) return limit;
  return {.min_ranks = ranks, .offload_ratio = ratio, .rank_capacity = held};
}

}  // namespace hdp::mesh
