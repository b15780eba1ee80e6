#include "trainer/fault_injection.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "trainer/cpu_throttle.h"

namespace hdp::trainer {

void delay_setup(const std::vector<Fault>& faults, const elastic::WorkerIdentity& identity) {
  for (const Fault& f : faults) {
    if (f.kind != Fault::Kind::kSetup || f.node != identity.node || f.slot != identity.local_rank) continue;
    log()->warn("fault {}: setting up {} ms longer", f.spec, f.hang.count());
    std::this_thread::sleep_for(f.hang);
  }
}

FaultInjector::FaultInjector(const std::vector<Fault>& faults, const elastic::WorkerIdentity& identity,
                             std::shared_ptr<elastic::Store> store)
    : faults_(faults), identity_(identity), store_(std::move(store)) {}

bool FaultInjector::is_me(const Fault& f) const { return f.node == identity_.node && f.slot == identity_.local_rank; }

double FaultInjector::slowdown(std::int64_t step) const {
  double factor = 1;
  for (const Fault& f : faults_) {
    if (f.kind == Fault::Kind::kSlow && is_me(f) && step >= f.step && (f.until == 0 || step <= f.until)) {
      factor /= f.factor;
    }
  }
  return factor;
}

void FaultInjector::fire(int rank, std::int64_t step, std::optional<mesh::StepPhase> phase, mesh::Communicator* comm) {
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    if (f.phase != phase) continue;
    if (f.kind == Fault::Kind::kThrottle && f.step == step && is_me(f)) {
      log()->warn("fault {}: limiting this worker to {} CPU(s) from step {}", f.spec, f.factor, step);
      try {
        throttle_self(f.factor);
      } catch (const Error& e) {
        log()->error("fault {}: {}", f.spec, e.what());
      }
    }
    if (!f.claimed_once() || f.rank != rank || f.step != step) continue;
    bool claimed = false;
    try {
      claimed = store_->compare_and_set(fault_key(i), std::nullopt, f.spec);
    } catch (const Error& e) {
      log()->warn("fault {}: cannot claim it ({}); not firing", f.spec, e.what());
    }
    if (!claimed) continue;
    log()->warn("fault {}: firing at step {}{} on rank {}", f.spec, step,
                phase ? std::string(" (") + mesh::phase_name(*phase) + ")" : std::string(), rank);
    switch (f.kind) {
      case Fault::Kind::kCrash:
        ::kill(::getpid(), SIGKILL);
        break;
      case Fault::Kind::kKillNode:
        if (identity_.agent_pid > 0) ::kill(identity_.agent_pid, SIGKILL);
        ::kill(::getpid(), SIGKILL);
        break;
      case Fault::Kind::kHang: {
        const pid_t parent = ::getpid();
        const pid_t waker = ::fork();
        if (waker == 0) {
          // Only async-signal-safe calls in the child of a threaded process.
          const auto ms = f.hang.count();
          timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000L};
          while (::nanosleep(&ts, &ts) != 0) {
          }
          ::kill(parent, SIGCONT);
          ::_exit(0);
        }
        ::raise(SIGSTOP);
        break;
      }
      case Fault::Kind::kReset:
        if (comm) comm->abort("fault " + f.spec + ": this rank's connections were reset");
        break;
      case Fault::Kind::kSlow:
      case Fault::Kind::kThrottle:
      case Fault::Kind::kHold:
      case Fault::Kind::kSetup:
        break;  // not claimed (above; hold(); delay_setup())
    }
  }
}

bool FaultInjector::asked_something() const {
  try {
    return store_->get(elastic::keys::kControl) || store_->get(elastic::keys::kSettings);
  } catch (const Error& e) {
    log()->debug("hold: cannot read the job's requests now: {}", e.what());
  }
  return false;
}

bool FaultInjector::released(std::size_t index) const {
  try {
    return store_->get(fault_key(index)).has_value();
  } catch (const Error& e) {
    log()->debug("hold: cannot read its release now: {}", e.what());
  }
  return false;
}

bool FaultInjector::hold(std::int64_t step, const std::function<bool()>& released_here) {
  bool held = false;
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    if (f.kind != Fault::Kind::kHold || f.step != step || !held_.insert(i).second || released(i)) continue;
    held = true;
    log()->warn("fault {}: holding before step {} until the job is asked something (at most {} ms)", f.spec, step,
                f.hang.count());
    const auto deadline = SteadyClock::now() + f.hang;
    while (!released(i)) {
      const bool timed_out = SteadyClock::now() >= deadline;
      if (timed_out || released_here() || asked_something()) {
        if (timed_out) log()->warn("fault {}: nothing asked within {} ms; going on", f.spec, f.hang.count());
        try {
          store_->compare_and_set(fault_key(i), std::nullopt, f.spec);
        } catch (const Error& e) {
          log()->warn("fault {}: cannot release the other ranks ({}); they go on when asked", f.spec, e.what());
        }
        break;
      }
      std::this_thread::sleep_for(kHoldPoll);
    }
  }
  return held;
}

}  // namespace hdp::trainer
