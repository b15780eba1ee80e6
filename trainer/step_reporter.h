// File: trainer/step_reporter.h
//
// What the trainer tells the world: the job's events (EventLog: a restore, a straggler, a stop),
// and per step (StepReporter) rank 0's log line, the job state and its samples (fenced by the
// generation; written by a thread of their own, off the step's critical path: state_report.h),
// the --metrics-file line and TensorBoard scalars, and every rank's metrics for its agent's
// /metrics (worker_metrics.h). A failure to report is logged and never stops training.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/state.h"
#include "common/clock.h"
#include "common/warn_once.h"
#include "elastic/control.h"
#include "elastic/job_state.h"
#include "elastic/elastic_context.h"
#include "mesh/comm/communicator.h"
#include "mesh/step/distributed_step.h"
#include "trainer/goodput_report.h"
#include "trainer/state_report.h"
#include "trainer/tensorboard.h"
#include "trainer/trainer_config.h"
#include "trainer/worker_metrics.h"

namespace hdp::trainer {

// "%.3f": how events and the state write seconds and speeds.
std::string fixed3(double value);

// The job's events. Not fenced: an event reports what a generation did (a restore, a straggler),
// true even once a newer generation exists, and is tagged with its generation; it changes no state.
class EventLog {
 public:
  explicit EventLog(std::shared_ptr<elastic::Store> store) : job_(std::move(store)) {}
  // Appends `type` with `fields` and the generation; logs a warning when the store refuses.
  void record(const elastic::Membership& m, const std::string& type, elastic::Fields fields);

 private:
  elastic::JobState job_;
};

// The speeds a step's report carries (straggler_monitor.h keeps them).
struct SpeedFigures {
  const std::vector<double>& relative;     // each rank's speed over the median, last measured
  const std::vector<double>& plan_speeds;  // the speeds the step was planned with
};

// An evaluation of the held-out batch (--eval-data) after a step.
struct EvalFigures {
  double loss = 0;          // mean token loss
  std::int64_t tokens = 0;  // of the held-out batch
  double ms = 0;            // the evaluation's wall time
};

class StepReporter {
 public:
  // `config` must outlive this object. `metrics_file`: the agent's file for /metrics (empty: none).
  StepReporter(const TrainerConfig& config, std::shared_ptr<elastic::Store> store, EventLog& events,
               const std::filesystem::path& metrics_file);

  // Step `step` completed (on `world` ranks; 0: this generation's size), leaving the data at
  // `position`: every rank's metrics; rank 0's log line (every --log-every steps, the last, and
  // every step that evaluated), job state and sample, metrics-file line (with the position) and
  // TensorBoard scalars; with `eval`, its eval_loss in each of them too (in the step's log line;
  // the state keeps the last one, with eval_step).
  void step(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result, double step_ms, double lr,
            const checkpoint::DataPosition& position, const SpeedFigures& speeds, int world = 0,
            const EvalFigures* eval = nullptr);

  // The next step starts now: the wall clock its metrics-file line gives as `start_ms` (its
  // `time_ms` is when the line is written, after the step's reports).
  void step_started() { step_started_ms_ = elastic::now_ms(); }
  // The generation was abandoned (a peer lost, a newer generation): its recovery is timed from now,
  // or from the first abandonment since this worker's last step (a second failure during a
  // recovery lengthens the recovery, it does not start another). Not before this worker's first
  // step: a generation abandoned before then (a node refused at the job's start, a peer lost while
  // the job formed) interrupted no training.
  void interrupted() {
    if (trained_ && !interrupted_) interrupted_ = SteadyClock::now();
  }
  // Every rank, at a generation's start (trainer/recovery.h): where its state came from, the
  // `source` of its `continue` or `restore` event (memory, checkpoint, seed, init_from).
  void restored_from(std::string source) { restored_from_ = std::move(source); }
  // Collective, at a generation's first completed step (now at `step`): how long the interruption
  // before it cost (the slowest rank's view) and how many steps were lost (`furthest`: the furthest
  // step any rank had completed). Metrics on every rank; rank 0's log line, `recovered` event (with
  // the `source` of restored_from()) and hdp_job_recovery_seconds{kind}.
  void recovered(const elastic::Membership& m, mesh::Communicator& comm, std::int64_t step, std::int64_t furthest);

  // Rank 0: the job completed at `step` (the job state's outcome), or stopped there by request
  // (`checkpoint`: the step saved, "failed" or "none").
  void completed(const elastic::Membership& m, std::int64_t step);
  void stopped(const elastic::Membership& m, std::int64_t step, const std::string& checkpoint);

  WorkerMetrics& metrics() { return metrics_; }

  // Rank 0: the pending requests its last step report read (elastic/control.h).
  const elastic::ControlRequests& requests() const { return requests_; }
  // Rank 0: the live settings (`hdp config set`) its last step report read; a value that does not
  // decode keeps the ones read before (logged once).
  const elastic::LiveSettings& settings() const { return settings_; }
  // Rank 0: how many nodes stood by (`standby`, written by the leader) at its last step report.
  int standby() const { return standby_; }
  // Rank 0, at a generation's start: reads them now rather than with the first step report.
  void read_settings_now();
  // Rank 0, after a hold (fault_injection.h): the pending requests, the settings and the nodes
  // standing by, read now, so that the boundary that follows carries what the job was asked during
  // the hold.
  void read_requests_now();
  // Rank 0: the settings in force changed at `step` (an event).
  void settings_applied(const elastic::Membership& m, std::int64_t step, const std::string& in_force);
  // Rank 0: a `hdp checkpoint` request its last step report read, not yet taken.
  const std::optional<elastic::Request>& checkpoint_request() const { return checkpoint_request_; }
  // Rank 0: the request was acted on: its `request_done` event (outcome `saved`, `failed` or
  // `no_checkpoint_dir`, the step, the checkpoint's directory) and its removal, in one commit.
  void checkpoint_done(std::string id, std::int64_t step, const std::string& outcome, const std::string& path);

 private:
  void write_metrics_line(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result,
                          double step_ms, double lr, const checkpoint::DataPosition& position, double tokens_per_s,
                          int world, const SpeedFigures& speeds, const EvalFigures* eval);
  void write_tensorboard(std::int64_t step, const mesh::StepResult& result, double step_ms, double lr,
                         double tokens_per_s, int world, const EvalFigures* eval);

  // Rank 0: the step's state fields (with `goodput`'s) and sample, posted to the state report.
  void post_state(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result, double step_ms,
                  double lr, double tokens_per_s, int world, const SpeedFigures& speeds, const EvalFigures* eval,
                  elastic::Fields goodput);
  // Acts on the requests and settings of the newest report written, once each.
  void take_reads();
  // Waits (at most kFlushTimeout) until the queued reports are written; false when they were not.
  bool flush_reports();
  // The values of kAskedKeys, in its order.
  void read_asked(const std::vector<std::optional<std::string>>& values);
  void read_requests(const std::optional<std::string>& value);
  void read_settings(const std::optional<std::string>& value);
  void read_standby(const std::optional<std::string>& value);

  static constexpr std::chrono::milliseconds kFlushTimeout{3000};

  const TrainerConfig& config_;
  std::shared_ptr<elastic::Store> store_;
  elastic::JobState job_;
  std::unique_ptr<StateReport> state_report_;  // rank 0, created at its first step
  GoodputReport goodput_;                      // rank 0's accounting of the job's ETTR
  std::string restored_from_ = "unknown";
  std::uint64_t reads_serial_ = 0;             // of the last reads acted on
  elastic::ControlRequests requests_;
  std::optional<elastic::Request> checkpoint_request_;
  std::string checkpoint_taken_;            // the id of the last checkpoint request acted on
  WarnOnce bad_control_;  // `control` values that did not decode
  elastic::LiveSettings settings_;
  int standby_ = 0;
  WarnOnce bad_standby_;   // `standby` values that were not a list of ids
  WarnOnce bad_settings_;  // `settings` values that did not decode
  EventLog& events_;
  WorkerMetrics metrics_;                           // every rank, for its agent's /metrics
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, created at its first step
  bool tensorboard_failed_ = false;
  std::optional<SteadyClock::time_point> interrupted_;
  bool trained_ = false;  // step() was called: this worker has completed a step
  std::int64_t step_started_ms_ = 0;  // 0: no step_started() yet (the line then has no start_ms)
};

}  // namespace hdp::trainer
