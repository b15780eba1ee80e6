#include "mesh/zero.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/clock.h"
#include "common/error.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::vector<std::int64_t> shard_counts(std::int64_t n, int world_size) {
  if (n < 0 || world_size < 1) {
    throw InvalidArgument("shard_counts: " + std::to_string(n) + " elements over " + std::to_string(world_size) +
                          " ranks");
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world_size), n / world_size);
  for (std::int64_t r = 0; r < n % world_size; ++r) ++counts[static_cast<std::size_t>(r)];
  return counts;
}

ZeroOptimizer::ZeroOptimizer(std::int64_t n, int rank, int world_size, ops::DType dtype, ops::Device device)
    : n_(n), rank_(rank), counts_(shard_counts(n, world_size)) {
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument("ZeroOptimizer: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
  for (int r = 0; r < rank; ++r) offset_ += counts_[static_cast<std::size_t>(r)];
  m_ = ops::Tensor::zeros({count()}, dtype, device);
  v_ = ops::Tensor::zeros({count()}, dtype, device);
  grad_ = ops::Tensor::zeros({count()}, dtype, device);
}

void ZeroOptimizer::set_no_decay(std::vector<Range> ranges) {
  for (const Range& r : ranges) {
    if (r.begin < 0 || r.end < r.begin || r.end > n_) {
      throw InvalidArgument("ZeroOptimizer::set_no_decay: range [" + std::to_string(r.begin) + ", " +
                            std::to_string(r.end) + ") is outside the buffer of " + std::to_string(n_) + " elements");
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  no_decay_.clear();
  const std::int64_t lo = offset_, hi = offset_ + count();
  for (const Range& r : ranges) {
    const Range clipped{std::max(r.begin, lo), std::min(r.end, hi)};
    if (clipped.end <= clipped.begin) continue;
    if (!no_decay_.empty() && clipped.begin <= no_decay_.back().end) {
      no_decay_.back().end = std::max(no_decay_.back().end, clipped.end);
    } else {
      no_decay_.push_back(clipped);
    }
  }
}

void ZeroOptimizer::set_steps_taken(std::int64_t steps) {
  if (steps < 0) throw InvalidArgument("ZeroOptimizer::set_steps_taken: " + std::to_string(steps) + " < 0");
  steps_ = steps;
}

ZeroOptimizer::Result ZeroOptimizer::step(const ops::Tensor& params, const ops::Tensor& grads, Communicator& comm,
                                          ops::AdamWParams adamw, double max_grad_norm,
                                          std::chrono::milliseconds timeout) {
  if (comm.size() != static_cast<int>(counts_.size()) || comm.rank() != rank_) {
    throw InvalidArgument("ZeroOptimizer::step: built for rank " + std::to_string(rank_) + " of " +
                          std::to_string(counts_.size()) + ", given a communicator of rank " +
                          std::to_string(comm.rank()) + " of " + std::to_string(comm.size()));
  }
  for (const ops::Tensor* t : {&params, &grads}) {
    if (!t->defined() || t->numel() != n_ || t->dtype() != m_.dtype() || t->device() != m_.device()) {
      throw InvalidArgument("ZeroOptimizer::step: " + std::string(t == &params ? "params" : "grads") + " is " +
                            (t->defined() ? t->describe() : std::string("undefined")) + ", expected " +
                            std::to_string(n_) + " elements of " + m_.describe());
    }
  }
  Result result;
  auto start = Clock::now();
  comm.reduce_scatter(grads.reshape({n_}), grad_, counts_, ReduceOp::kSum, timeout);
  result.reduce_ms = ms_since(start);

  start = Clock::now();
  const double local = count() > 0 ? ops::sum_squares(grad_) : 0.0;
  result.grad_norm = std::sqrt(comm.allreduce_sum(local, timeout));
  const ops::Tensor shard = params.reshape({n_}).view(offset_, {count()});
  adamw.step = steps_ + 1;
  // The shard in segments that alternate between decayed and exempt (no_decay_), each updated
  // with its own weight decay; one segment, the whole shard, when nothing is exempt.
  auto update = [&](std::int64_t begin, std::int64_t end, float weight_decay) {
    if (end <= begin) return;
    const std::int64_t at = begin - offset_, len = end - begin;
    ops::AdamWParams p = adamw;
    p.weight_decay = weight_decay;
    ops::adamw_step(shard.view(at, {len}), grad_.view(at, {len}), m_.view(at, {len}), v_.view(at, {len}), p,
                    result.grad_norm, max_grad_norm);
  };
  std::int64_t cursor = offset_;
  for (const Range& exempt : no_decay_) {
    update(cursor, exempt.begin, adamw.weight_decay);
    update(exempt.begin, exempt.end, 0.0f);
    cursor = exempt.end;
  }
  update(cursor, offset_ + count(), adamw.weight_decay);
  ++steps_;
  result.update_ms = ms_since(start);

  start = Clock::now();
  comm.allgather(shard, params.reshape({n_}), counts_, timeout);
  result.gather_ms = ms_since(start);
  return result;
}

}  // namespace hdp::mesh
