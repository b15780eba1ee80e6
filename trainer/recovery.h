// File: trainer/recovery.h
//
// The training state a worker holds across generations, and how a generation gets it (step 2 of
// trainer/trainer.h): the ZeRO-1 optimizer (its shard, the copies it holds, the kept triples), the
// step completed, the data positions around it, the layout (generation and rank) the optimizer is
// cut for, the last step saved, and what the step in flight had computed when it failed.
//
// start() is the generation's agreement: two all-gathers of what every rank holds
// (mesh/step/reshard.h), which carry what every rank must share to train one job: a rank that
// differs is refused first (trainer/job_identity.h). When every shard of the newest layout survives at a common step T, the new
// world's shards (and, where a buffer is not whole at T, the parameters) are rebuilt from memory,
// point to point: nothing is read from disk and no completed step is lost (event `continue`). Else
// every rank restores its shard from the newest valid checkpoint, resharded to the new world size,
// or starts from the seed (event `restore`, with the reason memory could not serve).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/async_saver.h"
#include "checkpoint/options.h"
#include "checkpoint/state.h"
#include "checkpoint/flat_layout.h"
#include "elastic/elastic_context.h"
#include "elastic/job_state.h"
#include "mesh/comm/communicator.h"
#include "mesh/step/distributed_step.h"
#include "mesh/step/reshard.h"
#include "mesh/step/zero.h"
#include "ops/model/llama_model.h"
#include "trainer/host_shard.h"
#include "trainer/job_identity.h"
#include "trainer/step_reporter.h"
#include "trainer/straggler_monitor.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {

class Recovery {
 public:
  // Every argument must outlive this object.
  Recovery(elastic::ElasticContext& ctx, const TrainerConfig& config, const TrainingSetup& setup,
           const checkpoint::CheckpointOptions& checkpoints, ops::model::LlamaModel& model, StepReporter& reporter,
           EventLog& events, const StragglerMonitor& speeds);

  // Collective, at a generation's start: the state from the ranks' memory, or restored. Returns the
  // furthest step any rank had completed before (the steps a rollback or a restore loses).
  std::int64_t start(const elastic::Membership& m, mesh::Communicator& comm);

  mesh::ZeroOptimizer& optimizer() { return *zero_; }
  std::int64_t step() const { return step_; }
  const checkpoint::DataPosition& position() const { return position_; }

  // A step's life on this rank: it starts with the data position it ends at; it fails (a peer lost)
  // after it may have computed its loss and gradient norm (kept in case recovery rolls it forward);
  // or it completes.
  void step_started(const checkpoint::DataPosition& next);
  void step_failed(const mesh::DistributedStep& step, double ms, double lr, int world_size);
  void step_completed();

  // Hands this rank's shard at the current step to `saver` (a memcpy; the write runs on its thread).
  void save(checkpoint::AsyncSaver& saver);
  bool saved() const { return last_saved_step_ == step_; }
  // Once after start(), on every rank alike: whether the step rolled forward (never saved) is a
  // checkpoint step, which the generation then saves first. The lowest rank that held the job's
  // state decided it in start(), by the interval in force for the job, and told the others in the
  // rolled-forward step's all-gather (settle_rolled_forward): a rank that has just started (a
  // restarted worker, rank 0 included, or a joiner) holds its own --checkpoint-every until the
  // first step boundary hands it the live settings (`hdp config set`), and a save that some ranks
  // start and others do not never commits.
  bool take_rolled_forward_save();

 private:
  mesh::HeldState held_state() const;
  void check_identities(const elastic::Membership& m, const std::vector<mesh::HeldState>& states,
                        const std::vector<bool>& holders);
  void act_on(const elastic::Membership& m, const JobCheck& check);
  void from_memory(const elastic::Membership& m, mesh::Communicator& comm, const mesh::ReshardPlan& plan,
                   SteadyClock::time_point began);
  void settle_rolled_forward(const elastic::Membership& m, mesh::Communicator& comm);
  // `holders`: by rank, whether it held the job's state (the initial weights' check follows them).
  void restore(const elastic::Membership& m, mesh::Communicator& comm, std::int64_t furthest, const std::string& why,
               const std::vector<bool>& holders);
  bool may_restore(const elastic::Membership& m, mesh::Communicator& comm);
  // A checkpoint written over other data (its data fingerprint differs from this job's): refused
  // (InvalidArgument, exit 2 on every rank alike), or with --allow-data-change logged and kept,
  // its position moved to the next epoch when it lies past this data's.
  void check_data(const elastic::Membership& m, const checkpoint::RestoredProgress& restored);
  void initialise(const elastic::Membership& m);
  void report_restore(const elastic::Membership& m, const std::optional<checkpoint::RestoredProgress>& restored,
                      std::int64_t furthest, const std::string& why, double seconds, std::int64_t total_read);
  bool checkpoints() const { return !checkpoints_.root.empty(); }
  // This rank's ZeRO-1 shard as a checkpoint holds it: its range of the parameters and both AdamW
  // moments (where they live; host_ gives the checkpoint its host spans).
  checkpoint::ShardRange shard_range() const;
  HostShard::Buffers shard_buffers() const;
  // This rank's optimizer in generation `m` (its wire dtype the model's precision: bf16 under mixed
  // precision).
  std::unique_ptr<mesh::ZeroOptimizer> make_optimizer(const elastic::Membership& m) const;

  elastic::ElasticContext& ctx_;
  const TrainerConfig& config_;
  const TrainingSetup& setup_;
  const checkpoint::CheckpointOptions& checkpoints_;
  ops::model::LlamaModel& model_;
  StepReporter& reporter_;
  EventLog& events_;
  const StragglerMonitor& speeds_;
  elastic::JobState job_;
  const JobIdentity identity_;  // of the command line's configuration, once

  std::unique_ptr<mesh::ZeroOptimizer> zero_;
  HostShard host_;
  std::int64_t step_ = 0;
  checkpoint::DataPosition position_;                        // after step_
  std::optional<checkpoint::DataPosition> prev_position_;     // after step_ - 1
  std::optional<checkpoint::DataPosition> pending_position_;  // after step_ + 1, while that step is in flight
  std::int64_t layout_generation_ = -1;  // the generation whose layout zero_ is in; -1: none valid
  int layout_rank_ = -1;                 // this rank's rank in it
  std::int64_t last_saved_step_ = -1;
  // The step that failed on this rank after its loss and gradient norm were known: reported by the
  // next generation's rank 0 if recovery rolls it forward (settle_rolled_forward).
  struct InFlight {
    mesh::StepResult result;
    double ms = 0, lr = 0;
    int world_size = 0;
    std::int64_t step = 0;
  };
  std::optional<InFlight> in_flight_;
  bool save_rolled_forward_ = false;  // start() rolled forward a checkpoint step (settle_rolled_forward)
  int first_holder_ = 0;              // in start(): the lowest rank that held the job's state
  // xxh3 of the weights --init-from loaded (0: the seed's), for the restore event and the check
  // that every rank started from the same (check_initial_weights)
  std::uint64_t init_weights_ = 0;
};

}  // namespace hdp::trainer
