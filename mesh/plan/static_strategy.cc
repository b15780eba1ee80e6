// The static DP×CP mesh of Megatron-LM and MegaScale (ByteScale's baseline): CP is the smallest
// divisor of the rank count that holds the context (the longest sequence the job may see) at C
// tokens per rank; the batch is packed best-fit into micro-batches of CP·C tokens; micro-batches are
// dealt to the DP groups in turn (equal counts, as every DP rank runs the same number of
// micro-batches), and every packed sequence, short or long, is sharded over the whole CP group.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "mesh/plan/plan_builder.h"
#include "mesh/plan/strategies.h"

namespace hdp::mesh {

Plan plan_static(const PlanRequest& request) {
  const auto ranks = static_cast<std::int64_t>(request.speeds.size());
  std::int64_t context = request.context;
  for (std::int64_t s : request.lengths) context = std::max(context, s);
  const std::int64_t needed = (context + request.capacity - 1) / request.capacity;
  if (needed > ranks) {
    throw InvalidArgument("static mesh: context " + std::to_string(context) + " needs " + std::to_string(needed) +
                          " ranks at capacity " + std::to_string(request.capacity) + ", but only " +
                          std::to_string(ranks) + " ranks are live");
  }
  std::int64_t cp = needed;
  while (ranks % cp != 0) ++cp;
  const std::int64_t groups = ranks / cp;

  PlanBuilder builder(request, Strategy::kStatic);
  const auto bins = best_fit_pack(request.lengths, longest_first(request.lengths), cp, request.capacity);
  for (std::size_t b = 0; b < bins.size(); ++b) {
    const auto group = static_cast<std::int64_t>(b) % groups;
    std::vector<std::uint32_t> ring(static_cast<std::size_t>(cp));
    for (std::int64_t i = 0; i < cp; ++i) {
      ring[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(group * cp + i);
    }
    std::vector<std::int64_t> lengths;
    for (std::uint32_t sequence : bins[b]) lengths.push_back(request.lengths[sequence]);
    builder.place(bins[b], std::move(ring), request.cost.micro_batch_ms(lengths, cp), 0.0, request.capacity);
  }
  return builder.take();
}

}  // namespace hdp::mesh
