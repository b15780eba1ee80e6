#include "trainer/job_identity.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "checkpoint/checksum.h"
#include "common/error.h"
#include "common/text.h"
#include "hdp/config.h"
#include "mesh/plan/cost_model_json.h"
#include "trainer/data/batch_source.h"

namespace hdp::trainer {
namespace {

std::uint64_t digest_of(const std::string& text) {
  return checkpoint::xxh3(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

// "node n3 (ranks 4, 5)", one entry a node, in rank order.
std::string ranks_by_node(const std::vector<int>& ranks, const std::vector<std::string>& nodes) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_node;
  for (const int r : ranks) {
    const std::string& node = nodes[static_cast<std::size_t>(r)];
    if (!by_node.contains(node)) order.push_back(node);
    by_node[node].push_back(r);
  }
  return join(order, ", ", [&](const std::string& node) {
    const auto& rs = by_node.at(node);
    return "node " + node + " (rank" + (rs.size() > 1 ? "s " : " ") + join(rs, ", ", [](int r) { return std::to_string(r); }) +
           ")";
  });
}

std::size_t node_count(const std::vector<int>& ranks, const std::vector<std::string>& nodes) {
  std::set<std::string> distinct;
  for (const int r : ranks) distinct.insert(nodes[static_cast<std::size_t>(r)]);
  return distinct.size();
}

// The distinct values of `ids` in order of first appearance, and the ranks holding each.
template <class T>
struct Sides {
  std::vector<T> kinds;
  std::vector<std::vector<int>> ranks;
};
template <class T>
Sides<T> sides_of(const std::vector<T>& ids) {
  Sides<T> s;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const auto at = std::find(s.kinds.begin(), s.kinds.end(), ids[r]);
    if (at == s.kinds.end()) {
      s.kinds.push_back(ids[r]);
      s.ranks.push_back({static_cast<int>(r)});
    } else {
      s.ranks[static_cast<std::size_t>(at - s.kinds.begin())].push_back(static_cast<int>(r));
    }
  }
  return s;
}

// Which value is the job's (the header's rule): the one the ranks holding state share (none when
// they disagree); with no rank holding state, the one every rank of more than half the nodes has.
// Nodes, not ranks, are counted, because a refusal takes a whole node out (its agent stops it): a
// node with more workers does not outvote two with fewer, and a node whose own ranks disagree
// (split between sides) leaves nothing to count on, so there is no majority.
template <class T>
struct JobSide {
  std::optional<T> job;
  bool holders_disagree = false;
  bool by_majority = false;  // no rank holds state
};
template <class T>
JobSide<T> job_side(const std::vector<T>& ids, const std::vector<bool>& holds, const std::vector<std::string>& nodes) {
  JobSide<T> side;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (!holds[r]) continue;
    if (!side.job) side.job = ids[r];
    side.holders_disagree = side.holders_disagree || ids[r] != *side.job;
  }
  if (side.holders_disagree) side.job.reset();
  if (side.job || side.holders_disagree) return side;
  side.by_majority = true;
  std::map<std::string, std::optional<T>> of_node;  // nullopt: the node's ranks disagree
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const auto [at, fresh] = of_node.try_emplace(nodes[r], ids[r]);
    if (!fresh && at->second != ids[r]) at->second.reset();
  }
  std::vector<T> node_kinds;
  for (const auto& [node, kind] : of_node) {
    if (!kind) return side;
    node_kinds.push_back(*kind);
  }
  for (const T& kind : node_kinds) {
    if (2 * static_cast<std::size_t>(std::count(node_kinds.begin(), node_kinds.end(), kind)) > node_kinds.size()) {
      side.job = kind;
      break;
    }
  }
  return side;
}

// The distinct nodes of `ranks`, in rank order.
std::vector<std::string> nodes_of(const std::vector<int>& ranks, const std::vector<std::string>& nodes) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const int r : ranks) {
    if (seen.insert(nodes[static_cast<std::size_t>(r)]).second) out.push_back(nodes[static_cast<std::size_t>(r)]);
  }
  return out;
}

using PartSet = std::array<bool, JobIdentity::kPartCount>;

PartSet parts_differing(const JobIdentity& a, const JobIdentity& b) {
  PartSet set{};
  for (std::size_t p = 0; p < JobIdentity::kPartCount; ++p) set[p] = a.digest[p] != b.digest[p];
  return set;
}

std::string named(const PartSet& set) {
  std::vector<std::string> parts;
  for (std::size_t p = 0; p < JobIdentity::kPartCount; ++p) {
    if (set[p]) parts.emplace_back(kIdentityParts[p]);
  }
  return join(parts, ", ");
}

}  // namespace

JobIdentity job_identity(const TrainerConfig& config, const TrainingSetup& setup) {
  JobIdentity id;
  id.digest[JobIdentity::kData] = digest_of(data::order_fingerprint(*setup.data) + "\neval " +
                                            (setup.eval ? data::order_fingerprint(*setup.eval) : std::string()));
  id.digest[JobIdentity::kModel] =
      digest_of(config.model_json().dump() + "\nprecision " + ops::model::precision_name(config.precision));
  const nlohmann::json training = {{"context", config.context},
                                   {"capacity", config.capacity},
                                   {"batch_tokens", config.batch_tokens},
                                   {"steps", config.steps},
                                   {"lr", {config.lr.peak, config.lr.min, config.lr.warmup, config.lr.total}},
                                   {"beta1", config.beta1},
                                   {"beta2", config.beta2},
                                   {"weight_decay", config.weight_decay},
                                   {"decay_norms", config.decay_norms},
                                   {"max_grad_norm", config.max_grad_norm},
                                   {"seed", config.seed},
                                   {"speed_aware", config.speed_aware},
                                   {"redundant_shards", config.redundant_shards},
                                   {"verify_replicas_every", config.verify_replicas_every},
                                   {"eval_every", config.eval_every},
                                   {"eval_tokens", config.eval_tokens},
                                   {"checkpoints", !config.checkpoint_dir.empty()},
                                   {"resume", config.resume},
                                   {"allow_data_change", config.allow_data_change},
                                   {"cost_model", mesh::cost_model_to_json(setup.cost)},
                                   {"offload", plans_offload(config, setup.cost)}};
  id.digest[JobIdentity::kTraining] = digest_of(training.dump());
  id.digest[JobIdentity::kBuild] = digest_of(HDP_VERSION);
  return id;
}

std::string differing_parts(const JobIdentity& a, const JobIdentity& b) { return named(parts_differing(a, b)); }

JobCheck check_one_job(const std::vector<JobIdentity>& ids, const std::vector<bool>& holds_state,
                       const std::vector<std::string>& nodes, int me) {
  const std::size_t n = ids.size();
  HDP_CHECK(holds_state.size() == n && nodes.size() == n && me >= 0 && static_cast<std::size_t>(me) < n,
            "check_one_job: one identity, one state and one node a rank");
  JobCheck check;
  if (std::all_of(ids.begin(), ids.end(), [&](const JobIdentity& id) { return id == ids[0]; })) return check;

  const JobSide<JobIdentity> side = job_side(ids, holds_state, nodes);
  const std::optional<JobIdentity>& job = side.job;
  const std::string the_job = side.by_majority ? "the job's majority" : "the running job";
  if (job) {
    std::vector<int> refused, kept;
    PartSet differs{};  // every part some refused rank differs in
    for (std::size_t r = 0; r < n; ++r) {
      (ids[r] == *job ? kept : refused).push_back(static_cast<int>(r));
      const PartSet mine = parts_differing(ids[r], *job);
      for (std::size_t p = 0; p < JobIdentity::kPartCount; ++p) differs[p] = differs[p] || mine[p];
    }
    if (ids[static_cast<std::size_t>(me)] != *job) {
      check.outcome = JobCheck::Outcome::kRefused;
      check.message = "this worker (rank " + std::to_string(me) + ", node " + nodes[static_cast<std::size_t>(me)] +
                      ") differs from " + the_job + " (" + ranks_by_node(kept, nodes) + ") in its " +
                      differing_parts(ids[static_cast<std::size_t>(me)], *job) +
                      ": it is refused, and its node leaves the job";
      return check;
    }
    check.outcome = JobCheck::Outcome::kOthersRefused;
    check.parts = named(differs);
    check.recorder = kept.front();
    check.refused_nodes = nodes_of(refused, nodes);
    const bool one = check.refused_nodes.size() == 1;
    check.message = ranks_by_node(refused, nodes) + (one ? " differs" : " differ") + " from " + the_job + " in " +
                    check.parts + ": refused; the job goes on without " + (one ? "it" : "them");
    return check;
  }

  // Nothing says which side is the job: every rank refuses, naming the sides.
  const Sides<JobIdentity> sides = sides_of(ids);
  std::string text = "the ranks were not started for one job: " + ranks_by_node(sides.ranks[0], nodes);
  for (std::size_t k = 1; k < sides.kinds.size(); ++k) {
    text += "; " + ranks_by_node(sides.ranks[k], nodes) +
            (node_count(sides.ranks[k], nodes) == 1 ? " differs" : " differ") + " from them in " +
            differing_parts(sides.kinds[k], sides.kinds[0]);
  }
  text += side.holders_disagree ? " (and the ranks that hold the job's state disagree among themselves)"
                                : " (no rank holds the job's state, and no side has every rank of more than half the "
                                  "nodes, to say which is the job)";
  check.outcome = JobCheck::Outcome::kNoJob;
  check.message = text + ": every rank refuses; start every node with the same data, model and settings";
  return check;
}

JobCheck check_initial_weights(const std::vector<std::uint64_t>& weights, const std::vector<bool>& holds_state,
                               const std::vector<std::string>& nodes, int me) {
  const std::size_t n = weights.size();
  HDP_CHECK(nodes.size() == n && holds_state.size() == n && me >= 0 && static_cast<std::size_t>(me) < n,
            "check_initial_weights: one digest, one state and one node a rank");
  JobCheck check;
  const Sides<std::uint64_t> sides = sides_of(weights);
  if (sides.kinds.size() == 1) return check;
  auto source = [](std::uint64_t digest) {
    return digest == 0 ? std::string("the seed's weights") : "weights of xxh3 " + checkpoint::to_hex(digest);
  };
  const JobSide<std::uint64_t> side = job_side(weights, holds_state, nodes);
  const std::string the_job = side.by_majority ? "the job's majority" : "the running job";
  if (side.job) {
    const std::uint64_t job = *side.job;
    std::vector<int> kept, refused;
    for (std::size_t r = 0; r < n; ++r) (weights[r] == job ? kept : refused).push_back(static_cast<int>(r));
    const std::uint64_t mine = weights[static_cast<std::size_t>(me)];
    if (mine != job) {
      check.outcome = JobCheck::Outcome::kRefused;
      check.message = "this worker (rank " + std::to_string(me) + ", node " + nodes[static_cast<std::size_t>(me)] +
                      ") started from " + source(mine) + ", " + the_job + " (" + ranks_by_node(kept, nodes) +
                      ") from " + source(job) + ": it is refused, and its node leaves the job; give it the same "
                      "--init-from weights";
      return check;
    }
    check.outcome = JobCheck::Outcome::kOthersRefused;
    check.parts = std::string(kInitialWeights);
    check.recorder = kept.front();
    check.refused_nodes = nodes_of(refused, nodes);
    const bool one = check.refused_nodes.size() == 1;
    check.message = ranks_by_node(refused, nodes) + (one ? " starts" : " start") +
                    " from other weights than " + the_job + " (" + source(job) + "): refused; the job goes on "
                    "without " + (one ? "it" : "them");
    return check;
  }
  std::string text = "the ranks did not start from the same weights: " + ranks_by_node(sides.ranks[0], nodes) +
                     " from " + source(sides.kinds[0]);
  for (std::size_t k = 1; k < sides.kinds.size(); ++k) {
    text += "; " + ranks_by_node(sides.ranks[k], nodes) + " from " + source(sides.kinds[k]);
  }
  check.outcome = JobCheck::Outcome::kNoJob;
  check.message = text +
                  (side.holders_disagree ? " (and the ranks that hold the job's state disagree among themselves)"
                                         : " (no side has every rank of more than half the nodes)") +
                  ": every rank refuses; give every node the same --init-from weights";
  return check;
}

}  // namespace hdp::trainer
