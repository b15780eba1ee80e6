// File: trainer/job_requests.h
//
// The trainer's side of what a running job is asked through its store (elastic/control.h,
// docs/operations.md): rank 0 reads the pending requests and the live settings with its step
// reports (trainer/step_reporter.h) and sends them in the step boundary (trainer/step_boundary.h);
// every rank then acts on them at the same step. This room holds what rank 0 asks (asked()), the
// live settings applied at a step on every rank, and the end of each request: its `request_done`
// event and its removal (a checkpoint saved or failed, a drain whose node left or that became a
// job stop, a stop). The saving itself is the trainer's (trainer/recovery.h).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "elastic/elastic_context.h"
#include "elastic/live_settings.h"
#include "elastic/store.h"
#include "trainer/step_boundary.h"
#include "trainer/step_reporter.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {

class JobRequests {
 public:
  // `flags`: this worker's configuration as started; `config`: the one it trains with, whose live
  // settings apply_live_settings() changes. `worker`: "node/local_rank", for the log.
  JobRequests(elastic::Store& job_store, const elastic::LiveValues& flags, TrainerConfig& config,
              StepReporter& reporter, std::string worker);

  // The live settings as this worker's flags set them (overrides apply to these).
  const elastic::LiveValues& flags() const { return flags_; }

  // Rank 0: what its last step report read, as the boundary carries it (other ranks: nothing).
  Asked asked(const elastic::Membership& m) const;

  // Every rank, at the boundary after `step`: the values rank 0 sent are in force from the next
  // step on. Logged by each rank, reported by rank 0 (`settings_applied`); returns whether they
  // changed.
  bool apply_live_settings(const elastic::Membership& m, const elastic::LiveValues& agreed, std::int64_t step);

  // Rank 0: a `hdp checkpoint` request was acted on at `step` (outcome `saved`, `failed` or
  // `no_checkpoint_dir`; `path` the checkpoint's directory, empty when none).
  void checkpoint_taken(std::int64_t step, const std::string& outcome, const std::string& path);

  // Rank 0: the drains of the generation's members in `nodes` (all of them when nullopt) end with
  // `outcome` (`left`: the node left at `step`; `job_stopped`: the drain became a job stop).
  void finish_drains(const elastic::Membership& m, const std::optional<std::set<std::string>>& nodes,
                     const std::string& outcome, std::int64_t step);
  // Rank 0: the job stopped at `step`; `checkpoint` the step saved, "failed" or "none".
  void finish_stop(std::int64_t step, const std::string& checkpoint);

 private:
  elastic::Store& store_;
  const elastic::LiveValues flags_;
  TrainerConfig& config_;
  StepReporter& reporter_;
  std::string worker_;
};

// The job's minimum number of nodes, from its configuration in the store; nullopt when the store
// cannot be read now.
std::optional<int> read_min_nodes(elastic::Store& job_store);

}  // namespace hdp::trainer
