#include "trainer/recovery.h"

#include "checkpoint/checksum.h"
#include "elastic/job_keys.h"
#include "trainer/hf_model.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/restorer.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "trainer/checkpoint_group.h"
#include "trainer/checkpoint_reporting.h"
#include "mesh/comm/gather_rows.h"
#include "trainer/data/batch_source.h"
#include "trainer/step_boundary.h"

namespace hdp::trainer {
namespace {

using elastic::Membership;
using mesh::Communicator;
using ops::Tensor;

// What the checkpoint keeps as a rank's "RNG state": the trainer draws nothing at random after the
// seeded initialisation (the data order is a function of the seed and the epoch), so the seed is
// the whole of it; a restore under another seed would change the data order, and says so.
std::vector<std::uint8_t> rng_bytes(std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(sizeof seed);
  std::memcpy(bytes.data(), &seed, sizeof seed);
  return bytes;
}

}  // namespace

std::unique_ptr<mesh::ZeroOptimizer> Recovery::make_optimizer(const Membership& m) const {
  const ops::DType wire = model_.precision() == ops::model::Precision::kBF16 ? ops::DType::kBF16 : ops::DType::kF32;
  return std::make_unique<mesh::ZeroOptimizer>(setup_.layout.total(), m.rank, m.world_size, ops::DType::kF32,
                                               model_.params().device(), wire);
}

Recovery::Recovery(elastic::ElasticContext& ctx, const TrainerConfig& config, const TrainingSetup& setup,
                   const checkpoint::CheckpointOptions& checkpoints, ops::model::LlamaModel& model,
                   StepReporter& reporter, EventLog& events, const StragglerMonitor& speeds)
    : ctx_(ctx),
      config_(config),
      setup_(setup),
      checkpoints_(checkpoints),
      model_(model),
      reporter_(reporter),
      events_(events),
      speeds_(speeds),
      job_(ctx.store()),
      identity_(job_identity(config, setup)) {}

std::int64_t Recovery::start(const Membership& m, Communicator& comm) {
  const auto began = SteadyClock::now();
  save_rolled_forward_ = false;  // from_memory() says; a generation abandoned before its save leaves none
  const std::vector<mesh::HeldState> states = mesh::exchange_states(held_state(), comm, config_.timeout);
  std::vector<bool> holders(states.size());  // whose shards belong to a layout: they hold the job's state
  for (std::size_t r = 0; r < states.size(); ++r) holders[r] = states[r].layout >= 0;
  check_identities(m, states, holders);
  const mesh::ReshardPlan plan = mesh::plan_reshard(states, setup_.layout.total());
  const std::int64_t furthest = std::max<std::int64_t>(plan.furthest, 0);
  if (plan.possible) {
    // The lowest rank that held the job's state: a survivor, whose settings are the job's in force.
    first_holder_ = static_cast<int>(std::find(holders.begin(), holders.end(), true) - holders.begin());
    from_memory(m, comm, plan, began);
    return furthest;
  }
  // Some rank held a state, but not every shard survived: the checkpoint is the fallback.
  const bool fallback = std::any_of(holders.begin(), holders.end(), [](bool h) { return h; });
  if (fallback && m.rank == 0) {
    log()->warn("generation {}: cannot recover from memory: {}; restoring from the checkpoint", m.generation, plan.why);
  }
  restore(m, comm, furthest, fallback ? plan.why : std::string(), holders);
  return furthest;
}

static_assert(std::tuple_size_v<decltype(mesh::HeldState::job)> == JobIdentity::kPartCount,
              "the held state carries every part of the job's identity");

// A rank that differs from the job is refused (trainer/job_identity.h); a rank holds the job's
// state when its shards belong to a layout. The lowest rank of the job's side records whom it
// refused.
void Recovery::check_identities(const Membership& m, const std::vector<mesh::HeldState>& states,
                                const std::vector<bool>& holders) {
  std::vector<JobIdentity> ids(states.size());
  for (std::size_t r = 0; r < states.size(); ++r) ids[r].digest = states[r].job;
  act_on(m, check_one_job(ids, holders, node_of_rank(m), m.rank));
}

// A verdict of trainer/job_identity.h on this rank: refused (exit 5), no job (exit 2), or the job's
// side abandoning the generation to go on without the refused, whose lowest rank records them.
void Recovery::act_on(const Membership& m, const JobCheck& check) {
  switch (check.outcome) {
    case JobCheck::Outcome::kSame: return;
    case JobCheck::Outcome::kRefused: throw RefusedByJob(check.message);
    case JobCheck::Outcome::kNoJob: throw InvalidArgument(check.message);
    case JobCheck::Outcome::kOthersRefused:
      if (m.rank == check.recorder) {
        log()->error("generation {}: {}", m.generation, check.message);
        events_.record(m, "node_refused", {{"nodes", join(check.refused_nodes)}, {"differs_in", check.parts}});
      }
      throw RecoverableError(check.message);
  }
}

// What this rank holds for the agreement of start(): every (shard, step) of its optimizer, the
// step its parameters hold whole, and the data positions it knows.
mesh::HeldState Recovery::held_state() const {
  mesh::HeldState s;
  s.job = identity_.digest;
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
void Recovery::from_memory(const Membership& m, Communicator& comm, const mesh::ReshardPlan& plan,
                           SteadyClock::time_point began) {
  auto next = make_optimizer(m);
  next->set_no_decay(setup_.no_decay);
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
  reporter_.restored_from("memory");
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
  // No rank completed the step the plan went on from (alike on every rank: the plan's).
  if (step_ > plan.furthest) settle_rolled_forward(m, comm);
  in_flight_.reset();
  if (m.rank == 0) {
    const std::int64_t lost = std::max<std::int64_t>(plan.furthest - plan.step, 0);
    log()->info("generation {}: continuing from memory at step {} on {} rank(s) (from {} shard(s) of generation {}): "
                "{:.1f} MiB moved between ranks in {:.2f} s, {} step(s) lost, nothing read from disk",
                m.generation, step_, m.world_size, plan.old_world, plan.layout,
                static_cast<double>(total) / (1 << 20), seconds, lost);
    events_.record(m, "continue", {{"step", std::to_string(step_)},
                                   {"world_size", std::to_string(m.world_size)},
                                   {"from_world_size", std::to_string(plan.old_world)},
                                   {"source", "memory"},
                                   {"bytes_moved", std::to_string(total)},
                                   {"disk_bytes_read", "0"},
                                   {"lost_steps", std::to_string(lost)},
                                   {"seconds", fixed3(seconds)}});
  }
}

// The step in flight was rolled forward: no rank completed it, so none reported it. One all-gather
// of what each rank had computed of it before the failure (its loss and norm, the same on every
// rank that knew them: all-reduced; its own times), with the vote of the lowest rank that held the
// job's state on whether it is a checkpoint step (take_rolled_forward_save). Rank 0 reports the
// step from its own figures, or from the lowest rank's that had them: a rank 0 that did not run
// the step (a restarted worker, a joiner) reports it as that rank measured it, on the world size
// it ran on.
void Recovery::settle_rolled_forward(const Membership& m, Communicator& comm) {
  enum Column : std::size_t {
    kHas, kLossSum, kLossTokens, kStepTokens, kRankTokens, kGradNorm, kComputeMs, kWaitMs, kOffloaded, kMs, kLr,
    kWorld, kSave, kColumns
  };
  std::vector<double> row(kColumns, 0.0);
  if (in_flight_ && in_flight_->step == step_) {
    const mesh::StepResult& r = in_flight_->result;
    row[kHas] = 1;
    row[kLossSum] = r.loss_sum;
    row[kLossTokens] = static_cast<double>(r.loss_tokens);
    row[kStepTokens] = static_cast<double>(r.step_tokens);
    row[kRankTokens] = static_cast<double>(r.rank_tokens);
    row[kGradNorm] = r.grad_norm;
    row[kComputeMs] = r.compute_ms;
    row[kWaitMs] = r.comm_wait_ms;
    row[kOffloaded] = static_cast<double>(r.offloaded_bytes);
    row[kMs] = in_flight_->ms;
    row[kLr] = in_flight_->lr;
    row[kWorld] = in_flight_->world_size;
  }
  row[kSave] = m.rank == first_holder_ && step_ % config_.checkpoint_every == 0 ? 1 : 0;
  const std::vector<double> rows = mesh::allgather_rows<double>(comm, row, config_.timeout);
  save_rolled_forward_ = rows[static_cast<std::size_t>(first_holder_) * kColumns + kSave] == 1;
  if (m.rank != 0) return;
  for (int r = 0; r < m.world_size; ++r) {
    const double* f = rows.data() + static_cast<std::size_t>(r) * kColumns;
    if (f[kHas] != 1) continue;
    mesh::StepResult result;
    result.loss_sum = f[kLossSum];
    result.loss_tokens = static_cast<std::int64_t>(f[kLossTokens]);
    result.step_tokens = static_cast<std::int64_t>(f[kStepTokens]);
    result.rank_tokens = static_cast<std::int64_t>(f[kRankTokens]);
    result.grad_norm = f[kGradNorm];
    result.compute_ms = f[kComputeMs];
    result.comm_wait_ms = f[kWaitMs];
    result.offloaded_bytes = static_cast<std::int64_t>(f[kOffloaded]);
    if (r != 0) {
      log()->info("step {} was rolled forward; rank 0 did not compute it: reported from rank {}'s figures", step_, r);
    }
    reporter_.step(m, step_, result, f[kMs], f[kLr], position_, speeds_.figures(), static_cast<int>(f[kWorld]));
    return;
  }
  log()->warn("step {} was rolled forward; its loss is known to no rank (each failed before it was reduced): not "
              "reported",
              step_);
}

// No plan from memory: every rank restores its shard from the newest valid checkpoint (or the
// seed). `why`: why memory could not serve (empty: no rank held a state, e.g. the job starts).
void Recovery::restore(const Membership& m, Communicator& comm, std::int64_t furthest, const std::string& why,
                       const std::vector<bool>& holders) {
  const auto started = SteadyClock::now();
  layout_generation_ = -1;  // until the restore completed
  prev_position_.reset();
  pending_position_.reset();
  zero_ = make_optimizer(m);
  zero_->set_no_decay(setup_.no_decay);
  std::optional<checkpoint::RestoredProgress> restored;
  if (checkpoints() && may_restore(m, comm)) {
    const checkpoint::ShardTarget target = host_.for_restore(shard_range(), shard_buffers());
    CheckpointReporter reporter(ctx_.store(), m.generation, m.rank);
    checkpoint::CheckpointOptions options = checkpoints_;
    options.hooks = reporter.hooks();
    CommunicatorGroup group(comm, config_.timeout);
    restored = checkpoint::restore_latest(options, setup_.layout, group, target);
    if (restored) host_.upload();
  }
  if (restored) {
    step_ = restored->step;
    position_ = restored->data;
    check_data(m, *restored);
    zero_->set_steps_taken(step_);
    if (!restored->rng_states.empty() && restored->rng_states[0] != rng_bytes(config_.seed)) {
      log()->warn("the checkpoint {} was written under another --seed: the initial weights came from it, but the "
                  "data order from here on follows this run's seed",
                  restored->path.string());
    }
    // Every rank read only its own shard of the parameters: gather the others.
    comm.allgather(model_.params().view(zero_->offset(), {zero_->count()}), model_.params(), zero_->counts());
  } else {
    initialise(m);
    // The digests travel as i64 (the communicator's integer type), their bits unchanged.
    const std::vector<std::int64_t> rows =
        mesh::allgather_rows<std::int64_t>(comm, {static_cast<std::int64_t>(init_weights_)}, config_.timeout);
    act_on(m, check_initial_weights(std::vector<std::uint64_t>(rows.begin(), rows.end()), holders, node_of_rank(m),
                                    m.rank));
  }
  reporter_.restored_from(restored ? "checkpoint" : (config_.init_from.empty() ? "seed" : "init_from"));
  last_saved_step_ = restored ? step_ : -1;
  layout_generation_ = m.generation;
  layout_rank_ = m.rank;
  const double seconds = ms_since(started) / 1000.0;
  // What this rank read: its range of the parameters and of both optimizer moments, fp32.
  const std::int64_t read = restored ? 3 * zero_->count() * static_cast<std::int64_t>(sizeof(float)) : 0;
  if (restored) reporter_.metrics().checkpoint_restored(seconds, static_cast<std::uint64_t>(read));
  const std::int64_t total_read = comm.allreduce_sum(read, config_.timeout);
  if (m.rank == 0) report_restore(m, restored, furthest, why, seconds, total_read);
}

// No checkpoint to restore: the seed's weights, or --init-from's (trainer/hf_model.h; a job that
// resumes from its own checkpoint ignores them), at step 0.
void Recovery::initialise(const Membership& m) {
  init_weights_ = 0;
  if (config_.init_from.empty()) {
    model_.init(config_.seed);
  } else {
    // Read on the host (in place on the CPU), then copied to the model's device.
    const Tensor& params = model_.params();
    const Tensor host = params.device() == ops::Device::kCpu ? params : Tensor::empty(params.shape(), params.dtype());
    const std::span<float> flat(host.data<float>(), static_cast<std::size_t>(host.numel()));
    load_hf_weights(config_.init_from, config_.model, flat);
    if (host.raw() != params.raw()) params.copy_from(host);
    init_weights_ = checkpoint::xxh3(std::span<const float>(flat));
    if (m.rank == 0) {
      log()->info("initial weights from {} (xxh3 {} of {} parameters)", config_.init_from.string(), checkpoint::to_hex(init_weights_),
                  flat.size());
    }
  }
  step_ = 0;
  position_ = {};
}

// Rank 0: the restore's log line and its `restore` event.
void Recovery::report_restore(const Membership& m, const std::optional<checkpoint::RestoredProgress>& restored,
                              std::int64_t furthest, const std::string& why, double seconds, std::int64_t total_read) {
  // The steps to redo: past the furthest any rank held, the last step the job reported (the job
  // state keeps it across a whole-job restart, which no rank's memory survives).
  try {
    const auto state = ctx_.store()->hash_get_all(elastic::keys::kState);
    if (auto it = state.find("step"); it != state.end()) furthest = std::max<std::int64_t>(furthest, std::stoll(it->second));
  } catch (const std::exception& e) {
    log()->warn("the last reported step is not known ({}): the restore event counts the steps lost from the ranks' "
                "memory only",
                e.what());
  }
  log()->info("generation {}: {} at step {} on {} rank(s), {} training, in {:.2f} s{}", m.generation,
              restored ? "restored " + restored->path.string() : std::string("initialised from the seed"), step_,
              m.world_size, ops::model::precision_name(model_.precision()), seconds,
              furthest > step_ ? " (" + std::to_string(furthest - step_) + " step(s) to redo)" : std::string());
  elastic::Fields fields = {{"step", std::to_string(step_)},
                            {"checkpoint", restored ? restored->path.filename().string() : std::string("none")},
                            {"lost_steps", std::to_string(std::max<std::int64_t>(furthest - step_, 0))},
                            {"world_size", std::to_string(m.world_size)},
                            {"source", restored ? "checkpoint" : (config_.init_from.empty() ? "seed" : "init_from")},
                            {"disk_bytes_read", std::to_string(total_read)},
                            {"seconds", fixed3(seconds)}};
  if (!why.empty()) fields.emplace_back("reason", why);
  if (!restored && !config_.init_from.empty()) {
    fields.emplace_back("init_from", config_.init_from.string());
    fields.emplace_back("weights_xxh3", checkpoint::to_hex(init_weights_));
  }
  events_.record(m, "restore", std::move(fields));
}

// --resume: always, except for a job that starts without it and has never reported a step, whose
// checkpoint directory must then hold none (a later rollback would otherwise load another run's).
void Recovery::check_data(const Membership& m, const checkpoint::RestoredProgress& restored) {
  const data::RecordedData recorded = data::compare_recorded(restored.data_fingerprint, *setup_.data);
  if (recorded == data::RecordedData::kSame || recorded == data::RecordedData::kNotRecorded) return;
  const std::string now = data::order_fingerprint(*setup_.data);
  const bool earlier_order = recorded == data::RecordedData::kEarlierOrder;
  const std::string what =
      "the checkpoint " + restored.path.string() +
      (earlier_order ? " was written over --data " + quote_value(config_.data) + " in an earlier data order (" +
                           "a shuffle of each epoch; now " + std::string(data::kOrderScheme) + ")"
                     : " was written over other data than --data " + quote_value(config_.data)) +
      " (data fingerprint " + restored.data_fingerprint + ", now " + now + ")";
  if (!config_.allow_data_change) {
    throw InvalidArgument(what + (earlier_order
                                      ? ": its data position would mean other pieces in this order; resume with "
                                        "--allow-data-change (the rest of the epoch then follows this order)"
                                      : ": its data position would not mean the same here; train on the data it was "
                                        "written over, or resume anyway with --allow-data-change"));
  }
  const checkpoint::DataPosition saved = position_;
  if (position_.sample > setup_.data->piece_count()) position_ = {position_.epoch + 1, 0};
  if (m.rank != 0) return;
  log()->warn("{}; resuming anyway (--allow-data-change) at epoch {}, sample {}", what, position_.epoch,
              position_.sample);
  events_.record(m, "data_changed", {{"step", std::to_string(step_)},
                                     {"checkpoint", restored.path.filename().string()},
                                     {"was", restored.data_fingerprint},
                                     {"now", now},
                                     {"saved_position", std::to_string(saved.epoch) + ":" + std::to_string(saved.sample)},
                                     {"position", std::to_string(position_.epoch) + ":" + std::to_string(position_.sample)}});
}

bool Recovery::may_restore(const Membership& m, Communicator& comm) {
  if (config_.resume) return true;
  std::int64_t fresh = 0;
  if (m.rank == 0) {
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

void Recovery::step_started(const checkpoint::DataPosition& next) {
  pending_position_ = next;  // until the step completed on this rank (held_state)
  in_flight_.reset();
}

void Recovery::step_failed(const mesh::DistributedStep& step, double ms, double lr, int world_size) {
  // What the step had computed, in case recovery rolls it forward (from_memory reports it).
  if (step.loss_known() && step.grad_norm_known()) in_flight_ = InFlight{step.partial(), ms, lr, world_size, step_ + 1};
}

void Recovery::step_completed() {
  ++step_;
  prev_position_ = position_;
  position_ = *pending_position_;
  pending_position_.reset();
}

checkpoint::ShardRange Recovery::shard_range() const { return {zero_->offset(), zero_->offset() + zero_->count()}; }

HostShard::Buffers Recovery::shard_buffers() const {
  const checkpoint::ShardRange range = shard_range();
  return {model_.params().reshape({model_.params().numel()}).view(range.begin, {range.size()}), zero_->exp_avg(),
          zero_->exp_avg_sq()};
}

void Recovery::save(checkpoint::AsyncSaver& saver) {
  checkpoint::ShardSnapshot snapshot;
  snapshot.range = shard_range();
  snapshot.buffers = host_.for_save(snapshot.range, shard_buffers());
  snapshot.step = step_;
  snapshot.rng_state = rng_bytes(config_.seed);
  snapshot.data = position_;
  saver.save(snapshot);
  last_saved_step_ = step_;
}

bool Recovery::take_rolled_forward_save() { return std::exchange(save_rolled_forward_, false); }

}  // namespace hdp::trainer
