#include "trainer/trainer.h"

#include <omp.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/options.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/plan/planned_step.h"
#include "mesh/step/distributed_step.h"
#include "ops/model/llama_model.h"
#include "trainer/checkpoint_group.h"
#include "trainer/checkpoint_reporting.h"
#include "trainer/data/batch_source.h"
#include "trainer/elastic_loop.h"
#include "trainer/evaluation.h"
#include "trainer/fault_injection.h"
#include "trainer/job_requests.h"
#include "trainer/recovery.h"
#include "trainer/shard_copies.h"
#include "trainer/step_boundary.h"
#include "trainer/step_reporter.h"
#include "trainer/straggler_monitor.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

using elastic::Membership;
using mesh::Communicator;

// The orchestration of trainer.h: generations, and the steps of each. The state lives in
// Recovery; speeds and evictions in StragglerMonitor; what is reported in StepReporter.
class Trainer {
 public:
  // `config` is this worker's: the live settings (`hdp config set`) change it in place.
  Trainer(elastic::ElasticContext& ctx, TrainerConfig& config, const StopRequest& stop,
          std::optional<PreparedWorker> prepared)
      : ctx_(ctx),
        config_(config),
        stop_(stop),
        setup_(prepared ? std::move(prepared->setup) : build_setup(config)),
        model_(prepared ? take_model(prepared->model, config) : make_model(config)),
        source_(setup_.data, config.seed),
        eval_(setup_, config, [this](const data::GlobalBatch& batch, const Membership& m) { return plan(batch, m); }),
        checkpoints_{.root = config.checkpoint_dir,
                     .model_config = config.model_json(),
                     .data_fingerprint = data::order_fingerprint(*setup_.data),
                     .keep = config.keep},
        events_(ctx.store()),
        monitor_(config, ctx.store(), events_),
        reporter_(config, ctx.store(), events_, ctx.identity().metrics_file),
        recovery_(ctx, config, setup_, checkpoints_, model_, reporter_, events_, monitor_),
        faults_(config.faults, ctx.identity(), ctx.store()),
        requests_(*ctx.store(), config, config, reporter_,
                  ctx.identity().node + "/" + std::to_string(ctx.identity().local_rank)) {
    if (checkpoints()) checkpoint::validate(checkpoints_);
  }

  TrainResult run() {
    // The job never runs below its minimum size, so a configuration that does not fit it never can.
    min_nodes_ = read_min_nodes(*ctx_.store());
    check_world(config_, setup_.cost, min_nodes_.value_or(1) * ctx_.identity().nproc_per_node);
    LoopOptions loop;
    loop.connect_timeout = config_.timeout;
    if (config_.device == ops::Device::kCuda) {
      loop.device = {.device = ops::Device::kCuda, .device_id = std::to_string(config_.device_ordinal)};
    }
    if (config_.announced_device) loop.device = *config_.announced_device;
    loop.data_plane = config_.data_plane_hooks;
    loop.cooldown = config_.cooldown;
    run_elastic_loop(ctx_, loop, stop_.requested, [this](const Membership& m, Communicator& comm) {
      try {
        const BodyResult result = generation(m, comm);
        if (result == BodyResult::kGenerationChanged) reporter_.interrupted();
        return result;
      } catch (const RecoverableError&) {
        reporter_.interrupted();
        throw;
      }
    });
    // The loop ends when the job completed (here, or before this worker joined), was stopped, or
    // this worker's node left.
    if (completed_) return TrainResult::kCompleted;
    return left_ ? TrainResult::kLeft : TrainResult::kStopped;
  }

 private:
  bool checkpoints() const { return !config_.checkpoint_dir.empty(); }

  BodyResult generation(const Membership& m, Communicator& comm) {
    check_world(config_, setup_.cost, m.world_size);
    source_.log_refusals(m.rank == 0);
    if (!min_nodes_) min_nodes_ = read_min_nodes(*ctx_.store());
    std::unique_ptr<Communicator> ckpt_comm;
    // The saver's channel connects on its first save: a generation's bootstrap is then the
    // training channel's, plus one record (mesh/comm/communicator_factory.h).
    if (checkpoints()) {
      ckpt_comm = mesh::connect_communicator(ctx_.bootstrap(m), "ckpt", config_.timeout, mesh::Connect::kOnFirstUse);
    }

    const std::int64_t furthest = recovery_.start(m, comm);
    monitor_.start_generation(m, comm, min_nodes_.value_or(1));
    copies_.start_generation(config_.redundant_shards, m, comm, recovery_.optimizer(), model_.params(),
                             recovery_.step(), config_.timeout);

    // Async: a stalled store must not hold the next save, and so training, back.
    CheckpointReporter reporter(ctx_.store(), m.generation, m.rank, /*async=*/true);
    std::optional<CommunicatorGroup> group;
    std::optional<checkpoint::AsyncSaver> saver;
    if (checkpoints()) {
      checkpoint::CheckpointOptions options = checkpoints_;
      options.hooks = reporter.hooks();
      options.hooks.on_commit = [this, report = options.hooks.on_commit](const checkpoint::CommitInfo& info) {
        reporter_.metrics().checkpoint_saved(info.seconds, info.bytes);
        if (report) report(info);
      };
      group.emplace(*ckpt_comm, config_.timeout);
      saver.emplace(options, setup_.layout, *group);
    }
    try {
      // A step rolled forward at a checkpoint step was never saved: save it now (every rank, as the
      // lowest survivor decides).
      if (recovery_.take_rolled_forward_save() && saver) recovery_.save(*saver);
      return steps(m, comm, saver ? &*saver : nullptr, furthest);
    } catch (const RecoverableError&) {
      // The generation is lost: a save in flight cannot complete either; let it fail now rather
      // than after its timeout (~AsyncSaver waits for it).
      if (ckpt_comm) ckpt_comm->abort("the generation was abandoned");
      throw;
    }
  }

  BodyResult steps(const Membership& m, Communicator& comm, checkpoint::AsyncSaver* saver, std::int64_t furthest) {
    if (m.rank == 0) reporter_.read_settings_now();  // the live settings from this generation's first step
    bool first = true;
    std::uint64_t digest = 0;  // the plan of the step before
    while (recovery_.step() < config_.steps) {
      if (faults_.hold(recovery_.step() + 1, [&] { return stop_.requested.load() || ctx_.changed(m); }) && m.rank == 0) {
        reporter_.read_requests_now();
      }
      // Rank 0 that asked for an eviction leaves with the others: the leader answers with a new
      // generation.
      const Boundary boundary =
          agree(comm, row_of(stop_, ctx_.changed(m) || monitor_.eviction_requested(), monitor_.compute_us(), digest,
                             requests_.asked(m)),
                requests_.flags());
      if (const auto end = act_on(boundary, m, comm, saver)) return *end;
      if (!first) check_same_plans(boundary, recovery_.step());
      monitor_.observe(m, recovery_.step(), boundary.compute_us);

      const StepRun run = run_step(m, comm, digest);
      if (first) {
        first = false;
        reporter_.recovered(m, comm, recovery_.step(), furthest);
      }
      const std::int64_t done = recovery_.step();
      std::optional<EvalFigures> eval;
      if (eval_.due(done)) eval = eval_.run(m, comm, model_, recovery_.optimizer());
      reporter_.step(m, done, run.result, run.ms, run.lr, recovery_.position(), monitor_.figures(), 0,
                     eval ? &*eval : nullptr);
      if (config_.verify_replicas_every > 0 && done % config_.verify_replicas_every == 0) {
        copies_.verify(m, comm, recovery_.optimizer(), done);
      }
      if (saver && (done % config_.checkpoint_every == 0 || done == config_.steps)) recovery_.save(*saver);
    }
    if (saver && !saver->wait()) log()->error("the final checkpoint at step {} failed on this rank", recovery_.step());
    if (m.rank == 0) reporter_.completed(m, recovery_.step());
    comm.barrier();  // the outcome is written before any rank exits (an agent reads it)
    completed_ = true;
    return BodyResult::kFinished;
  }

  // What the boundary decided before the next step (step_boundary.h): the live settings in force,
  // a stop, nodes leaving, a new generation, a checkpoint asked for; nullopt: the step goes on.
  std::optional<BodyResult> act_on(const Boundary& boundary, const Membership& m, Communicator& comm,
                                   checkpoint::AsyncSaver* saver) {
    if (requests_.apply_live_settings(m, boundary.live, recovery_.step())) monitor_.threshold_changed();
    const Leave leave = leaving_nodes(boundary, node_of_rank(m), m.record);
    if (leaves_below_min(boundary, leave, min_nodes_.value_or(1))) {
      if (m.rank == 0) {
        log()->info("step {}: node(s) {} leaving would leave {} node(s) and {} standing by, below the job's minimum "
                    "of {}: the job stops",
                    recovery_.step(), join(leave.nodes), leave.staying, boundary.standby, min_nodes_.value_or(1));
      }
      drain(m, comm, saver);
      return BodyResult::kFinished;
    }
    if (boundary.stop) {
      drain(m, comm, saver);
      return BodyResult::kFinished;
    }
    if (!leave.nodes.empty()) return let_leave(m, leave, saver);
    if (boundary.changed) return BodyResult::kGenerationChanged;
    if (boundary.checkpoint) checkpoint_on_request(m, saver);
    return std::nullopt;
  }

  struct StepRun {
    mesh::StepResult result;
    double lr = 0, ms = 0;
  };

  // The next step: its batch, planned for this generation and run (faults injected where asked).
  StepRun run_step(const Membership& m, Communicator& comm, std::uint64_t& digest) {
    const std::int64_t next_step = recovery_.step() + 1;
    faults_.fire(m.rank, next_step, std::nullopt, &comm);
    const auto started = SteadyClock::now();
    reporter_.step_started();
    checkpoint::DataPosition next = recovery_.position();
    const data::GlobalBatch batch = source_.next(next, config_.batch_tokens);
    const mesh::PlannedStep planned = plan(batch, m);
    monitor_.planned(planned);
    digest = planned.digest;

    mesh::StepOptions options;
    StepRun run;
    run.lr = config_.lr.at(next_step);
    options.adamw = {.lr = static_cast<float>(run.lr),
                     .beta1 = config_.beta1,
                     .beta2 = config_.beta2,
                     .weight_decay = config_.weight_decay};
    options.max_grad_norm = config_.max_grad_norm;
    options.timeout = config_.timeout;
    options.slowdown = faults_.slowdown(next_step);
    options.on_phase = [this, &m, next_step](mesh::StepPhase phase) { faults_.fire(m.rank, next_step, phase); };
    mesh::DistributedStep step(model_, recovery_.optimizer(), comm, options);
    recovery_.step_started(next);
    try {
      run.result = step.run(planned, batch.sequences);
    } catch (const RecoverableError&) {
      recovery_.step_failed(step, ms_since(started), run.lr, m.world_size);
      throw;
    }
    monitor_.computed(run.result.compute_ms);
    recovery_.step_completed();
    run.ms = ms_since(started);
    return run;
  }

  // A balanced plan of `batch` for generation `m`, with the speeds the monitor measured.
  mesh::PlannedStep plan(const data::GlobalBatch& batch, const Membership& m) const {
    mesh::PlanRequest request;
    request.lengths = batch.lengths();
    request.speeds = monitor_.plan_speeds(m.world_size);
    request.capacity = config_.capacity;
    request.context = config_.context;
    request.cost = setup_.cost;
    request.offload = plans_offload(config_, setup_.cost);
    return mesh::plan_step(std::move(request), mesh::Strategy::kBalanced);
  }

  // Nodes leave at this boundary, the others go on (trainer.h, step 3). Every rank runs this with
  // the same inputs. The staying ranks rebuild from the copies of the leaving ranks' shards; a
  // shard whose copy leaves too (or has none) is saved first, by every rank, at this step.
  BodyResult let_leave(const Membership& m, const Leave& leave, checkpoint::AsyncSaver* saver) {
    const std::vector<std::string> nodes = node_of_rank(m);
    const bool covered = copies_.cover(leave.nodes, nodes);
    const std::int64_t step = recovery_.step();
    if (!covered && saver && !recovery_.saved()) {
      recovery_.save(*saver);
      if (!saver->wait()) log()->error("the checkpoint at step {} before node(s) {} leave failed on this rank", step, join(leave.nodes));
    }
    const bool mine = leave.nodes.contains(nodes[static_cast<std::size_t>(m.rank)]);
    if (m.rank == 0) {
      log()->info("step {}: node(s) {} leave; the job goes on with {} node(s){}", step, join(leave.nodes), leave.staying,
                  covered ? ", from the copies in memory" : (saver ? ", from a checkpoint at this step" : ""));
      events_.record(m, "nodes_leave", {{"step", std::to_string(step)}, {"nodes", join(leave.nodes)},
                                        {"from", covered ? "memory" : (saver ? "checkpoint" : "none")}});
      requests_.finish_drains(m, leave.nodes, "left", step);
    }
    if (!mine) return BodyResult::kGenerationChanged;  // wait for the generation without them
    log()->info("worker {}/{}: this node leaves at step {}", ctx_.identity().node, ctx_.identity().local_rank, step);
    left_ = true;
    return BodyResult::kFinished;
  }

  // `hdp checkpoint` (rank 0 read the request): every rank saves the step it completed (unless it
  // just did) and waits for the commit; rank 0 reports the outcome and removes the request.
  void checkpoint_on_request(const Membership& m, checkpoint::AsyncSaver* saver) {
    const std::int64_t step = recovery_.step();
    std::string outcome = "no_checkpoint_dir", path;
    if (saver) {
      if (!recovery_.saved()) recovery_.save(*saver);
      outcome = saver->wait() ? "saved" : "failed";
      path = std::filesystem::absolute(config_.checkpoint_dir / checkpoint::step_dir_name(step)).string();
    }
    if (m.rank == 0) requests_.checkpoint_taken(step, outcome, path);
  }

  // A stop was agreed: a final checkpoint (unless the step was just saved), then the job's state.
  void drain(const Membership& m, Communicator& comm, checkpoint::AsyncSaver* saver) {
    const std::int64_t step = recovery_.step();
    if (m.rank == 0) log()->info("stop requested: the ranks stop at step {}", step);
    bool saved = true;
    if (saver) {
      if (!recovery_.saved()) recovery_.save(*saver);
      saved = saver->wait();
      if (!saved) log()->error("the final checkpoint at step {} failed on this rank", step);
    }
    if (m.rank == 0) {
      const std::string checkpoint = saver ? (saved ? std::to_string(step) : "failed") : "none";
      reporter_.stopped(m, step, checkpoint);
      requests_.finish_stop(step, checkpoint);
      requests_.finish_drains(m, std::nullopt, "job_stopped", step);  // a drain below MIN became this stop
    }
    comm.barrier();
  }

  elastic::ElasticContext& ctx_;
  TrainerConfig& config_;
  const StopRequest& stop_;
  const TrainingSetup setup_;
  ops::model::LlamaModel model_;
  data::BatchSource source_;
  HeldOutEvaluation eval_;
  const checkpoint::CheckpointOptions checkpoints_;
  EventLog events_;
  StragglerMonitor monitor_;
  StepReporter reporter_;
  Recovery recovery_;
  FaultInjector faults_;
  JobRequests requests_;
  std::optional<int> min_nodes_;  // the job's minimum number of nodes, once read
  ShardCopies copies_;  // the redundant optimizer shards
  bool completed_ = false;
  bool left_ = false;  // this worker's node left the job
};

}  // namespace

TrainResult run_trainer(elastic::ElasticContext& ctx, const TrainerConfig& config, const StopRequest& stop,
                        std::optional<PreparedWorker> prepared) {
  config.validate();
  if (config.threads > 0) omp_set_num_threads(config.threads);
  TrainerConfig live = config;  // the live settings change this copy
  delay_setup(config.faults, ctx.identity());
  Trainer trainer(ctx, live, stop, std::move(prepared));
  return trainer.run();
}

}  // namespace hdp::trainer
