#include "mesh/step/zero.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "ops/convert.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Range = ZeroOptimizer::Range;

// `ranges` (sorted by begin, merged) clipped to [lo, hi).
std::vector<Range> clip(const std::vector<Range>& ranges, std::int64_t lo, std::int64_t hi) {
  std::vector<Range> out;
  for (const Range& r : ranges) {
    const Range clipped{std::max(r.begin, lo), std::min(r.end, hi)};
    if (clipped.end > clipped.begin) out.push_back(clipped);
  }
  return out;
}

// AdamW over a shard [offset, offset + p.numel()) of the flat buffer, in segments that alternate
// between decayed and exempt (`exempt`: sorted, merged, within the shard), each with its own weight
// decay; one segment, the whole shard, when nothing is exempt. The same segments for an original
// and its copy, so that both run exactly the same float operations.
void adamw_segments(const ops::Tensor& p, const ops::Tensor& g, const ops::Tensor& m, const ops::Tensor& v,
                    std::int64_t offset, const std::vector<Range>& exempt, ops::AdamWParams adamw, double grad_norm,
                    double max_grad_norm) {
  auto update = [&](std::int64_t begin, std::int64_t end, float weight_decay) {
    if (end <= begin) return;
    const std::int64_t at = begin - offset, len = end - begin;
    ops::AdamWParams segment = adamw;
    segment.weight_decay = weight_decay;
    ops::adamw_step(p.view(at, {len}), g.view(at, {len}), m.view(at, {len}), v.view(at, {len}), segment, grad_norm,
                    max_grad_norm);
  };
  std::int64_t cursor = offset;
  for (const Range& r : exempt) {
    update(cursor, r.begin, adamw.weight_decay);
    update(r.begin, r.end, 0.0f);
    cursor = r.end;
  }
  update(cursor, offset + p.numel(), adamw.weight_decay);
}

}  // namespace

const char* phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kReduceScatter:
      return "reduce-scatter";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kAllGather:
      return "all-gather";
  }
  return "?";
}

std::vector<std::int64_t> shard_counts(std::int64_t n, int world_size) {
  if (n < 0 || world_size < 1) {
    throw InvalidArgument("shard_counts: " + std::to_string(n) + " elements over " + std::to_string(world_size) +
                          " ranks");
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world_size), n / world_size);
  for (std::int64_t r = 0; r < n % world_size; ++r) ++counts[static_cast<std::size_t>(r)];
  return counts;
}

ZeroOptimizer::ZeroOptimizer(std::int64_t n, int rank, int world_size, ops::DType dtype, ops::Device device,
                             ops::DType wire)
    : n_(n), rank_(rank), counts_(shard_counts(n, world_size)), dtype_(dtype), device_(device),
      wire_(wire == ops::DType::kF32 ? dtype : wire) {
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument("ZeroOptimizer: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
  if (wire_ != dtype_ && !(wire_ == ops::DType::kBF16 && dtype_ == ops::DType::kF32)) {
    throw InvalidArgument("ZeroOptimizer: a " + ops::dtype_name(wire) + " wire for " + ops::dtype_name(dtype) +
                          " parameters (bf16 takes f32 parameters)");
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
  all_no_decay_.clear();
  for (const Range& r : ranges) {
    if (r.end <= r.begin) continue;
    if (!all_no_decay_.empty() && r.begin <= all_no_decay_.back().end) {
      all_no_decay_.back().end = std::max(all_no_decay_.back().end, r.end);
    } else {
      all_no_decay_.push_back(r);
    }
  }
  no_decay_ = clip(all_no_decay_, offset_, offset_ + count());
}

void ZeroOptimizer::set_replicas(const BuddyPlan& plan) {
  const std::size_t world = counts_.size();
  if (plan.holder.size() != world || plan.held.size() != world) {
    throw InvalidArgument("ZeroOptimizer::set_replicas: a plan for " + std::to_string(plan.holder.size()) +
                          " ranks, not " + std::to_string(world));
  }
  holder_ = plan.holder[static_cast<std::size_t>(rank_)];
  if (holder_ == rank_ || holder_ >= static_cast<int>(world)) {
    throw InvalidArgument("ZeroOptimizer::set_replicas: rank " + std::to_string(rank_) + " cannot hold its own copy");
  }
  std::vector<Replica> replicas;
  for (int owner : plan.held[static_cast<std::size_t>(rank_)]) {
    if (owner < 0 || owner >= static_cast<int>(world) || owner == rank_ ||
        plan.holder[static_cast<std::size_t>(owner)] != rank_) {
      throw InvalidArgument("ZeroOptimizer::set_replicas: rank " + std::to_string(rank_) + " is not the holder of " +
                            std::to_string(owner) + "'s copy");
    }
    Replica r;
    r.owner = owner;
    for (int o = 0; o < owner; ++o) r.offset += counts_[static_cast<std::size_t>(o)];
    const std::int64_t count = counts_[static_cast<std::size_t>(owner)];
    // Kept when the plan keeps it (a plan given again before every step must not reset the copy).
    if (auto kept = std::find_if(replicas_.begin(), replicas_.end(), [&](const Replica& x) { return x.owner == owner; });
        kept != replicas_.end()) {
      replicas.push_back(std::move(*kept));
      continue;
    }
    r.m = ops::Tensor::zeros({count}, dtype_, device_);
    r.v = ops::Tensor::zeros({count}, dtype_, device_);
    r.grad = ops::Tensor::zeros({count}, dtype_, device_);
    r.params = ops::Tensor::zeros({count}, dtype_, device_);
    r.step = -1;  // not a state of any step until set_replica_state() or an update
    replicas.push_back(std::move(r));
  }
  replicas_ = std::move(replicas);
  replica_owners_.clear();
  for (const Replica& r : replicas_) replica_owners_.push_back(r.owner);
}

const ZeroOptimizer::Replica& ZeroOptimizer::replica(int owner) const {
  for (const Replica& r : replicas_) {
    if (r.owner == owner) return r;
  }
  throw InvalidArgument("ZeroOptimizer: rank " + std::to_string(rank_) + " holds no copy of rank " +
                        std::to_string(owner) + "'s shard");
}

ZeroOptimizer::Replica& ZeroOptimizer::replica(int owner) {
  return const_cast<Replica&>(std::as_const(*this).replica(owner));
}

const ops::Tensor& ZeroOptimizer::replica_exp_avg(int owner) const { return replica(owner).m; }
const ops::Tensor& ZeroOptimizer::replica_exp_avg_sq(int owner) const { return replica(owner).v; }

void ZeroOptimizer::set_replica_state(int owner, const ops::Tensor& params, std::int64_t step) {
  Replica& r = replica(owner);
  if (!params.defined() || params.numel() != r.params.numel() || step < 0) {
    throw InvalidArgument("ZeroOptimizer::set_replica_state: rank " + std::to_string(owner) + "'s copy takes " +
                          std::to_string(r.params.numel()) + " parameters at a step >= 0");
  }
  r.params.copy_from(params);
  r.step = step;
  r.prev.step = -1;
}

void ZeroOptimizer::set_steps_taken(std::int64_t steps) {
  if (steps < 0) throw InvalidArgument("ZeroOptimizer::set_steps_taken: " + std::to_string(steps) + " < 0");
  steps_ = steps;
  own_step_ = steps;
  own_prev_.step = -1;
}

void ZeroOptimizer::keep(Previous& prev, const ops::Tensor& params, const ops::Tensor& m, const ops::Tensor& v,
                         std::int64_t step) const {
  if (!prev.params.defined() || prev.params.numel() != params.numel()) {
    prev.params = ops::Tensor::zeros({params.numel()}, dtype_, device_);
    prev.m = ops::Tensor::zeros({params.numel()}, dtype_, device_);
    prev.v = ops::Tensor::zeros({params.numel()}, dtype_, device_);
  }
  prev.params.copy_from(params);
  prev.m.copy_from(m);
  prev.v.copy_from(v);
  prev.step = step;
}

std::vector<ZeroOptimizer::Version> ZeroOptimizer::versions(const ops::Tensor& params) const {
  if (!params.defined() || params.numel() != n_) {
    throw InvalidArgument("ZeroOptimizer::versions: the parameters must have " + std::to_string(n_) + " elements");
  }
  std::vector<Version> out;
  out.push_back({rank_, own_step_, params.reshape({n_}).view(offset_, {count()}), m_, v_});
  if (own_prev_.step >= 0) out.push_back({rank_, own_prev_.step, own_prev_.params, own_prev_.m, own_prev_.v});
  for (const Replica& r : replicas_) {
    if (r.step < 0) continue;
    out.push_back({r.owner, r.step, r.params, r.m, r.v});
    if (r.prev.step >= 0) out.push_back({r.owner, r.prev.step, r.prev.params, r.prev.m, r.prev.v});
  }
  return out;
}

ZeroOptimizer::Result ZeroOptimizer::step(const ops::Tensor& params, const ops::Tensor& grads, Communicator& comm,
                                          ops::AdamWParams adamw, double max_grad_norm,
                                          std::chrono::milliseconds timeout, const PhaseHook& on_phase) {
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
  auto phase = [&](StepPhase p) {
    if (on_phase) on_phase(p);
  };
  Result result;
  phase(StepPhase::kReduceScatter);
  auto start = Clock::now();
  const bool bf16_wire = wire_ != dtype_;
  if (bf16_wire) {
    if (!wire_buffer_.defined()) wire_buffer_ = ops::Tensor::empty({n_}, wire_, device_);
    ops::convert_into(grads.reshape({n_}), wire_buffer_);
    const ops::Tensor mine = wire_buffer_.view(offset_, {count()});
    comm.reduce_scatter(wire_buffer_, mine, counts_, ReduceOp::kSum, timeout);
    ops::convert_into(mine, grad_);
  } else {
    comm.reduce_scatter(grads.reshape({n_}), grad_, counts_, ReduceOp::kSum, timeout);
  }
  result.reduce_ms = ms_since(start);

  start = Clock::now();
  const double local = count() > 0 ? ops::sum_squares(grad_) : 0.0;
  result.grad_norm = std::sqrt(comm.allreduce_sum(local, timeout));
  grad_norm_ = result.grad_norm;
  const ops::Tensor flat = params.reshape({n_});
  const ops::Tensor shard = flat.view(offset_, {count()});
  adamw.step = steps_ + 1;
  result.update_ms = ms_since(start);

  // The copies' gradients travel while this rank updates its own shard.
  start = Clock::now();
  std::vector<std::unique_ptr<Work>> exchange;
  for (Replica& r : replicas_) {
    if (r.grad.numel() > 0) exchange.push_back(comm.irecv(r.grad, r.owner, kReplicaGradTag));
  }
  if (holder_ >= 0 && count() > 0) exchange.push_back(comm.isend(grad_, holder_, kReplicaGradTag));
  result.replica_ms = ms_since(start);

  start = Clock::now();
  if (keep_previous_) keep(own_prev_, shard, m_, v_, steps_);
  own_step_ = steps_ + 1;
  adamw_segments(shard, grad_, m_, v_, offset_, no_decay_, adamw, result.grad_norm, max_grad_norm);
  result.update_ms += ms_since(start);
  phase(StepPhase::kOptimizer);

  start = Clock::now();
  for (auto& work : exchange) work->wait(timeout);
  for (Replica& r : replicas_) {
    // The copy's parameters are the step's input, kept from its last update or its placement. A
    // fresh copy (set_replicas without set_replica_state) starts from the owner's range of
    // `params`: the owner's values on every rank with an f32 wire, and before the first bf16 step.
    if (r.step < 0) r.params.copy_from(flat.view(r.offset, {r.grad.numel()}));
    else if (r.step != steps_) {
      throw InvariantViolation("ZeroOptimizer::step: the copy of rank " + std::to_string(r.owner) +
                               "'s shard is at step " + std::to_string(r.step) + ", its owner at " +
                               std::to_string(steps_));
    }
    if (keep_previous_) keep(r.prev, r.params, r.m, r.v, r.step);
    r.step = steps_ + 1;
    adamw_segments(r.params, r.grad, r.m, r.v, r.offset, clip(all_no_decay_, r.offset, r.offset + r.grad.numel()),
                   adamw, result.grad_norm, max_grad_norm);
  }
  result.replica_ms += ms_since(start);
  ++steps_;

  phase(StepPhase::kAllGather);
  start = Clock::now();
  if (bf16_wire) {
    const ops::Tensor mine = wire_buffer_.view(offset_, {count()});
    ops::convert_into(shard, mine);
    comm.allgather(mine, wire_buffer_, counts_, timeout);
    // Every range but this rank's own, whose exact f32 values stay.
    const std::int64_t end = offset_ + count();
    ops::convert_into(wire_buffer_.view(0, {offset_}), flat.view(0, {offset_}));
    ops::convert_into(wire_buffer_.view(end, {n_ - end}), flat.view(end, {n_ - end}));
  } else {
    comm.allgather(shard, flat, counts_, timeout);
  }
  result.gather_ms = ms_since(start);
  return result;
}

}  // namespace hdp::mesh
