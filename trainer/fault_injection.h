// File: trainer/fault_injection.h
//
// The faults of --fault (trainer_config.h, Fault) as one worker fires them: before a step or in
// one of its phases, SIGKILL of this worker (crash) or of its agent and itself (kill-node), a
// SIGSTOP that a forked child ends (hang), a CPU cgroup limit (throttle, cpu_throttle.h), and the
// factor by which slow: faults stretch this worker's compute (mesh::StepOptions::slowdown). A
// claimed fault fires once per job: the first rank to reach it takes the key fault:<index> in the
// job's namespace, so a restarted worker or a rolled-back job does not fire it again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "elastic/elastic_context.h"
#include "elastic/store.h"
#include "mesh/step/zero.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {

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
  void fire(int rank, std::int64_t step, std::optional<mesh::StepPhase> phase = std::nullopt);

 private:
  bool is_me(const Fault& f) const;

  const std::vector<Fault>& faults_;
  const elastic::WorkerIdentity& identity_;
  std::shared_ptr<elastic::Store> store_;
};

}  // namespace hdp::trainer
