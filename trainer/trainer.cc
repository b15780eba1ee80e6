#include "trainer/trainer.h"

#include <omp.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/flat_layout.h"
#include "checkpoint/checksum.h"
#include "checkpoint/restorer.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/distributed_step.h"
#include "mesh/plan/plan.h"
#include "mesh/plan/plan_summary.h"
#include "mesh/step/reshard.h"
#include "mesh/plan/speed_tracker.h"
#include "mesh/step/zero.h"
#include "ops/model/llama_model.h"
#include "ops/model/llama_params.h"
#include "trainer/checkpoint_group.h"
#include "trainer/checkpoint_reporting.h"
#include "trainer/data/batch_source.h"
#include "trainer/cpu_throttle.h"
#include "trainer/elastic_loop.h"
#include "trainer/tensorboard.h"
#include "trainer/worker_metrics.h"

namespace hdp::trainer {
namespace {

using elastic::Membership;
using mesh::Communicator;
using ops::Tensor;

std::string fixed3(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

std::span<float> span_of(const Tensor& t) { return {t.data<float>(), static_cast<std::size_t>(t.numel())}; }

// What the checkpoint keeps as a rank's "RNG state": the trainer draws nothing at random after the
// seeded initialisation (the data order is a function of the seed and the epoch), so the seed is
// the whole of it; a restore under another seed would change the data order, and says so.
std::vector<std::uint8_t> rng_bytes(std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(sizeof seed);
  std::memcpy(bytes.data(), &seed, sizeof seed);
  return bytes;
}

class Trainer {
 public:
  Trainer(elastic::ElasticContext& ctx, const TrainerConfig& config, const std::atomic<bool>& stop)
      : ctx_(ctx),
        config_(config),
        stop_(stop),
        job_(ctx.store()),
        model_(config.model),
        layout_(checkpoint_layout(config.model)),
        source_(open_data(config), config.seed),
        cost_(trainer_cost_model(config)),
        no_decay_(no_decay_ranges(config)),
        speeds_({.slow_below = config.straggler_threshold}),
        metrics_(ctx.identity().metrics_file) {
    ckpt_options_.root = config.checkpoint_dir;
    ckpt_options_.model_config = config.model_json();
    ckpt_options_.keep = config.keep;
    if (checkpoints()) checkpoint::validate(ckpt_options_);
  }

  TrainResult run() {
    check_minimum_world();
    LoopOptions loop;
    loop.connect_timeout = config_.timeout;
    loop.cooldown = config_.cooldown;
    run_elastic_loop(ctx_, loop, stop_, [this](const Membership& m, Communicator& comm) {
          try {
            const BodyResult result = generation(m, comm);
            if (result == BodyResult::kGenerationChanged) interrupted_ = SteadyClock::now();
            return result;
          } catch (const RecoverableError&) {
            interrupted_ = SteadyClock::now();
            throw;
          }
        });
    // The loop ends when the job completed (here, or before this worker joined) or was stopped.
    return completed_ ? TrainResult::kCompleted : TrainResult::kStopped;
  }

 private:
  bool checkpoints() const { return !config_.checkpoint_dir.empty(); }
  bool lead(const Membership& m) const { return m.rank == 0; }

  // The job never runs below its minimum size, so a configuration that does not fit it never can.
  void check_minimum_world() {
    int min_nodes = 1;
    try {
      if (auto text = ctx_.store()->get(elastic::keys::kConfig)) {
        min_nodes = elastic::decode_job_config(*text, elastic::keys::kConfig).min_nodes;
      }
    } catch (const StoreUnavailable&) {
      // Checked per generation anyway.
    }
    check_world(config_, min_nodes * ctx_.identity().nproc_per_node);
  }

  BodyResult generation(const Membership& m, Communicator& comm) {
    check_world(config_, m.world_size);
    source_.log_refusals(lead(m));
    std::unique_ptr<Communicator> ckpt_comm;
    if (checkpoints()) ckpt_comm = mesh::connect_communicator(ctx_.bootstrap(m), "ckpt", config_.timeout);

    const std::int64_t furthest = start(m, comm);
    share_speeds(m, comm);
    if (config_.redundant_shards) place_replicas(m, comm);

    CheckpointReporter reporter(ctx_.store(), m.generation, m.rank);
    std::optional<CommunicatorGroup> group;
    std::optional<checkpoint::AsyncSaver> saver;
    if (checkpoints()) {
      checkpoint::CheckpointOptions options = ckpt_options_;
      options.hooks = reporter.hooks();
      options.hooks.on_commit = [this, report = options.hooks.on_commit](const checkpoint::CommitInfo& info) {
        metrics_.checkpoint_saved(info.seconds, info.bytes);
        if (report) report(info);
      };
      group.emplace(*ckpt_comm, config_.timeout);
      saver.emplace(options, layout_, *group);
    }
    try {
      // A step rolled forward at a checkpoint step was never saved: save it now (every rank: the
      // decision comes from the plan, the same on all).
      if (saver && save_rolled_forward_) save(*saver);
      save_rolled_forward_ = false;
      return steps(m, comm, saver ? &*saver : nullptr, furthest);
    } catch (const RecoverableError&) {
      // The generation is lost: a save in flight cannot complete either; let it fail now rather
      // than after its timeout (~AsyncSaver waits for it).
      if (ckpt_comm) ckpt_comm->abort("the generation was abandoned");
      throw;
    }
  }

  // Step 2 of the header: rebuild the state from the ranks' memory (mesh/step/reshard.h), or restore.
  // Returns the furthest step any rank had completed before (for the steps a rollback loses).
  std::int64_t start(const Membership& m, Communicator& comm) {
    const auto began = SteadyClock::now();
    const std::vector<mesh::HeldState> states = mesh::exchange_states(held_state(), comm, config_.timeout);
    const mesh::ReshardPlan plan = mesh::plan_reshard(states, layout_.total());
    const std::int64_t furthest = std::max<std::int64_t>(plan.furthest, 0);
    if (plan.possible) {
      from_memory(m, comm, plan, began);
      return furthest;
    }
    // Some rank held a state, but not every shard survived: the checkpoint is the fallback.
    const bool fallback = std::any_of(states.begin(), states.end(), [](const auto& s) { return s.layout >= 0; });
    if (fallback && lead(m)) log()->warn("generation {}: cannot recover from memory: {}; restoring from the checkpoint", m.generation, plan.why);
    restore(m, comm, furthest, fallback ? plan.why : std::string());
    return furthest;
  }

  // What this rank holds for the agreement of start(): every (shard, step) of its optimizer, the
  // step its parameters hold whole, and the data positions it knows.
  mesh::HeldState held_state() const {
    mesh::HeldState s;
    s.completed = zero_ ? step_ : -1;
    if (!zero_ || layout_generation_ < 0) return s;
    s.layout = layout_generation_;
    s.old_world = static_cast<int>(zero_->counts().size());
    s.old_rank = layout_rank_;
    s.completed = step_;
    // The all-gather comes after this rank's own update: until that update the buffer is whole.
    s.params_step = zero_->own_step() == step_ ? step_ : -1;
    for (const auto& v : zero_->versions(model_.params())) s.held.push_back({v.owner, v.step});
    auto mark = [](std::int64_t step, const checkpoint::DataPosition& p) { return mesh::DataMark{step, p.epoch, p.sample}; };
    s.positions[0] = mark(step_, position_);
    if (prev_position_) s.positions[1] = mark(step_ - 1, *prev_position_);
    if (pending_position_) s.positions[2] = mark(step_ + 1, *pending_position_);
    return s;
  }

  // The plan of start() is possible: every rank takes its new shard, and the parameters where its
  // buffer is not whole at the plan's step, from the ranks that hold them. No file is read.
  void from_memory(const Membership& m, Communicator& comm, const mesh::ReshardPlan& plan, SteadyClock::time_point began) {
    auto next = std::make_unique<mesh::ZeroOptimizer>(layout_.total(), m.rank, m.world_size);
    next->set_no_decay(no_decay_);
    const std::vector<mesh::ZeroOptimizer::Version> mine =
        zero_ ? zero_->versions(model_.params()) : std::vector<mesh::ZeroOptimizer::Version>{};
    mesh::ReshardTraffic traffic;
    try {
      traffic = mesh::execute_reshard(plan, comm, mine, model_.params(), *next, config_.timeout);
    } catch (const RecoverableError&) {
      // A rank that was receiving parameters holds a mixed buffer: its state can serve no more.
      if (plan.receives_params[static_cast<std::size_t>(m.rank)]) {
        zero_.reset();
        layout_generation_ = -1;
      }
      throw;
    }
    const std::int64_t before = step_;
    const bool had_state = zero_ != nullptr && layout_generation_ >= 0;
    const int old_rank = layout_rank_;
    zero_ = std::move(next);
    step_ = plan.step;
    position_ = {plan.position.epoch, plan.position.sample};
    prev_position_.reset();
    pending_position_.reset();
    layout_generation_ = m.generation;
    layout_rank_ = m.rank;
    if (last_saved_step_ > step_) last_saved_step_ = -1;
    const auto received = static_cast<std::int64_t>(traffic.bytes_received);
    const std::int64_t total = comm.allreduce_sum(received, config_.timeout);
    const double seconds = ms_since(began) / 1000.0;
    if (had_state && (before != step_ || old_rank != m.rank)) {
      log()->info("worker {}/{}: generation {}: continuing from memory at step {}{}{}", ctx_.identity().node,
                  ctx_.identity().local_rank, m.generation, step_,
                  before < step_ ? " (rolled the step in flight forward)"
                                 : before > step_ ? " (rolled back from step " + std::to_string(before) + ")" : std::string(),
                  old_rank != m.rank ? " (its optimizer shard moved from rank " + std::to_string(old_rank) + ")" : std::string());
    }
    if (step_ > plan.furthest) report_rolled_forward(m);
    save_rolled_forward_ = step_ > plan.furthest && step_ % config_.checkpoint_every == 0;
    in_flight_.reset();
    if (lead(m)) {
      const std::int64_t lost = std::max<std::int64_t>(plan.furthest - plan.step, 0);
      log()->info("generation {}: continuing from memory at step {} on {} rank(s) (from {} shard(s) of generation {}): "
                  "{:.1f} MiB moved between ranks in {:.2f} s, {} step(s) lost, nothing read from disk",
                  m.generation, step_, m.world_size, plan.old_world, plan.layout,
                  static_cast<double>(total) / (1 << 20), seconds, lost);
      report_event(m, "continue", {{"step", std::to_string(step_)},
                                   {"world_size", std::to_string(m.world_size)},
                                   {"from_world_size", std::to_string(plan.old_world)},
                                   {"source", "memory"},
                                   {"bytes_moved", std::to_string(total)},
                                   {"disk_bytes_read", "0"},
                                   {"lost_steps", std::to_string(lost)},
                                   {"seconds", fixed3(seconds)}});
    }
  }

  // The step in flight was rolled forward: no rank had reported it. Rank 0 reports it now from what
  // it had computed before the failure (the loss, the norm; the time up to the failure), on the
  // world size it ran on; a rank 0 that did not run it (a joiner) says so instead.
  void report_rolled_forward(const Membership& m) {
    if (!lead(m)) return;
    if (!in_flight_ || in_flight_->step != step_) {
      log()->warn("step {} was rolled forward; its loss is not known to rank 0 (it did not run it): not reported", step_);
      return;
    }
    report(m, in_flight_->result, in_flight_->ms, in_flight_->lr, in_flight_->world_size);
  }

  // No plan from memory: every rank restores its shard from the newest valid checkpoint (or the
  // seed). `why`: why memory could not serve (empty: no rank held a state, e.g. the job starts).
  void restore(const Membership& m, Communicator& comm, std::int64_t furthest, const std::string& why) {
    const auto started = SteadyClock::now();
    layout_generation_ = -1;  // until the restore completed
    prev_position_.reset();
    pending_position_.reset();
    zero_ = std::make_unique<mesh::ZeroOptimizer>(layout_.total(), m.rank, m.world_size);
    zero_->set_no_decay(no_decay_);
    std::optional<checkpoint::RestoredProgress> restored;
    if (checkpoints() && may_restore(m, comm)) {
      const Tensor params = model_.params();
      const checkpoint::ShardRange range{zero_->offset(), zero_->offset() + zero_->count()};
      checkpoint::ShardTarget target{range,
                                     {span_of(params.view(range.begin, {range.size()})), span_of(zero_->exp_avg()),
                                      span_of(zero_->exp_avg_sq())}};
      CheckpointReporter reporter(ctx_.store(), m.generation, m.rank);
      checkpoint::CheckpointOptions options = ckpt_options_;
      options.hooks = reporter.hooks();
      CommunicatorGroup group(comm, config_.timeout);
      restored = checkpoint::restore_latest(options, layout_, group, target);
    }
    if (restored) {
      step_ = restored->step;
      position_ = restored->data;
      zero_->set_steps_taken(step_);
      if (!restored->rng_states.empty() && restored->rng_states[0] != rng_bytes(config_.seed)) {
        log()->warn("the checkpoint {} was written under another --seed: the initial weights came from it, but the "
                    "data order from here on follows this run's seed",
                    restored->path.string());
      }
      // Every rank read only its own shard of the parameters: gather the others.
      comm.allgather(model_.params().view(zero_->offset(), {zero_->count()}), model_.params(), zero_->counts());
    } else {
      model_.init(config_.seed);
      step_ = 0;
      position_ = {};
    }
    last_saved_step_ = restored ? step_ : -1;
    layout_generation_ = m.generation;
    layout_rank_ = m.rank;
    const double seconds = ms_since(started) / 1000.0;
    // What this rank read: its range of the parameters and of both optimizer moments, fp32.
    const std::int64_t read = restored ? 3 * zero_->count() * static_cast<std::int64_t>(sizeof(float)) : 0;
    if (restored) metrics_.checkpoint_restored(seconds, static_cast<std::uint64_t>(read));
    const std::int64_t total_read = comm.allreduce_sum(read, config_.timeout);
    if (lead(m)) {
      log()->info("generation {}: {} at step {} on {} rank(s) in {:.2f} s{}", m.generation,
                  restored ? "restored " + restored->path.string() : std::string("initialised from the seed"), step_,
                  m.world_size, seconds,
                  furthest > step_ ? " (" + std::to_string(furthest - step_) + " step(s) to redo)" : std::string());
      elastic::Fields fields = {{"step", std::to_string(step_)},
                                {"checkpoint", restored ? restored->path.filename().string() : std::string("none")},
                                {"lost_steps", std::to_string(std::max<std::int64_t>(furthest - step_, 0))},
                                {"world_size", std::to_string(m.world_size)},
                                {"source", restored ? "checkpoint" : "seed"},
                                {"disk_bytes_read", std::to_string(total_read)},
                                {"seconds", fixed3(seconds)}};
      if (!why.empty()) fields.emplace_back("reason", why);
      report_event(m, "restore", std::move(fields));
    }
  }

  // Redundant shards (config_.redundant_shards): the generation's buddy plan, and every shard
  // sent whole to its holder, so that the copies start equal to the originals whatever happened
  // before (a restore, renumbered ranks); every step then keeps them equal (mesh/step/zero.h).
  void place_replicas(const Membership& m, Communicator& comm) {
    std::vector<std::string> node_of_rank(static_cast<std::size_t>(m.world_size));
    for (const auto& member : m.record.members) {
      for (std::size_t i = 0; i < member.slots.size(); ++i) {
        node_of_rank[static_cast<std::size_t>(member.first_rank) + i] = member.node;
      }
    }
    const mesh::BuddyPlan plan = mesh::plan_buddies(node_of_rank);
    zero_->set_replicas(plan);
    constexpr mesh::Tag kCopyExpAvg = mesh::kReplicaGradTag + 1, kCopyExpAvgSq = mesh::kReplicaGradTag + 2;
    std::vector<std::unique_ptr<mesh::Work>> work;
    for (int owner : zero_->replica_owners()) {
      work.push_back(comm.irecv(zero_->replica_exp_avg(owner), owner, kCopyExpAvg));
      work.push_back(comm.irecv(zero_->replica_exp_avg_sq(owner), owner, kCopyExpAvgSq));
    }
    if (const int holder = plan.holder[static_cast<std::size_t>(m.rank)]; holder >= 0) {
      work.push_back(comm.isend(zero_->exp_avg(), holder, kCopyExpAvg));
      work.push_back(comm.isend(zero_->exp_avg_sq(), holder, kCopyExpAvgSq));
    }
    for (auto& w : work) w->wait(config_.timeout);
    // The copies' parameters: every rank's buffer holds step_ whole at the generation's start.
    const std::vector<std::int64_t>& counts = zero_->counts();
    for (int owner : zero_->replica_owners()) {
      std::int64_t offset = 0;
      for (int r = 0; r < owner; ++r) offset += counts[static_cast<std::size_t>(r)];
      zero_->set_replica_state(owner, model_.params().view(offset, {counts[static_cast<std::size_t>(owner)]}), step_);
    }
    // The kept triples serve a rollback from the copies; with none (one node) a lost shard is lost.
    zero_->set_keep_previous(plan.complete());
    if (lead(m)) {
      log()->info("generation {}: every optimizer shard copied to a rank of another node{}", m.generation,
                  plan.complete() ? std::string() : std::string(" (none: the job runs on one node)"));
    }
  }

  // Every rank's checksums of its shard and of the copies it holds, gathered: each copy must equal
  // its original. A mismatch is logged as an error naming both ranks; training goes on.
  void verify_replicas(const Membership& m, Communicator& comm) {
    const int world = m.world_size;
    // Per rank a row of 2·world checksums: its own shard at its rank's place, its copies at
    // their owners' places, 0 elsewhere.
    std::vector<std::int64_t> row(2 * static_cast<std::size_t>(world), 0);
    auto sum = [](const ops::Tensor& t) {
      return static_cast<std::int64_t>(checkpoint::xxh3(std::span<const float>(t.data<float>(), static_cast<std::size_t>(t.numel()))));
    };
    row[2 * static_cast<std::size_t>(m.rank)] = sum(zero_->exp_avg());
    row[2 * static_cast<std::size_t>(m.rank) + 1] = sum(zero_->exp_avg_sq());
    const ops::Tensor own = ops::Tensor::from_vector<std::int64_t>(row, {2 * std::int64_t{world}});
    std::fill(row.begin(), row.end(), 0);
    for (int owner : zero_->replica_owners()) {
      row[2 * static_cast<std::size_t>(owner)] = sum(zero_->replica_exp_avg(owner));
      row[2 * static_cast<std::size_t>(owner) + 1] = sum(zero_->replica_exp_avg_sq(owner));
    }
    const ops::Tensor copies = ops::Tensor::from_vector<std::int64_t>(row, {2 * std::int64_t{world}});
    const std::int64_t cells = 2 * std::int64_t{world} * world;
    const ops::Tensor owns = ops::Tensor::zeros({cells}, ops::DType::kI64);
    const ops::Tensor held = ops::Tensor::zeros({cells}, ops::DType::kI64);
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(world), 2 * std::int64_t{world});
    comm.allgather(own, owns, counts);
    comm.allgather(copies, held, counts);
    if (!lead(m)) return;
    const std::int64_t* o = owns.data<std::int64_t>();
    const std::int64_t* h = held.data<std::int64_t>();
    int checked = 0, wrong = 0;
    for (int holder = 0; holder < world; ++holder) {
      for (int owner = 0; owner < world; ++owner) {
        const std::size_t cell = 2 * (static_cast<std::size_t>(holder) * world + owner);
        if (owner == holder || (h[cell] == 0 && h[cell + 1] == 0)) continue;
        const std::size_t original = 2 * (static_cast<std::size_t>(owner) * world + owner);
        ++checked;
        if (h[cell] != o[original] || h[cell + 1] != o[original + 1]) {
          ++wrong;
          log()->error("step {}: the copy of rank {}'s optimizer shard held by rank {} differs from the original",
                       step_, owner, holder);
        }
      }
    }
    if (wrong == 0) log()->info("step {}: {} optimizer shard copies verified equal to their originals", step_, checked);
  }

  // --resume: always, except for a job that starts without it and has never reported a step, whose
  // checkpoint directory must then hold none (a later rollback would otherwise load another run's).
  bool may_restore(const Membership& m, Communicator& comm) {
    if (config_.resume) return true;
    std::int64_t fresh = 0;
    if (lead(m)) {
      bool started = false;
      try {
        started = job_.snapshot(0).state.count("step") > 0;
      } catch (const Error& e) {
        log()->warn("cannot read the job state ({}): treating the job as started", e.what());
        started = true;
      }
      fresh = started ? 0 : 1;
    }
    fresh = comm.allreduce_max(fresh);
    if (fresh == 0) return true;
    const auto committed = checkpoint::list_committed(config_.checkpoint_dir);
    if (!committed.empty()) {
      throw InvalidArgument("--resume=false, but --checkpoint-dir " + config_.checkpoint_dir.string() +
                            " holds checkpoints (the newest at step " + std::to_string(committed.back().step) +
                            "): remove them or choose another directory");
    }
    return false;
  }

  BodyResult steps(const Membership& m, Communicator& comm, checkpoint::AsyncSaver* saver, std::int64_t furthest) {
    const int world = m.world_size;
    bool first = true;
    while (step_ < config_.steps) {
      // One allgather per step: whether any rank must stop or saw a new generation (the ranks
      // leave together, at the same boundary: one rank leaving alone would break the others' next
      // collective and cost them the state of the step they were in), and every rank's compute
      // time and plan digest of the step before (speeds; identical plans checked).
      const std::int64_t compute_us = last_compute_ms_ < 0 ? -1 : std::llround(last_compute_ms_ * 1000);
      const Tensor own = Tensor::from_vector<std::int64_t>(
          // Rank 0 that asked for an eviction leaves with the others: the leader answers with a new generation.
          {stop_ ? 1 : 0, ctx_.changed(m) || eviction_requested_ ? 1 : 0, compute_us,
           static_cast<std::int64_t>(last_digest_)},
          {kAgreed});
      const Tensor agreed = Tensor::zeros({kAgreed * std::int64_t{world}}, ops::DType::kI64);
      comm.allgather(own, agreed, std::vector<std::int64_t>(static_cast<std::size_t>(world), kAgreed));
      const std::int64_t* a = agreed.data<std::int64_t>();
      bool stop = false, changed = false;
      for (int r = 0; r < world; ++r) {
        stop = stop || a[kAgreed * r] > 0;
        changed = changed || a[kAgreed * r + 1] > 0;
      }
      if (stop) {
        drain(m, comm, saver);
        return BodyResult::kFinished;
      }
      if (changed) return BodyResult::kGenerationChanged;
      observe_speeds(m, a);
      inject_faults(m, step_ + 1);

      const auto started = SteadyClock::now();
      checkpoint::DataPosition next = position_;
      const data::GlobalBatch batch = source_.next(next, config_.batch_tokens);
      mesh::PlanRequest request;
      request.lengths = batch.lengths();
      request.speeds = config_.speed_aware ? speeds_.plan_speeds(workers_)
                                           : std::vector<double>(static_cast<std::size_t>(world), 1.0);
      request.capacity = config_.capacity;
      request.context = config_.context;
      request.cost = cost_;
      const mesh::Plan plan = mesh::make_plan(request, mesh::Strategy::kBalanced);
      last_work_ = mesh::rank_work_ms(request, plan);
      last_digest_ = mesh::plan_digest(plan);
      last_plan_speeds_ = request.speeds;

      mesh::StepOptions options;
      const double lr = config_.lr.at(step_ + 1);
      options.adamw = {.lr = static_cast<float>(lr),
                       .beta1 = config_.beta1,
                       .beta2 = config_.beta2,
                       .weight_decay = config_.weight_decay};
      options.max_grad_norm = config_.max_grad_norm;
      options.timeout = config_.timeout;
      options.slowdown = slowdown(step_ + 1);
      options.on_phase = [this, &m](mesh::StepPhase phase) { inject_faults(m, step_ + 1, phase); };
      mesh::DistributedStep step(model_, *zero_, comm, options);
      pending_position_ = next;  // until the step completed on this rank (held_state)
      in_flight_.reset();
      mesh::StepResult result;
      try {
        result = step.run(plan, batch.sequences);
      } catch (const RecoverableError&) {
        // What the step had computed, in case recovery rolls it forward (from_memory reports it).
        if (step.loss_known() && step.grad_norm_known()) {
          in_flight_ = InFlight{step.partial(), ms_since(started), lr, m.world_size, step_ + 1};
        }
        throw;
      }
      last_compute_ms_ = result.compute_ms;
      ++step_;
      prev_position_ = position_;
      position_ = next;
      pending_position_.reset();
      const double step_ms = ms_since(started);

      if (first) {
        first = false;
        recovered(m, comm, furthest);
      }
      report(m, result, step_ms, lr);
      if (config_.verify_replicas_every > 0 && step_ % config_.verify_replicas_every == 0) verify_replicas(m, comm);
      if (saver && (step_ % config_.checkpoint_every == 0 || step_ == config_.steps)) save(*saver);
    }
    if (saver && !saver->wait()) log()->error("the final checkpoint at step {} failed on this rank", step_);
    if (lead(m)) {
      if (!job_.complete(m.generation, step_)) log()->warn("completion at step {} refused: a newer generation exists", step_);
      log()->info("completed {} steps", step_);
    }
    comm.barrier();  // the outcome is written before any rank exits (an agent reads it)
    completed_ = true;
    return BodyResult::kFinished;
  }

  // The first step of a generation that followed an interruption: how long the interruption cost
  // (the slowest rank's view, from the moment it left the previous generation) and how many steps.
  void recovered(const Membership& m, Communicator& comm, std::int64_t furthest) {
    const std::int64_t mine = interrupted_ ? static_cast<std::int64_t>(ms_since(*interrupted_)) : 0;
    interrupted_.reset();
    const std::int64_t ms = comm.allreduce_max(mine);
    const std::int64_t lost = furthest >= step_ - 1 ? furthest - (step_ - 1) : 0;
    if (ms > 0) metrics_.recovered(static_cast<double>(ms) / 1000.0, lost);
    if (ms > 0 && lead(m)) {
      log()->info("generation {}: recovered in {:.2f} s, {} step(s) lost", m.generation, ms / 1000.0, lost);
      report_event(m, "recovered",
                   {{"step", std::to_string(step_)},
                    {"seconds", fixed3(ms / 1000.0)},
                    {"lost_steps", std::to_string(lost)},
                    {"world_size", std::to_string(m.world_size)}});
    }
  }

  // `world`: the world size the step ran on (0: this generation's).
  void report(const Membership& m, const mesh::StepResult& result, double step_ms, double lr, int world = 0) {
    if (world == 0) world = m.world_size;
    const double tokens_per_s = result.step_tokens / (step_ms / 1000.0);
    metrics_.step({.step = step_,
                   .loss = result.loss(),
                   .tokens_per_s = tokens_per_s,
                   .lr = lr,
                   .grad_norm = result.grad_norm,
                   .step_s = step_ms / 1000.0,
                   .compute_s = result.compute_ms / 1000.0,
                   .comm_wait_s = result.comm_wait_ms / 1000.0,
                   .tokens = result.step_tokens,
                   .world_size = world,
                   .rank = m.rank,
                   .generation = m.generation,
                   .speed = static_cast<std::size_t>(m.rank) < relative_.size() ? relative_[static_cast<std::size_t>(m.rank)] : 1.0});
    metrics_.publish();
    if (!lead(m)) return;
    if (step_ % config_.log_every == 0 || step_ == config_.steps) {
      log()->info("step {}/{}  loss {:.4f}  lr {:.2e}  {:.0f} tokens/s  world {}  {:.0f} ms (compute {:.0f}, wait {:.0f})",
                  step_, config_.steps, result.loss(), lr, tokens_per_s, world, step_ms, result.compute_ms,
                  result.comm_wait_ms);
    }
    if (!config_.metrics_file.empty()) write_metrics(m, result, step_ms, lr, tokens_per_s, world);
    if (!config_.tensorboard_dir.empty()) write_tensorboard(result, step_ms, lr, tokens_per_s, world);
    // The figures as the job state holds them; a non-finite one (a diverged run's NaN loss) is
    // left out of the state and the sample, whose readers accept only finite numbers: the curve
    // shows a gap, and the worker's log line and metrics say "nan".
    elastic::Fields figures;
    auto figure = [&](const char* name, const char* format, double value) {
      if (!std::isfinite(value)) return;
      char text[48];
      std::snprintf(text, sizeof text, format, value);
      figures.emplace_back(name, text);
    };
    figure("loss", "%.6f", result.loss());
    figure("tokens_per_s", "%.1f", tokens_per_s);
    figure("step_ms", "%.1f", step_ms);
    figure("lr", "%.6g", lr);
    figure("grad_norm", "%.6g", result.grad_norm);
    elastic::Fields state = {{"status", "running"},
                             {"step", std::to_string(step_)},
                             {"tokens", std::to_string(step_ * config_.batch_tokens)},
                             {"world_size", std::to_string(world)},
                             {"speeds", speeds_text()}};
    state.insert(state.end(), figures.begin(), figures.end());
    elastic::Fields sample = {{"step", std::to_string(step_)},
                              {"world_size", std::to_string(world)},
                              {"generation", std::to_string(m.generation)},
                              {"time_ms", std::to_string(elastic::now_ms())}};
    sample.insert(sample.end(), figures.begin(), figures.end());
    try {
      job_.fenced_update(m.generation, std::move(state), {elastic::sample_write(std::move(sample))});
    } catch (const Error& e) {
      log()->warn("step {}: cannot report to the job state: {}", step_, e.what());
    }
  }

  void write_metrics(const Membership& m, const mesh::StepResult& result, double step_ms, double lr,
                     double tokens_per_s, int world) {
    const nlohmann::json line = {{"step", step_},           {"loss", result.loss()},
                                 {"world_size", world}, {"generation", m.generation},
                                 {"lr", lr},                 {"grad_norm", result.grad_norm},
                                 {"tokens_per_s", tokens_per_s}, {"step_ms", step_ms},
                                 {"compute_ms", result.compute_ms}, {"speeds", relative_},
                                 {"plan_speeds", last_plan_speeds_}, {"time_ms", elastic::now_ms()}};
    // One write of a whole line in append mode: lines of successive rank-0 processes never mix.
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    const int fd = ::open(config_.metrics_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      log()->warn("cannot append to --metrics-file {}: {}", config_.metrics_file.string(), std::strerror(errno));
    }
    if (fd >= 0) ::close(fd);
  }

  // Rank 0's curves for TensorBoard; a failure to write is logged once a file and never stops training.
  void write_tensorboard(const mesh::StepResult& result, double step_ms, double lr, double tokens_per_s, int world) {
    try {
      if (tensorboard_failed_) return;
      if (!tensorboard_) tensorboard_ = std::make_unique<TensorBoardWriter>(config_.tensorboard_dir);
      tensorboard_->scalars(step_, {{"train/loss", result.loss()},
                                    {"train/lr", lr},
                                    {"train/tokens_per_s", tokens_per_s},
                                    {"train/world_size", world},
                                    {"train/step_ms", step_ms},
                                    {"train/grad_norm", result.grad_norm}});
    } catch (const Error& e) {
      if (!tensorboard_failed_) log()->warn("TensorBoard: {}; no further event files from this process", e.what());
      tensorboard_failed_ = true;
      tensorboard_.reset();
    }
  }

  // Not fenced: an event reports what this generation did (a restore, a straggler), true even
  // once a newer generation exists, and tagged with its generation; it changes no state.
  void report_event(const Membership& m, const std::string& type, elastic::Fields fields) {
    fields.emplace_back("generation", std::to_string(m.generation));
    try {
      job_.event(type, std::move(fields));
    } catch (const Error& e) {
      log()->warn("cannot record the {} event: {}", type, e.what());
    }
  }

  void save(checkpoint::AsyncSaver& saver) {
    checkpoint::ShardSnapshot shard;
    shard.range = {zero_->offset(), zero_->offset() + zero_->count()};
    shard.buffers = {span_of(model_.params().view(zero_->offset(), {zero_->count()})), span_of(zero_->exp_avg()),
                     span_of(zero_->exp_avg_sq())};
    shard.step = step_;
    shard.rng_state = rng_bytes(config_.seed);
    shard.data = position_;
    saver.save(shard);
    last_saved_step_ = step_;
  }

  void drain(const Membership& m, Communicator& comm, checkpoint::AsyncSaver* saver) {
    if (lead(m)) log()->info("stop requested: the ranks stop at step {}", step_);
    bool saved = true;
    if (saver) {
      if (last_saved_step_ != step_) save(*saver);
      saved = saver->wait();
      if (!saved) log()->error("the final checkpoint at step {} failed on this rank", step_);
    }
    if (lead(m)) {
      report_event(m, "stopped", {{"step", std::to_string(step_)},
                                  {"checkpoint", saver ? (saved ? std::to_string(step_) : "failed") : "none"}});
      try {
        job_.fenced_update(m.generation, {{"status", "stopped"}});
      } catch (const Error& e) {
        log()->warn("cannot record the stop: {}", e.what());
      }
    }
    comm.barrier();
  }

  bool is_me(const Fault& f) const { return f.node == ctx_.identity().node && f.slot == ctx_.identity().local_rank; }

  // The slow: faults of this worker in force at `step`: the product of their 1/F.
  double slowdown(std::int64_t step) const {
    double factor = 1;
    for (const Fault& f : config_.faults) {
      if (f.kind == Fault::Kind::kSlow && is_me(f) && step >= f.step && (f.until == 0 || step <= f.until)) {
        factor /= f.factor;
      }
    }
    return factor;
  }

  // A new generation: every rank hands the others its own speed record (mesh/plan/speed_tracker.h), so
  // that all plan from identical speeds whoever joined; rank 0 reads how often each node/slot was
  // evicted before (the strikes an eviction needs double with each).
  void share_speeds(const Membership& m, Communicator& comm) {
    workers_.clear();
    places_.clear();
    for (const auto& member : m.record.members) {
      for (int slot : member.slots) {
        workers_.push_back(member.node + "/" + member.incarnation + "/" + std::to_string(slot));
        places_.push_back({member.node, member.incarnation, slot});
      }
    }
    constexpr int kFields = 5;
    const mesh::SpeedRecord mine = speeds_.record(workers_[static_cast<std::size_t>(m.rank)]);
    const Tensor own = Tensor::from_vector<double>(
        {mine.recent[0], mine.recent[1], mine.recent[2], mine.planned, mine.strikes}, {kFields});
    const Tensor all = Tensor::zeros({kFields * std::int64_t{m.world_size}}, ops::DType::kF64);
    comm.allgather(own, all, std::vector<std::int64_t>(static_cast<std::size_t>(m.world_size), kFields));
    const double* x = all.data<double>();
    for (int r = 0; r < m.world_size; ++r) {
      const double* f = x + kFields * r;
      // Strikes count within a generation: a resize (an eviction among them) starts them again.
      speeds_.restore(workers_[static_cast<std::size_t>(r)], {.recent = {f[0], f[1], f[2]}, .planned = f[3], .strikes = 0});
    }
    last_compute_ms_ = -1;
    last_work_.clear();
    relative_.assign(static_cast<std::size_t>(m.world_size), 1.0);
    eviction_requested_ = false;
    kept_ = false;
    prior_evictions_.clear();
    if (lead(m)) {
      try {
        const auto values = ctx_.store()->multi_get({elastic::keys::kEvictions, elastic::keys::kConfig});
        if (values[0]) {
          for (const auto& [key, e] : elastic::decode_evictions(*values[0], elastic::keys::kEvictions)) {
            prior_evictions_[key] = e.count;
          }
        }
        if (values[1]) min_nodes_ = elastic::decode_job_config(*values[1], elastic::keys::kConfig).min_nodes;
      } catch (const Error& e) {
        log()->warn("cannot read the evictions record and the job's minimum size ({}): counting every worker as never "
                    "evicted",
                    e.what());
      }
    }
  }

  // The step before, as every rank measured it: the plans must have been identical; each rank's
  // compute time over its planned work is its speed. Rank 0 reports a rank that turns slow and asks
  // the leader to evict one that stayed slow.
  void observe_speeds(const Membership& m, const std::int64_t* agreed) {
    if (last_work_.empty()) return;  // the generation's first step: nothing measured yet
    const int world = m.world_size;
    for (int r = 1; r < world; ++r) {
      if (agreed[kAgreed * r + 3] != agreed[3]) {
        throw InvariantViolation("the ranks planned step " + std::to_string(step_) + " differently: rank " +
                                 std::to_string(r) + "'s plan digest " + std::to_string(agreed[kAgreed * r + 3]) +
                                 ", rank 0's " + std::to_string(agreed[3]));
      }
    }
    for (int r = 0; r < world; ++r) {
      const double planned = last_work_[static_cast<std::size_t>(r)];
      const double measured = std::max(static_cast<double>(agreed[kAgreed * r + 2]) / 1000.0, planned > 0 ? 1e-3 : 0.0);
      speeds_.report(workers_[static_cast<std::size_t>(r)], planned, measured);
    }
    relative_ = speeds_.end_step(workers_);
    if (!lead(m)) return;
    std::vector<elastic::StragglerRequest> requests;
    for (int r = 0; r < world; ++r) {
      const std::string& worker = workers_[static_cast<std::size_t>(r)];
      const Place& p = places_[static_cast<std::size_t>(r)];
      const std::int64_t strikes = speeds_.strikes(worker);
      const double speed = relative_[static_cast<std::size_t>(r)];
      if (strikes == 1) {
        log()->warn("step {}: rank {} ({}/{}) is a straggler: {:.2f} of the median speed", step_, r, p.node, p.slot, speed);
        report_event(m, "straggler", {{"rank", std::to_string(r)},
                                      {"node", p.node},
                                      {"slot", std::to_string(p.slot)},
                                      {"speed", fixed3(speed)},
                                      {"step", std::to_string(step_)}});
      }
      auto prior = prior_evictions_.find(elastic::eviction_key(p.node, p.slot));
      const std::int64_t before = prior == prior_evictions_.end() ? 0 : prior->second;
      const std::int64_t needed = std::int64_t{config_.straggler_strikes} << std::min<std::int64_t>(before, 20);
      if (strikes >= needed) {
        requests.push_back({.node = p.node, .incarnation = p.incarnation, .slot = p.slot, .rank = r, .speed = speed,
                            .step = step_, .cooldown = config_.cooldown});
      }
    }
    if (requests.empty() || !config_.evict_stragglers || eviction_requested_ || kept_) return;
    // Never below the job's minimum number of nodes: then the slow ranks stay, planned at their
    // speed (the leader refuses such an eviction too; asking would only cost a generation).
    std::set<std::string> remaining;
    for (std::size_t r = 0; r < places_.size(); ++r) {
      const bool leaving = std::any_of(requests.begin(), requests.end(), [&](const auto& q) { return q.rank == static_cast<int>(r); });
      if (!leaving) remaining.insert(places_[r].node);
    }
    if (static_cast<int>(remaining.size()) < min_nodes_) {
      kept_ = true;
      for (const auto& r : requests) {
        log()->warn("step {}: keeping straggler rank {} ({}/{}): evicting it would leave {} node(s), below the job's "
                    "minimum of {}",
                    step_, r.rank, r.node, r.slot, remaining.size(), min_nodes_);
        report_event(m, "evict_refused", {{"node", r.node},
                                          {"slot", std::to_string(r.slot)},
                                          {"reason", "slow"},
                                          {"speed", fixed3(r.speed)},
                                          {"why", "the job is at its minimum size"}});
      }
      return;
    }
    eviction_requested_ = true;
    for (const auto& r : requests) {
      log()->warn("step {}: asking the leader to evict rank {} ({}/{}): below {:.2f} of the median for {} steps", step_,
                  r.rank, r.node, r.slot, config_.straggler_threshold, speeds_.strikes(workers_[static_cast<std::size_t>(r.rank)]));
    }
    try {
      const bool written = ctx_.store()->commit(elastic::Transaction{}
                                                    .require(elastic::keys::kGeneration, std::to_string(m.generation))
                                                    .add(elastic::Write::set(elastic::keys::stragglers(m.generation),
                                                                             elastic::encode(requests), std::chrono::hours(1))));
      if (!written) log()->info("the eviction request came after a newer generation; not sent");
    } catch (const Error& e) {
      log()->warn("cannot send the eviction request: {}", e.what());
      eviction_requested_ = false;  // the next step tries again
    }
  }

  std::string speeds_text() const {
    std::string text;
    for (double speed : relative_) text += (text.empty() ? "" : ",") + fixed3(speed);
    return text;
  }

  // The faults of `step` that fire before it (`phase` none) or in its `phase`.
  void inject_faults(const Membership& m, std::int64_t step, std::optional<mesh::StepPhase> phase = std::nullopt) {
    for (std::size_t i = 0; i < config_.faults.size(); ++i) {
      const Fault& f = config_.faults[i];
      if (f.phase != phase) continue;
      if (f.kind == Fault::Kind::kThrottle && f.step == step && is_me(f)) {
        log()->warn("fault {}: limiting this worker to {} CPU(s) from step {}", f.spec, f.factor, step);
        try {
          throttle_self(f.factor);
        } catch (const Error& e) {
          log()->error("fault {}: {}", f.spec, e.what());
        }
      }
      if (!f.claimed_once() || f.rank != m.rank || f.step != step) continue;
      bool claimed = false;
      try {
        claimed = ctx_.store()->compare_and_set("fault:" + std::to_string(i), std::nullopt, f.spec);
      } catch (const Error& e) {
        log()->warn("fault {}: cannot claim it ({}); not firing", f.spec, e.what());
      }
      if (!claimed) continue;
      log()->warn("fault {}: firing at step {}{} on rank {}", f.spec, step,
                  phase ? std::string(" (") + mesh::phase_name(*phase) + ")" : std::string(), m.rank);
      switch (f.kind) {
        case Fault::Kind::kCrash:
          ::kill(::getpid(), SIGKILL);
          break;
        case Fault::Kind::kKillNode:
          if (ctx_.identity().agent_pid > 0) ::kill(ctx_.identity().agent_pid, SIGKILL);
          ::kill(::getpid(), SIGKILL);
          break;
        case Fault::Kind::kHang: {
          const pid_t parent = ::getpid();
          const pid_t waker = ::fork();
          if (waker == 0) {
            // Only async-signal-safe calls in the child of a threaded process.
            const auto ms = f.hang.count();
            timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000L};
            while (::nanosleep(&ts, &ts) != 0) {
            }
            ::kill(parent, SIGCONT);
            ::_exit(0);
          }
          ::raise(SIGSTOP);
          break;
        }
        case Fault::Kind::kSlow:
        case Fault::Kind::kThrottle:
          break;  // not claimed (above)
      }
    }
  }

  elastic::ElasticContext& ctx_;
  const TrainerConfig& config_;
  const std::atomic<bool>& stop_;
  elastic::JobState job_;
  ops::model::LlamaModel model_;
  checkpoint::FlatLayout layout_;
  data::BatchSource source_;
  mesh::CostModel cost_;
  std::vector<mesh::ZeroOptimizer::Range> no_decay_;
  checkpoint::CheckpointOptions ckpt_options_;

  // The training state this process holds, and what it is for.
  std::unique_ptr<mesh::ZeroOptimizer> zero_;
  std::int64_t step_ = 0;
  checkpoint::DataPosition position_;                        // after step_
  std::optional<checkpoint::DataPosition> prev_position_;     // after step_ - 1
  std::optional<checkpoint::DataPosition> pending_position_;  // after step_ + 1, while that step is in flight
  std::int64_t layout_generation_ = -1;  // the generation whose layout zero_ is in; -1: none valid
  // The step that failed on this rank after its loss and gradient norm were known: reported by the
  // next generation's rank 0 if recovery rolls it forward.
  struct InFlight {
    mesh::StepResult result;
    double ms = 0, lr = 0;
    int world_size = 0;
    std::int64_t step = 0;
  };
  std::optional<InFlight> in_flight_;
  bool save_rolled_forward_ = false;  // the generation starts by saving step_ (from_memory)
  int layout_rank_ = -1;                 // this rank's rank in it
  std::int64_t last_saved_step_ = -1;
  std::optional<SteadyClock::time_point> interrupted_;
  bool completed_ = false;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, created at its first step
  bool tensorboard_failed_ = false;

  // Speeds (share_speeds, observe_speeds). Every rank holds the same tracker contents.
  static constexpr int kAgreed = 4;  // per rank: stop, changed, compute µs, plan digest
  struct Place {
    std::string node, incarnation;
    int slot = 0;
  };
  mesh::SpeedTracker speeds_;
  WorkerMetrics metrics_;  // every rank, for its agent's /metrics
  std::vector<std::string> workers_;   // this generation's, in rank order
  std::vector<Place> places_;          // the same, as node, incarnation, slot
  std::vector<double> last_work_;      // the step before: each rank's planned cost at speed 1 (ms)
  std::uint64_t last_digest_ = 0;      // the step before: its plan's digest
  double last_compute_ms_ = -1;        // the step before: this rank's compute; < 0 none in this generation
  std::vector<double> relative_;       // each rank's speed relative to the median, last measured
  std::vector<double> last_plan_speeds_;
  std::map<std::string, std::int64_t> prior_evictions_;  // rank 0: evictions so far by node/slot
  bool eviction_requested_ = false;    // rank 0: already asked in this generation
  bool kept_ = false;                  // rank 0: kept its stragglers in this generation (minimum size)
  int min_nodes_ = 1;                  // rank 0: the job's minimum number of nodes
};

}  // namespace

TrainResult run_trainer(elastic::ElasticContext& ctx, const TrainerConfig& config, const std::atomic<bool>& stop) {
  config.validate();
  if (config.threads > 0) omp_set_num_threads(config.threads);
  Trainer trainer(ctx, config, stop);
  return trainer.run();
}

}  // namespace hdp::trainer
