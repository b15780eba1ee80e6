#include "mesh/zero.h"

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
  if (count() > 0) ops::adamw_step(shard, grad_, m_, v_, adamw, result.grad_norm, max_grad_norm);
  ++steps_;
  result.update_ms = ms_since(start);

  start = Clock::now();
  comm.allgather(shard, params.reshape({n_}), counts_, timeout);
  result.gather_ms = ms_since(start);
  return result;
}

}  // namespace hdp::mesh
