// File: trainer/state_report.h
//
// Reports to the job state written off the training thread's path: rank 0's per step (the `state`
// hash and a sample, fenced by the generation, reading `control` and `settings` back in the same
// round trip) and every rank's checkpoint records (checkpoint_reporting.h). post() hands the report
// to a thread and returns at once, so a store that stalls, fails over or does not answer costs no
// step time (docs/architecture.md, "The store's bad days").
//
//   - The newest report wins: a report posted while another waits replaces its state fields (the
//     writes of both, samples and events, are kept, oldest first, up to kMaxPendingWrites; beyond
//     that the oldest are dropped: a stall of thousands of steps leaves a gap in the dashboard's
//     curve, not a queue).
//   - A report the store could not take (StoreUnavailable, a timeout, a value refused) is retried
//     every `retry_pause` until it is written or a newer one replaces it; the first failure of an
//     outage and its end are logged, not every retry.
//   - A report whose generation is no longer current (the commit's fence) is dropped: a newer
//     generation's rank 0 reports from then on.
//   - reads(): the values of `reads` as the newest written report read them, with a serial that
//     rises with every written report (the caller acts on each serial once).
//   - flush(timeout): waits until nothing is pending (written or dropped) or the timeout passed;
//     the trainer flushes before it writes the job's outcome, so that the final step's state lands
//     before `outcome` ends the job.
// The destructor flushes for at most kDestructorFlush, then stops the thread. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "elastic/job_state.h"
#include "elastic/store.h"

namespace hdp::trainer {

class StateReport {
 public:
  using Duration = std::chrono::milliseconds;
  static constexpr std::size_t kMaxPendingWrites = 512;
  static constexpr Duration kDestructorFlush{2000};

  struct Reads {
    std::uint64_t serial = 0;  // 0: no report written yet
    std::vector<std::optional<std::string>> values;
  };

  StateReport(std::shared_ptr<elastic::Store> store, std::vector<std::string> reads, Duration retry_pause = Duration(200));
  ~StateReport();
  StateReport(const StateReport&) = delete;
  StateReport& operator=(const StateReport&) = delete;

  // Queues state fields and writes (a sample, an event) of `generation` (see the header comment).
  void post(std::int64_t generation, elastic::Fields state, std::vector<elastic::Write> writes);
  Reads reads() const;
  // Whether nothing is pending any more (every report written or dropped) within `timeout`.
  bool flush(Duration timeout);
  // Reports written, and dropped as stale, since construction (for tests and logs).
  std::uint64_t written() const;
  std::uint64_t stale() const;

 private:
  struct Pending {
    std::int64_t generation = 0;
    elastic::Fields state;
    std::deque<elastic::Write> writes;
  };
  void run();

  elastic::JobState job_;
  const std::vector<std::string> read_keys_;
  const Duration retry_pause_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;     // the thread: a report posted, or stop
  std::condition_variable drained_;  // flush(): nothing pending and nothing in flight
  std::optional<Pending> pending_;   // guarded by mutex_
  bool in_flight_ = false;           // guarded by mutex_: the thread is writing a report
  bool stopping_ = false;            // guarded by mutex_
  Reads reads_;                      // guarded by mutex_
  std::uint64_t written_ = 0, stale_ = 0;  // guarded by mutex_
  std::thread thread_;               // started by the first post()
};

}  // namespace hdp::trainer
