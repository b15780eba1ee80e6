#include "mesh/plan/plan_check.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "mesh/plan/sharding.h"

namespace hdp::mesh {
namespace {

[[noreturn]] void fail(const std::string& message) { throw InvariantViolation("plan check: " + message); }

void check_coverage(const PlanRequest& request, const Plan& plan) {
  std::vector<int> seen(request.lengths.size(), 0);
  for (std::size_t b = 0; b < plan.micro_batches.size(); ++b) {
    std::vector<std::uint32_t> named = plan.micro_batches[b].sequences;
    for (const LocalSequence& l : plan.micro_batches[b].local) named.push_back(l.sequence);
    for (std::uint32_t s : named) {
      if (s >= request.lengths.size()) {
        fail("micro-batch " + std::to_string(b) + " names sequence " + std::to_string(s));
      }
      ++seen[s];
    }
  }
  for (std::size_t s = 0; s < seen.size(); ++s) {
    const int expected = request.lengths[s] > 0 ? 1 : 0;
    if (seen[s] != expected) {
      fail("sequence " + std::to_string(s) + " (" + std::to_string(request.lengths[s]) + " tokens) is in " +
           std::to_string(seen[s]) + " micro-batches, expected " + std::to_string(expected));
    }
  }
}

void check_rings(const PlanRequest& request, const Plan& plan) {
  const std::size_t ranks = request.speeds.size();
  if (plan.rank_queues.size() != ranks) fail("queues for " + std::to_string(plan.rank_queues.size()) + " ranks");
  std::vector<std::size_t> count(ranks, 0);
  std::vector<std::size_t> last_seen(ranks, SIZE_MAX);
  for (std::size_t b = 0; b < plan.micro_batches.size(); ++b) {
    const MicroBatch& batch = plan.micro_batches[b];
    const auto size = static_cast<std::int64_t>(batch.ranks.size());
    if (size == 0 || batch.sequences.empty()) fail("micro-batch " + std::to_string(b) + " is empty");
    if (size == 1 && !batch.local.empty()) {
      fail("local micro-batch " + std::to_string(b) + " lists ring-local sequences");
    }
    for (const LocalSequence& l : batch.local) {
      if (std::find(batch.ranks.begin(), batch.ranks.end(), l.rank) == batch.ranks.end()) {
        fail("micro-batch " + std::to_string(b) + " gives a sequence to rank " + std::to_string(l.rank) +
             ", which is not in its ring");
      }
    }
    if (batch.offload_ratio == 0 && batch.rank_capacity > request.capacity) {
      fail("micro-batch " + std::to_string(b) + " allows " + std::to_string(batch.rank_capacity) +
           " tokens per rank without offloading");
    }
    for (std::int64_t position = 0; position < size; ++position) {
      const std::uint32_t r = batch.ranks[static_cast<std::size_t>(position)];
      if (r >= ranks || last_seen[r] == b) fail("micro-batch " + std::to_string(b) + " has a bad or repeated rank");
      last_seen[r] = b;
      ++count[r];
      std::int64_t held = 0;
      for (std::uint32_t s : batch.sequences) held += member_tokens(request.lengths[s], size, position);
      for (const LocalSequence& l : batch.local) held += l.rank == r ? request.lengths[l.sequence] : 0;
      if (held > batch.rank_capacity) {
        fail("rank " + std::to_string(r) + " holds " + std::to_string(held) + " tokens in micro-batch " +
             std::to_string(b) + ", more than its capacity " + std::to_string(batch.rank_capacity));
      }
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    if (plan.rank_queues[r].size() != count[r]) fail("queue of rank " + std::to_string(r) + " is inconsistent");
    for (std::size_t i = 0; i < plan.rank_queues[r].size(); ++i) {
      const std::uint32_t b = plan.rank_queues[r][i];
      if (b >= plan.micro_batches.size()) fail("queue of rank " + std::to_string(r) + " names a missing micro-batch");
      bool member = false;
      for (std::uint32_t m : plan.micro_batches[b].ranks) member = member || m == r;
      if (!member) fail("rank " + std::to_string(r) + " queues micro-batch " + std::to_string(b) + " it is not in");
      if (i > 0 && plan.micro_batches[plan.rank_queues[r][i - 1]].slot >= plan.micro_batches[b].slot) {
        fail("slots do not increase along the queue of rank " + std::to_string(r));
      }
    }
  }
}

// Runs the queues as the ranks would: a micro-batch runs once it heads every member's queue.
void check_replay(const Plan& plan) {
  std::vector<std::size_t> head(plan.rank_queues.size(), 0);
  std::vector<std::size_t> ready(plan.micro_batches.size(), 0);
  std::vector<std::uint32_t> runnable;
  const auto arrive = [&](std::size_t r) {
    if (head[r] == plan.rank_queues[r].size()) return;
    const std::uint32_t b = plan.rank_queues[r][head[r]];
    if (++ready[b] == plan.micro_batches[b].ranks.size()) runnable.push_back(b);
  };
  for (std::size_t r = 0; r < plan.rank_queues.size(); ++r) arrive(r);
  std::size_t ran = 0;
  while (!runnable.empty()) {
    const std::uint32_t b = runnable.back();
    runnable.pop_back();
    ++ran;
    for (std::uint32_t r : plan.micro_batches[b].ranks) {
      ++head[r];
      arrive(r);
    }
  }
  if (ran != plan.micro_batches.size()) {
    fail("deadlock: only " + std::to_string(ran) + " of " + std::to_string(plan.micro_batches.size()) +
         " micro-batches can run");
  }
}

}  // namespace

void verify_plan(const PlanRequest& request, const Plan& plan) {
  check_coverage(request, plan);
  check_rings(request, plan);
  check_replay(plan);
}

}  // namespace hdp::mesh
