#include "trainer/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"

namespace hdp::trainer {

void check(const SampleOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw InvalidArgument("--temperature " + std::to_string(o.temperature) + " must be a number >= 0");
  if (o.top_k < 0) throw InvalidArgument("--top-k " + std::to_string(o.top_k) + " must be >= 0");
  if (o.max_new_tokens < 0) throw InvalidArgument("--max-new-tokens " + std::to_string(o.max_new_tokens) + " must be >= 0");
}

std::int32_t pick_token(std::span<const float> logits, double temperature, int top_k, std::mt19937_64& rng) {
  if (logits.empty()) throw InvalidArgument("pick_token: no logits");
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto higher = [&](std::int32_t a, std::int32_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)] ||
           (logits[static_cast<std::size_t>(a)] == logits[static_cast<std::size_t>(b)] && a < b);
  };
  if (temperature == 0) return *std::min_element(order.begin(), order.end(), higher);
  const std::size_t k = top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(), higher);
  order.resize(k);
  // Softmax of the kept logits over T, in double, shifted by the largest.
  const double top = logits[static_cast<std::size_t>(order[0])];
  std::vector<double> weights(k);
  for (std::size_t i = 0; i < k; ++i) weights[i] = std::exp((logits[static_cast<std::size_t>(order[i])] - top) / temperature);
  std::discrete_distribution<std::size_t> draw(weights.begin(), weights.end());
  return order[draw(rng)];
}

std::vector<std::int32_t> generate(ops::model::LlamaDecoder& decoder, const std::vector<std::int32_t>& prompt,
                                   const SampleOptions& options, const std::function<void(std::int32_t)>& on_token) {
  check(options);
  if (prompt.empty()) throw InvalidArgument("the prompt has no token");
  std::mt19937_64 rng(options.seed);
  std::vector<std::int32_t> out;
  std::vector<float> logits = decoder.append(prompt);
  for (std::int64_t i = 0; i < options.max_new_tokens; ++i) {
    const std::int32_t token = pick_token(logits, options.temperature, options.top_k, rng);
    out.push_back(token);
    if (on_token) on_token(token);
    if (token == options.stop_token || decoder.length() >= decoder.max_tokens()) break;
    logits = decoder.append({token});
  }
  return out;
}

}  // namespace hdp::trainer
