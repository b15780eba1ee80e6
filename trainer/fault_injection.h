// File: trainer/fault_injection.h
//
// The faults of --fault (trainer_config.h, Fault) as one worker fires them: before a step or in
// one of its phases, SIGKILL of this worker (crash) or of its agent and itself (kill-node), a
// SIGSTOP that a forked child ends (hang), a CPU cgroup limit (throttle, cpu_throttle.h), and the
// factor by which slow: faults stretch this worker's compute (mesh::StepOptions::slowdown), and
// the hold of a test that acts on a running job (hold()). A claimed fault fires once per job: the
// first rank to reach it takes the key fault:<index> in the job's namespace, so a restarted worker
// or a rolled-back job does not fire it again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/elastic_context.h"
#include "elastic/store.h"
#include "mesh/comm/communicator.h"
#include "mesh/step/zero.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {

// The key of the job's namespace that claims fault `index` of --fault (a crash, a kill-node, a
// hang) or records its release (a hold).
inline std::string fault_key(std::size_t index) { return "fault:" + std::to_string(index); }

// A setup: fault of this worker (trainer_config.h): sleeps its MS, logged, before the worker builds
// its model. No other fault does anything here.
void delay_setup(const std::vector<Fault>& faults, const elastic::WorkerIdentity& identity);

class FaultInjector {
 public:
  // `faults` and `identity` must outlive this object.
  FaultInjector(const std::vector<Fault>& faults, const elastic::WorkerIdentity& identity,
                std::shared_ptr<elastic::Store> store);

  // The product of 1/F of this worker's slow: faults in force at `step` (1: none).
  double slowdown(std::int64_t step) const;

  // Fires the faults of `step` that this worker (at `rank`) owns: with `phase` none, those that
  // come before the step; else those of that phase. May not return (SIGKILL) or return after a
  // stop (SIGSTOP, then SIGCONT from the child).
  // `comm`: the generation's communicator, which a reset aborts (none: a reset does nothing).
  void fire(int rank, std::int64_t step, std::optional<mesh::StepPhase> phase = std::nullopt,
            mesh::Communicator* comm = nullptr);

  // Every rank, before step `step`: a hold of that step waits until the job is asked something
  // (trainer_config.h, hold), `released_here()` (a signal to this worker, a new generation) or its
  // MS passed, polling every kHoldPoll. The first rank released takes the key fault:<index>, which
  // releases every other rank and keeps a worker that starts later (a joiner) from holding it
  // again: a hold holds the job once. Returns whether this worker held.
  bool hold(std::int64_t step, const std::function<bool()>& released_here);
  static constexpr std::chrono::milliseconds kHoldPoll{20};

 private:
  bool is_me(const Fault& f) const;
  bool asked_something() const;
  bool released(std::size_t index) const;

  const std::vector<Fault>& faults_;
  const elastic::WorkerIdentity& identity_;
  std::shared_ptr<elastic::Store> store_;
  std::set<std::size_t> held_;  // the holds this worker held
};

}  // namespace hdp::trainer
