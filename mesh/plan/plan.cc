#include "mesh/plan/plan.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "mesh/plan/sharding.h"
#include "mesh/plan/strategies.h"

namespace hdp::mesh {

Strategy parse_strategy(std::string_view name) {
  if (name == "static") return Strategy::kStatic;
  if (name == "naive") return Strategy::kNaive;
  if (name == "balanced") return Strategy::kBalanced;
  throw InvalidArgument("unknown strategy '" + std::string(name) + "' (expected static, naive or balanced)");
}

std::string_view strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kStatic:
      return "static";
    case Strategy::kNaive:
      return "naive";
    case Strategy::kBalanced:
      return "balanced";
  }
  throw InvariantViolation("unknown Strategy value " + std::to_string(static_cast<int>(strategy)));
}

void validate_request(const PlanRequest& request) {
  constexpr auto kMaxIndex = static_cast<std::size_t>(std::numeric_limits<std::uint32_t>::max());
  request.cost.validate();
  if (request.speeds.empty()) throw InvalidArgument("plan: no live ranks (at least 1 is needed)");
  if (request.speeds.size() > kMaxIndex) {
    throw InvalidArgument("plan: " + std::to_string(request.speeds.size()) + " ranks, more than the limit " +
                          std::to_string(kMaxIndex));
  }
  for (std::size_t r = 0; r < request.speeds.size(); ++r) {
    const double speed = request.speeds[r];
    if (!std::isfinite(speed) || speed <= 0) {
      throw InvalidArgument("plan: speed of rank " + std::to_string(r) + " must be a finite number > 0, got " +
                            std::to_string(speed));
    }
  }
  if (request.capacity < 1) {
    throw InvalidArgument("plan: capacity must be >= 1 token per rank, got " + std::to_string(request.capacity));
  }
  if (request.context < 0) {
    throw InvalidArgument("plan: context must be >= 0 (0 = longest in the batch), got " +
                          std::to_string(request.context));
  }
  if (request.delta_ms && (!std::isfinite(*request.delta_ms) || *request.delta_ms < 0)) {
    throw InvalidArgument("plan: delta_ms must be a finite number >= 0, got " + std::to_string(*request.delta_ms));
  }
  if (request.offload && !request.cost.offload) {
    throw InvalidArgument("plan: offload requested but cost model '" + request.cost.name +
                          "' has no offload parameters");
  }
  if (request.lengths.empty()) throw InvalidArgument("plan: the batch is empty (no sequences)");
  if (request.lengths.size() > kMaxIndex) {
    throw InvalidArgument("plan: " + std::to_string(request.lengths.size()) + " sequences, more than the limit " +
                          std::to_string(kMaxIndex));
  }
  const auto ranks = static_cast<std::int64_t>(request.speeds.size());
  bool any_tokens = false;
  for (std::size_t i = 0; i < request.lengths.size(); ++i) {
    const std::int64_t tokens = request.lengths[i];
    if (tokens < 0) {
      throw InvalidArgument("plan: sequence " + std::to_string(i) + " has a negative length " + std::to_string(tokens));
    }
    any_tokens = any_tokens || tokens > 0;
    if (tokens <= request.capacity) continue;
    const ShardLimit limit = shard_limit(request.cost, tokens, request.capacity, request.offload);
    if (limit.min_ranks > ranks) {
      throw InvalidArgument("plan: sequence " + std::to_string(i) + " has " + std::to_string(tokens) +
                            " tokens, more than the " + std::to_string(ranks * limit.rank_capacity) + " that " +
                            std::to_string(ranks) + " live ranks hold at " + std::to_string(limit.rank_capacity) +
                            " tokens each");
    }
  }
  if (!any_tokens) {
    throw InvalidArgument("plan: the batch has no tokens (" + std::to_string(request.lengths.size()) +
                          " sequences, all of length 0)");
  }
}

Plan make_plan(const PlanRequest& request, Strategy strategy) {
  validate_request(request);
  switch (strategy) {
    case Strategy::kStatic:
      return plan_static(request);
    case Strategy::kNaive:
      return plan_naive(request);
    case Strategy::kBalanced:
      return plan_balanced(request);
  }
  throw InvariantViolation("unknown Strategy value " + std::to_string(static_cast<int>(strategy)));
}

}  // namespace hdp::mesh
