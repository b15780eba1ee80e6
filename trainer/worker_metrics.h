// File: trainer/worker_metrics.h
//
// A worker's Prometheus metrics (metrics/registry.h), handed to its agent through the file named
// by HDP_AGENT_METRICS_FILE (elastic/worker_env.h): after every step the whole registry is written as
// JSON to a temporary file and renamed over it, so the agent, reading at each scrape, always sees
// one complete document. The agent adds the node and slot labels; a worker exports no labels of
// its own (its rank changes at every resize: it is a gauge, hdp_train_rank).
//
// Families (see docs/observability.md):
//   hdp_train_step, hdp_train_loss, hdp_train_tokens_per_second, hdp_train_learning_rate,
//   hdp_train_grad_norm, hdp_train_eval_loss (once evaluated), hdp_train_world_size, hdp_train_generation, hdp_train_rank,
//   hdp_train_speed_ratio (gauges); hdp_train_steps_total, hdp_train_tokens_total,
//   hdp_train_recoveries_total, hdp_train_lost_steps_total, hdp_checkpoint_saved_bytes_total,
//   hdp_checkpoint_restored_bytes_total (counters); hdp_train_step_seconds,
//   hdp_train_compute_seconds, hdp_train_comm_wait_seconds, hdp_train_recovery_seconds,
//   hdp_checkpoint_save_seconds, hdp_checkpoint_restore_seconds (histograms).
// The job's goodput (elastic/goodput.h), from rank 0 only, so that a sum over the job's series
// counts each once: hdp_job_effective_training_time_ratio (gauge, as of rank 0's last report;
// removed when the worker is no longer rank 0), hdp_job_steps_recomputed_total (counter),
// hdp_job_recovery_seconds{kind} (histogram, kRecoveryBuckets).
// Thread-safe (a checkpoint commit is recorded on the saver's thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "metrics/registry.h"

namespace hdp::trainer {

// hdp_job_recovery_seconds' buckets: a recovery from memory takes seconds, a restart minutes.
inline const std::vector<double> kRecoveryBuckets = {0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};

struct StepMetrics {
  std::int64_t step = 0;
  double loss = 0, tokens_per_s = 0, lr = 0, grad_norm = 0;
  double step_s = 0, compute_s = 0, comm_wait_s = 0;
  std::int64_t tokens = 0;  // trained in this step, whole job
  int world_size = 0, rank = 0;
  std::int64_t generation = 0;
  double speed = 1;  // this rank's filtered speed over the median
};

class WorkerMetrics {
 public:
  // `file` empty: metrics are kept but never written (no agent asked for them).
  explicit WorkerMetrics(std::filesystem::path file);

  void step(const StepMetrics& m);
  // The held-out batch's loss (--eval-data) was computed.
  void evaluated(double loss);
  void recovered(double seconds, std::int64_t lost_steps);
  // Rank 0: the job's ETTR after its step report; whether that step was computed twice.
  void goodput(double ettr, bool recomputed);
  // The worker is not rank 0 (any more): its ETTR gauge goes.
  void not_goodput_reporter();
  // Rank 0: the job recovered in `seconds`, its state from `kind` (memory, checkpoint, seed, init_from).
  void job_recovered(const std::string& kind, double seconds);
  void checkpoint_saved(double seconds, std::uint64_t bytes);
  void checkpoint_restored(double seconds, std::uint64_t bytes);

  // Writes the file (temporary + rename); false, logged once, when it cannot. Training goes on.
  bool publish();

  const metrics::Registry& registry() const { return registry_; }

 private:
  const std::filesystem::path file_;
  metrics::Registry registry_;
  bool warned_ = false;
};

}  // namespace hdp::trainer
