#include "trainer/worker_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/log.h"

namespace hdp::trainer {

using metrics::Type;

WorkerMetrics::WorkerMetrics(std::filesystem::path file) : file_(std::move(file)) {
  auto& r = registry_;
  r.describe("hdp_train_step", Type::kGauge, "Last completed training step");
  r.describe("hdp_train_loss", Type::kGauge, "Mean token loss of the last step over the global batch");
  r.describe("hdp_train_tokens_per_second", Type::kGauge, "Tokens of the global batch per second of the last step");
  r.describe("hdp_train_learning_rate", Type::kGauge, "Learning rate of the last step");
  r.describe("hdp_train_grad_norm", Type::kGauge, "Gradient norm of the last step, before clipping");
  r.describe("hdp_train_eval_loss", Type::kGauge, "Mean token loss of the held-out batch (--eval-data) at its last evaluation");
  r.describe("hdp_train_world_size", Type::kGauge, "Ranks in the worker's generation");
  r.describe("hdp_train_generation", Type::kGauge, "The worker's generation");
  r.describe("hdp_train_rank", Type::kGauge, "The worker's rank in its generation");
  r.describe("hdp_train_speed_ratio", Type::kGauge, "The rank's filtered speed over the median rank's (1: typical)");
  r.describe("hdp_train_steps_total", Type::kCounter, "Steps this worker completed (a redone step counts again)");
  r.describe("hdp_train_tokens_total", Type::kCounter, "Tokens of the global batches of the steps this worker completed");
  r.describe("hdp_train_recoveries_total", Type::kCounter, "Interruptions (resizes, failures) after which training resumed");
  r.describe("hdp_train_lost_steps_total", Type::kCounter, "Completed steps lost to rollbacks and redone");
  r.describe("hdp_checkpoint_saved_bytes_total", Type::kCounter, "Bytes of the checkpoints committed (rank 0 reports them)");
  r.describe("hdp_checkpoint_restored_bytes_total", Type::kCounter, "Bytes of checkpoint shards this rank restored");
  r.describe("hdp_train_step_seconds", Type::kHistogram, "Wall time of a training step");
  r.describe("hdp_train_compute_seconds", Type::kHistogram, "Compute time of the rank in a step");
  r.describe("hdp_train_comm_wait_seconds", Type::kHistogram, "Time the rank waited on communication in a step");
  r.describe("hdp_train_recovery_seconds", Type::kHistogram,
             "From the interruption to the first step completed after it (the slowest rank's view)");
  r.describe("hdp_checkpoint_save_seconds", Type::kHistogram, "From the start of a checkpoint write to its commit");
  r.describe("hdp_checkpoint_restore_seconds", Type::kHistogram, "Restoring this rank's state at a generation start");
  r.describe("hdp_job_effective_training_time_ratio", Type::kGauge,
             "The job's productive time (its kept steps) over its wall time since its first step (rank 0)");
  r.describe("hdp_job_steps_recomputed_total", Type::kCounter, "Steps rank 0 computed a second time (after a rollback)");
  r.describe("hdp_job_recovery_seconds", Type::kHistogram,
             "From an interruption to the job's first step after it, by how the state came back (rank 0)",
             kRecoveryBuckets);
  // Counters exist from the start at 0, so that their first increase is one (rate() and
  // increase() need a sample before it).
  for (const char* counter : {"hdp_train_steps_total", "hdp_train_tokens_total", "hdp_train_recoveries_total",
                              "hdp_train_lost_steps_total", "hdp_checkpoint_saved_bytes_total",
                              "hdp_checkpoint_restored_bytes_total", "hdp_job_steps_recomputed_total"}) {
    r.add_counter(counter, {}, 0);
  }
}

void WorkerMetrics::step(const StepMetrics& m) {
  auto& r = registry_;
  r.set_gauge("hdp_train_step", {}, static_cast<double>(m.step));
  r.set_gauge("hdp_train_loss", {}, m.loss);
  r.set_gauge("hdp_train_tokens_per_second", {}, m.tokens_per_s);
  r.set_gauge("hdp_train_learning_rate", {}, m.lr);
  r.set_gauge("hdp_train_grad_norm", {}, m.grad_norm);
  r.set_gauge("hdp_train_world_size", {}, m.world_size);
  r.set_gauge("hdp_train_generation", {}, static_cast<double>(m.generation));
  r.set_gauge("hdp_train_rank", {}, m.rank);
  r.set_gauge("hdp_train_speed_ratio", {}, m.speed);
  r.add_counter("hdp_train_steps_total", {}, 1);
  r.add_counter("hdp_train_tokens_total", {}, static_cast<double>(m.tokens));
  r.observe("hdp_train_step_seconds", {}, m.step_s);
  r.observe("hdp_train_compute_seconds", {}, m.compute_s);
  r.observe("hdp_train_comm_wait_seconds", {}, m.comm_wait_s);
}

void WorkerMetrics::evaluated(double loss) { registry_.set_gauge("hdp_train_eval_loss", {}, loss); }

void WorkerMetrics::recovered(double seconds, std::int64_t lost_steps) {
  registry_.add_counter("hdp_train_recoveries_total", {}, 1);
  registry_.add_counter("hdp_train_lost_steps_total", {}, static_cast<double>(lost_steps));
  registry_.observe("hdp_train_recovery_seconds", {}, seconds);
}

void WorkerMetrics::goodput(double ettr, bool recomputed) {
  registry_.set_gauge("hdp_job_effective_training_time_ratio", {}, ettr);
  if (recomputed) registry_.add_counter("hdp_job_steps_recomputed_total", {}, 1);
}

void WorkerMetrics::not_goodput_reporter() { registry_.clear_family("hdp_job_effective_training_time_ratio"); }

void WorkerMetrics::job_recovered(const std::string& kind, double seconds) {
  registry_.observe("hdp_job_recovery_seconds", {{"kind", kind}}, seconds);
}

void WorkerMetrics::checkpoint_saved(double seconds, std::uint64_t bytes) {
  registry_.add_counter("hdp_checkpoint_saved_bytes_total", {}, static_cast<double>(bytes));
  registry_.observe("hdp_checkpoint_save_seconds", {}, seconds);
}

void WorkerMetrics::checkpoint_restored(double seconds, std::uint64_t bytes) {
  registry_.add_counter("hdp_checkpoint_restored_bytes_total", {}, static_cast<double>(bytes));
  registry_.observe("hdp_checkpoint_restore_seconds", {}, seconds);
}

bool WorkerMetrics::publish() {
  if (file_.empty()) return true;
  const std::string text = registry_.to_json();
  const std::filesystem::path tmp = file_.string() + ".tmp";
  bool ok = false;
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ok = fd.get() >= 0 && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }
  ok = ok && ::rename(tmp.c_str(), file_.c_str()) == 0;
  if (!ok && !warned_) {
    log()->warn("cannot write the metrics file {} for the agent: {}", file_.string(), std::strerror(errno));
    warned_ = true;
  }
  return ok;
}

}  // namespace hdp::trainer
