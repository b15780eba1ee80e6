#include "trainer/trainer.h"

#include <omp.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/options.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/comm/gather_rows.h"
#include "mesh/plan/planned_step.h"
#include "mesh/step/distributed_step.h"
#include "mesh/step/replicas.h"
#include "ops/model/llama_model.h"
#include "trainer/checkpoint_group.h"
#include "trainer/checkpoint_reporting.h"
#include "trainer/data/batch_source.h"
#include "trainer/elastic_loop.h"
#include "trainer/fault_injection.h"
#include "trainer/recovery.h"
#include "trainer/step_reporter.h"
#include "trainer/straggler_monitor.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

using elastic::Membership;
using mesh::Communicator;

// What every rank contributes to the all-gather at each step boundary.
// The settings `hdp config set` may change while the job trains (elastic/control.h), as every
// rank holds them in its TrainerConfig.
struct Live {
  double straggler_threshold = 0;
  std::int64_t straggler_strikes = 0;
  bool evict_stragglers = false;
  std::int64_t cooldown_ms = 0, cooldown_max_ms = 0;
  std::int64_t checkpoint_every = 0, log_every = 0;

  static constexpr std::size_t kFields = 7;
  bool operator==(const Live&) const = default;

  static Live of(const TrainerConfig& c) {
    return {c.straggler_threshold, c.straggler_strikes, c.evict_stragglers, c.cooldown.base_ms, c.cooldown.max_ms,
            c.checkpoint_every, c.log_every};
  }
  // `c`'s values with those `s` holds instead.
  static Live of(const TrainerConfig& c, const elastic::LiveSettings& s) {
    Live l = of(c);
    if (s.straggler_threshold) l.straggler_threshold = *s.straggler_threshold;
    if (s.straggler_strikes) l.straggler_strikes = *s.straggler_strikes;
    if (s.evict_stragglers) l.evict_stragglers = *s.evict_stragglers;
    if (s.evict_cooldown_s) {
      l.cooldown_ms = std::max<std::int64_t>(1, std::llround(*s.evict_cooldown_s * 1000));
      l.cooldown_max_ms = std::max(l.cooldown_max_ms, l.cooldown_ms);
    }
    if (s.checkpoint_every) l.checkpoint_every = *s.checkpoint_every;
    if (s.log_every) l.log_every = *s.log_every;
    return l;
  }
  void apply_to(TrainerConfig& c) const {
    c.straggler_threshold = straggler_threshold;
    c.straggler_strikes = static_cast<int>(straggler_strikes);
    c.evict_stragglers = evict_stragglers;
    c.cooldown = {cooldown_ms, cooldown_max_ms};
    c.checkpoint_every = checkpoint_every;
    c.log_every = static_cast<int>(log_every);
  }
  std::array<std::int64_t, kFields> row() const {
    return {std::bit_cast<std::int64_t>(straggler_threshold), straggler_strikes, evict_stragglers ? 1 : 0, cooldown_ms,
            cooldown_max_ms, checkpoint_every, log_every};
  }
  static Live from_row(const std::int64_t* f) {
    return {std::bit_cast<double>(f[0]), f[1], f[2] != 0, f[3], f[4], f[5], f[6]};
  }
};

// What rank 0 read in the job's pending requests (elastic/control.h) with its last step report.
struct Asked {
  bool stop = false;        // `hdp stop`
  bool checkpoint = false;  // `hdp checkpoint`
  int drain_member = -1;    // `hdp drain`: the index of a member node of this generation
  int standby = 0;          // nodes standing by to take a leaving member's place
  Live live;                // the settings in force from the next step on (rank 0's)
};

struct Boundary {
  // per rank: job stop, leave, changed, compute µs, plan digest; rank 0 also: checkpoint asked
  // for, the member asked to drain + 1, the nodes standing by, and the live settings (Live::kFields)
  static constexpr std::size_t kFields = 8 + Live::kFields;
  bool stop = false;     // some rank was asked to stop the job
  bool checkpoint = false;  // rank 0 read a `hdp checkpoint` request
  int drained_member = -1;  // rank 0 read a `hdp drain` of this member
  int standby = 0;          // rank 0 read this many nodes standing by
  Live live;                // rank 0's settings: in force on every rank from this step on
  std::vector<bool> leaving;  // by rank: asked to leave (its node drains)
  bool changed = false;  // some rank saw a newer generation (or rank 0 asked for an eviction)
  std::vector<std::int64_t> compute_us;  // each rank's compute time of the step before
  std::vector<std::int64_t> digests;     // each rank's plan digest of the step before
};

Boundary agree(Communicator& comm, const StopRequest& request, bool changed, std::int64_t compute_us,
               std::uint64_t digest, const Asked& asked) {
  const bool stop = request.job.load() || asked.stop, leave = request.requested.load() && !stop;
  std::vector<std::int64_t> mine = {stop ? 1 : 0, leave ? 1 : 0, changed ? 1 : 0, compute_us,
                                    static_cast<std::int64_t>(digest), asked.checkpoint ? 1 : 0, asked.drain_member + 1,
                                    asked.standby};
  const auto live = asked.live.row();
  mine.insert(mine.end(), live.begin(), live.end());
  const std::vector<std::int64_t> rows = mesh::allgather_rows<std::int64_t>(comm, mine);
  Boundary b;
  for (std::size_t r = 0; r < rows.size() / Boundary::kFields; ++r) {
    const std::int64_t* row = rows.data() + Boundary::kFields * r;
    b.stop = b.stop || row[0] > 0;
    b.leaving.push_back(row[1] > 0);
    b.changed = b.changed || row[2] > 0;
    b.compute_us.push_back(row[3]);
    b.digests.push_back(row[4]);
    if (r == 0) {
      b.checkpoint = row[5] > 0;
      b.drained_member = static_cast<int>(row[6]) - 1;
      b.standby = static_cast<int>(row[7]);
      b.live = Live::from_row(row + 8);
    }
  }
  return b;
}

// The nodes that leave at a boundary: every node with a rank asked to leave (a drain takes the
// whole node), and how many of the generation's nodes stay.
struct Leave {
  std::set<std::string> nodes;
  int staying = 0;
};

Leave leaving_nodes(const Boundary& b, const std::vector<std::string>& node_of_rank, const elastic::Generation& record) {
  Leave leave;
  if (b.drained_member >= 0 && static_cast<std::size_t>(b.drained_member) < record.members.size()) {
    leave.nodes.insert(record.members[static_cast<std::size_t>(b.drained_member)].node);
  }
  std::set<std::string> all;
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) {
    all.insert(node_of_rank[r]);
    if (b.leaving[r]) leave.nodes.insert(node_of_rank[r]);
  }
  leave.staying = static_cast<int>(all.size() - leave.nodes.size());
  return leave;
}

std::string join(const std::set<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ",") + name;
  return text;
}

// Every rank plans every step from the same inputs: the plans of the step before must be equal.
void check_same_plans(const Boundary& b, std::int64_t step) {
  for (std::size_t r = 1; r < b.digests.size(); ++r) {
    if (b.digests[r] != b.digests[0]) {
      throw InvariantViolation("the ranks planned step " + std::to_string(step) + " differently: rank " +
                               std::to_string(r) + "'s plan digest " + std::to_string(b.digests[r]) +
                               ", rank 0's " + std::to_string(b.digests[0]));
    }
  }
}

// Rank r's node in the generation's membership.
std::vector<std::string> node_of_rank(const Membership& m) {
  std::vector<std::string> nodes(static_cast<std::size_t>(m.world_size));
  for (const auto& member : m.record.members) {
    for (std::size_t i = 0; i < member.slots.size(); ++i) nodes[static_cast<std::size_t>(member.first_rank) + i] = member.node;
  }
  return nodes;
}

// The job's minimum number of nodes, from its configuration in the store; nullopt when the store
// cannot be read now.
std::optional<int> read_min_nodes(elastic::Store& store) {
  try {
    if (auto text = store.get(elastic::keys::kConfig)) {
      return elastic::decode_job_config(*text, elastic::keys::kConfig).min_nodes;
    }
    return 1;
  } catch (const StoreUnavailable&) {
    return std::nullopt;
  }
}

// The orchestration of trainer.h: generations, and the steps of each. The state lives in
// Recovery; speeds and evictions in StragglerMonitor; what is reported in StepReporter.
class Trainer {
 public:
  // `config` is this worker's: the live settings (`hdp config set`) change it in place.
  Trainer(elastic::ElasticContext& ctx, TrainerConfig& config, const StopRequest& stop)
      : ctx_(ctx),
        config_(config),
        stop_(stop),
        setup_(build_setup(config)),
        model_(config.model, ops::DType::kF32, ops::Device::kCpu, config.precision),
        source_(setup_.data, config.seed),
        checkpoints_{.root = config.checkpoint_dir,
                     .model_config = config.model_json(),
                     .data_fingerprint = setup_.data->fingerprint(),
                     .keep = config.keep},
        events_(ctx.store()),
        monitor_(config, ctx.store(), events_),
        reporter_(config, ctx.store(), events_, ctx.identity().metrics_file),
        recovery_(ctx, config, setup_, checkpoints_, model_, reporter_, events_, monitor_),
        faults_(config.faults, ctx.identity(), ctx.store()) {
    if (checkpoints()) checkpoint::validate(checkpoints_);
  }

  TrainResult run() {
    // The job never runs below its minimum size, so a configuration that does not fit it never can.
    min_nodes_ = read_min_nodes(*ctx_.store());
    check_world(config_, setup_.cost, min_nodes_.value_or(1) * ctx_.identity().nproc_per_node);
    LoopOptions loop;
    loop.connect_timeout = config_.timeout;
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
    replicas_.reset();
    if (config_.redundant_shards) place_replicas(m, comm);

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
      // A step rolled forward at a checkpoint step was never saved: save it now (every rank: the
      // decision comes from the plan, the same on all).
      if (recovery_.take_rolled_forward_save() && saver) recovery_.save(*saver);
      return steps(m, comm, saver ? &*saver : nullptr, furthest);
    } catch (const RecoverableError&) {
      // The generation is lost: a save in flight cannot complete either; let it fail now rather
      // than after its timeout (~AsyncSaver waits for it).
      if (ckpt_comm) ckpt_comm->abort("the generation was abandoned");
      throw;
    }
  }

  // Redundant shards (config_.redundant_shards): every shard sent whole to its holder, so that the
  // copies start equal to the originals whatever happened before (a restore, renumbered ranks).
  void place_replicas(const Membership& m, Communicator& comm) {
    replicas_ = mesh::place_replicas(recovery_.optimizer(), model_.params(), node_of_rank(m),
                                       recovery_.step(), comm, config_.timeout);
    if (m.rank == 0) {
      log()->info("generation {}: every optimizer shard copied to a rank of another node{}", m.generation,
                  replicas_->complete() ? std::string() : std::string(" (none: the job runs on one node)"));
    }
  }

  // A mismatch is logged as an error naming both ranks; training goes on.
  void verify_replicas(const Membership& m, Communicator& comm) {
    const mesh::ReplicaCheck check = mesh::verify_replicas(recovery_.optimizer(), comm);
    if (m.rank != 0) return;
    for (const auto& [owner, holder] : check.wrong) {
      log()->error("step {}: the copy of rank {}'s optimizer shard held by rank {} differs from the original",
                   recovery_.step(), owner, holder);
    }
    if (check.wrong.empty()) {
      log()->info("step {}: {} optimizer shard copies verified equal to their originals", recovery_.step(), check.checked);
    }
  }

  BodyResult steps(const Membership& m, Communicator& comm, checkpoint::AsyncSaver* saver, std::int64_t furthest) {
    if (m.rank == 0) reporter_.read_settings_now();  // the live settings from this generation's first step
    bool first = true;
    std::uint64_t digest = 0;  // the plan of the step before
    while (recovery_.step() < config_.steps) {
      // One all-gather per step: whether any rank must stop or saw a new generation (the ranks
      // leave together, at the same boundary: one rank leaving alone would break the others' next
      // collective and cost them the state of the step they were in), and every rank's compute
      // time and plan digest of the step before (speeds; identical plans checked). Rank 0 that
      // asked for an eviction leaves with the others: the leader answers with a new generation.
      const Boundary boundary = agree(comm, stop_, ctx_.changed(m) || monitor_.eviction_requested(),
                                      monitor_.compute_us(), digest, asked(m));
      apply_live_settings(m, boundary.live);
      const Leave leave = leaving_nodes(boundary, node_of_rank(m), m.record);
      // A node standing by takes a leaving member's place in the next generation (the leader picks
      // it): only what neither the staying nodes nor the standbys make up is a leave below MIN.
      if (!boundary.stop && !leave.nodes.empty() && leave.staying + boundary.standby < min_nodes_.value_or(1)) {
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
      if (!first) check_same_plans(boundary, recovery_.step());
      monitor_.observe(m, recovery_.step(), boundary.compute_us);
      const std::int64_t next_step = recovery_.step() + 1;
      faults_.fire(m.rank, next_step);

      const auto started = SteadyClock::now();
      checkpoint::DataPosition next = recovery_.position();
      const data::GlobalBatch batch = source_.next(next, config_.batch_tokens);
      const mesh::PlannedStep planned = plan(batch, m);
      monitor_.planned(planned);
      digest = planned.digest;

      mesh::StepOptions options;
      const double lr = config_.lr.at(next_step);
      options.adamw = {.lr = static_cast<float>(lr),
                       .beta1 = config_.beta1,
                       .beta2 = config_.beta2,
                       .weight_decay = config_.weight_decay};
      options.max_grad_norm = config_.max_grad_norm;
      options.timeout = config_.timeout;
      options.slowdown = faults_.slowdown(next_step);
      options.on_phase = [this, &m, next_step](mesh::StepPhase phase) { faults_.fire(m.rank, next_step, phase); };
      mesh::DistributedStep step(model_, recovery_.optimizer(), comm, options);
      recovery_.step_started(next);
      mesh::StepResult result;
      try {
        result = step.run(planned, batch.sequences);
      } catch (const RecoverableError&) {
        recovery_.step_failed(step, ms_since(started), lr, m.world_size);
        throw;
      }
      monitor_.computed(result.compute_ms);
      recovery_.step_completed();
      const double step_ms = ms_since(started);

      if (first) {
        first = false;
        reporter_.recovered(m, comm, recovery_.step(), furthest);
      }
      const std::int64_t done = recovery_.step();
      std::optional<EvalFigures> eval;
      if (config_.eval_every > 0 && (done % config_.eval_every == 0 || done == config_.steps)) eval = evaluate(m, comm);
      reporter_.step(m, done, result, step_ms, lr, recovery_.position(), monitor_.figures(), 0, eval ? &*eval : nullptr);
      if (config_.verify_replicas_every > 0 && done % config_.verify_replicas_every == 0) verify_replicas(m, comm);
      if (saver && (done % config_.checkpoint_every == 0 || done == config_.steps)) recovery_.save(*saver);
    }
    if (saver && !saver->wait()) log()->error("the final checkpoint at step {} failed on this rank", recovery_.step());
    if (m.rank == 0) reporter_.completed(m, recovery_.step());
    comm.barrier();  // the outcome is written before any rank exits (an agent reads it)
    completed_ = true;
    return BodyResult::kFinished;
  }

  // A balanced plan of `batch` for generation `m`, with the speeds the monitor measured.
  mesh::PlannedStep plan(const data::GlobalBatch& batch, const Membership& m) const {
    mesh::PlanRequest request;
    request.lengths = batch.lengths();
    request.speeds = monitor_.plan_speeds(m.world_size);
    request.capacity = config_.capacity;
    request.context = config_.context;
    request.cost = setup_.cost;
    return mesh::plan_step(std::move(request), mesh::Strategy::kBalanced);
  }

  // The loss of the held-out batch (--eval-data) across this generation: every rank, the same
  // batch (built once, the first eval_tokens tokens of the eval data in the seed's order), planned
  // for this world like a step.
  EvalFigures evaluate(const Membership& m, Communicator& comm) {
    const auto started = SteadyClock::now();
    if (!eval_batch_) {
      data::BatchSource source(setup_.eval, config_.seed);
      source.log_refusals(m.rank == 0);
      std::int64_t available = 0;
      for (std::uint64_t p = 0; p < setup_.eval->piece_count() && available < config_.eval_tokens; ++p)
        available += setup_.eval->piece_length(p);
      checkpoint::DataPosition position;
      eval_batch_ = source.next(position, std::min(available, config_.eval_tokens));
    }
    const mesh::PlannedStep planned = plan(*eval_batch_, m);
    mesh::StepOptions options;
    options.timeout = config_.timeout;
    mesh::DistributedStep step(model_, recovery_.optimizer(), comm, options);
    const mesh::DistributedStep::Evaluation result = step.evaluate(planned, eval_batch_->sequences);
    return {.loss = result.loss(), .tokens = eval_batch_->tokens, .ms = ms_since(started)};
  }

  // Nodes leave at this boundary, the others go on (trainer.h, step 3). Every rank runs this with
  // the same inputs. The staying ranks rebuild from the copies of the leaving ranks' shards; a
  // shard whose copy leaves too (or has none) is saved first, by every rank, at this step.
  BodyResult let_leave(const Membership& m, const Leave& leave, checkpoint::AsyncSaver* saver) {
    const std::vector<std::string> nodes = node_of_rank(m);
    bool covered = replicas_ && replicas_->complete();
    for (std::size_t r = 0; covered && r < nodes.size(); ++r) {
      if (!leave.nodes.contains(nodes[r])) continue;
      const int holder = replicas_->holder[r];
      covered = holder >= 0 && !leave.nodes.contains(nodes[static_cast<std::size_t>(holder)]);
    }
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
      for (const auto& member : m.record.members) {
        const auto* drain = leave.nodes.contains(member.node) ? reporter_.requests().drain_of(member.node, member.incarnation)
                                                              : nullptr;
        if (drain) {
          elastic::finish_request(*ctx_.store(), "drain", drain->id, "left",
                                  {{"step", std::to_string(step)}, {"incarnation", member.incarnation}}, member.node);
        }
      }
    }
    if (!mine) return BodyResult::kGenerationChanged;  // wait for the generation without them
    log()->info("worker {}/{}: this node leaves at step {}", ctx_.identity().node, ctx_.identity().local_rank, step);
    left_ = true;
    return BodyResult::kFinished;
  }

  // The settings rank 0 sent in force from this step on, on every rank at once (each logs it).
  void apply_live_settings(const Membership& m, const Live& live) {
    if (live == Live::of(config_)) return;
    const std::int64_t step = recovery_.step();
    live.apply_to(config_);
    monitor_.threshold_changed();
    const std::string in_force = describe_live_settings(config_);
    log()->info("worker {}/{}: live settings in force from step {}: {}", ctx_.identity().node,
                ctx_.identity().local_rank, step + 1, in_force);
    if (m.rank == 0) reporter_.settings_applied(m, step + 1, in_force);
  }

  // Rank 0: what its last step report read in the pending requests, as the boundary carries it.
  Asked asked(const Membership& m) const {
    Asked a;
    if (m.rank != 0) return a;
    a.live = Live::of(config_, reporter_.settings());
    const elastic::ControlRequests& requests = reporter_.requests();
    a.stop = requests.stop.has_value();
    a.checkpoint = reporter_.checkpoint_request().has_value();
    a.standby = reporter_.standby();
    for (std::size_t i = 0; i < m.record.members.size(); ++i) {
      if (requests.drain_of(m.record.members[i].node, m.record.members[i].incarnation)) {
        a.drain_member = static_cast<int>(i);  // one node per boundary; the next at the next
        break;
      }
    }
    return a;
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
    if (m.rank != 0) return;
    log()->info("step {}: checkpoint requested by {}: {}{}", step, reporter_.checkpoint_request()->by, outcome,
                path.empty() ? "" : " at " + path);
    reporter_.checkpoint_done(reporter_.checkpoint_request()->id, step, outcome, path);
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
      if (const auto& stop = reporter_.requests().stop) {
        elastic::finish_request(*ctx_.store(), "stop", stop->id, "stopped",
                                {{"step", std::to_string(step)}, {"checkpoint", checkpoint}});
      }
      // A drain that would have left fewer than MIN nodes became this stop.
      for (const auto& member : m.record.members) {
        if (const auto* d = reporter_.requests().drain_of(member.node, member.incarnation)) {
          elastic::finish_request(*ctx_.store(), "drain", d->id, "job_stopped",
                                  {{"step", std::to_string(step)}, {"incarnation", member.incarnation}}, member.node);
        }
      }
    }
    comm.barrier();
  }

  elastic::ElasticContext& ctx_;
  TrainerConfig& config_;
  const StopRequest& stop_;
  const TrainingSetup setup_;
  ops::model::LlamaModel model_;
  data::BatchSource source_;
  std::optional<data::GlobalBatch> eval_batch_;  // the held-out batch, once built
  const checkpoint::CheckpointOptions checkpoints_;
  EventLog events_;
  StragglerMonitor monitor_;
  StepReporter reporter_;
  Recovery recovery_;
  FaultInjector faults_;
  std::optional<int> min_nodes_;  // the job's minimum number of nodes, once read
  std::optional<mesh::BuddyPlan> replicas_;  // this generation's copies, once placed
  bool completed_ = false;
  bool left_ = false;  // this worker's node left the job
};

}  // namespace

TrainResult run_trainer(elastic::ElasticContext& ctx, const TrainerConfig& config, const StopRequest& stop) {
  config.validate();
  if (config.threads > 0) omp_set_num_threads(config.threads);
  TrainerConfig live = config;  // the live settings change this copy
  Trainer trainer(ctx, live, stop);
  return trainer.run();
}

}  // namespace hdp::trainer
