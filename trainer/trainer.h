// File: trainer/trainer.h
//
// `hdp train`: the elastic HDP trainer. One process per rank, started by an agent; it trains the
// LLaMA model over whatever ranks the current generation has (docs/architecture.md, "The trainer").
// trainer.cc is the orchestration below; the training state and step 2 are trainer/recovery.h's,
// the boundary of step 3 trainer/step_boundary.h's, the requests and live settings acted on there
// trainer/job_requests.h's, the redundant shards trainer/shard_copies.h's, the held-out loss
// trainer/evaluation.h's, speeds and evictions trainer/straggler_monitor.h's, what is reported
// trainer/step_reporter.h's, the injected faults trainer/fault_injection.h's, and what the
// configuration builds (data, cost model, checkpoint layout) trainer/training_setup.h's.
//
// Per generation (trainer/elastic_loop.h runs the outer loop and builds the "main" communicator):
//   1. the checkpoint writer's own communicator ("ckpt" channel) is connected;
//   2. the ranks agree how to start (mesh/step/reshard.h: two all-gathers of what each holds in
//      memory): when every shard of the newest layout survives at a common step T (its owner or
//      the copy on another node, at the step completed or, for the step in flight, kept from
//      before the update), the new world's shards and, where needed, the parameters are rebuilt
//      from memory point to point: no step completed anywhere is lost and nothing is read from
//      disk (a node lost, a worker crashed, a node joined, the store restarted, ranks renumbered).
//      Otherwise every rank restores its ZeRO-1 shard from the newest valid checkpoint, resharded
//      to the new world size (checkpoint/restorer.h), and all-gathers the parameters (the
//      `restore` event says why memory could not serve); with no checkpoint, it starts from the
//      seed at step 0. With the redundant shards (the default) the copies are then placed
//      (mesh/step/replicas.h).
//   3. steps: at each boundary the ranks all-gather their requests and whether any of them saw a
//      newer generation (so that all leave at the same boundary, none in the middle of a step):
//        - a job stop (StopRequest::job: SIGUSR1, from `scancel --signal` or an agent asked to stop
//          the job) on any rank stops every rank at this step (below);
//        - a node leaving (a leave: SIGTERM/SIGINT, what an agent's drain sends) takes every rank
//          of the leaving nodes out at this step while the others go on without them, from
//          memory: they wait for the generation that no longer has those nodes (their agents
//          deregister once their workers are out) and rebuild the shards from the copies on
//          other nodes (step 2). Shards whose copy would leave too are saved first (a checkpoint
//          at this step, so the next generation loses no step). When what stays would be below
//          the job's minimum number of nodes, the leave becomes a job stop;
//      then the global
//      batch of the step (trainer/data/batch_source.h: a function of the data position and the
//      token budget, the same on every rank and for every world size) is planned with the balanced
//      strategy over the generation's ranks (one mesh::PlannedStep, mesh/plan/planned_step.h) and
//      run by mesh::DistributedStep. Rank 0 prints a line,
//      reports step, loss, tokens/s, step time and the learning rate to the job state (fenced by
//      the generation), and every `checkpoint_every` steps all ranks hand their shard to the
//      AsyncSaver (staging is a memcpy; the write runs on the saver's thread).
//   4. a lost or frozen peer (PeerLost, TimeoutError) abandons the generation (elastic_loop.h); what
//      the step in flight had changed stays described by the optimizer's versions (mesh/step/zero.h),
//      so step 2 of the next generation can roll it back or forward.
// At the last step every rank saves a final checkpoint, rank 0 marks the job completed, and all
// return kCompleted. A stop request saves a final checkpoint (unless the step was just saved) and
// returns kStopped: the job resumes from it with the same data position.
#pragma once

#include <atomic>
#include <optional>

#include "elastic/elastic_context.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {

enum class TrainResult { kCompleted, kStopped, kLeft };

// What this worker's signals asked for (cli/train_command.cc's handlers set them; lock-free atomics,
// so a signal handler may). `requested` is set by both, and is what the loops that wait look at.
struct StopRequest {
  std::atomic<bool> requested{false};  // a leave or a job stop
  std::atomic<bool> job{false};        // a job stop (SIGUSR1); else a leave of this worker's node
};

// Blocks until the job completed, a stop was agreed, or this worker's node left. Throws InvalidArgument for a configuration
// this job cannot run (config.validate(), check_world() against the job's minimum size, a
// checkpoint of another model shape), FatalError when every committed checkpoint is corrupt.
// `prepared`: prepare_worker() made beforehand (a standby worker's, elastic/worker_env.h, for local
// rank 0's placement: its model is taken only when built for this worker's device and precision);
// nullopt: all made here.
TrainResult run_trainer(elastic::ElasticContext& ctx, const TrainerConfig& config, const StopRequest& stop,
                        std::optional<PreparedWorker> prepared = std::nullopt);

}  // namespace hdp::trainer
