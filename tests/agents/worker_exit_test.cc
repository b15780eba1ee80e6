// File: tests/agents/worker_exit_test.cc
//
// classify_exit() (agents/worker_supervisor.h) over the statuses of real child processes: exit 0
// is clean, exits 3 and 2 (common/exit_codes.h) say the job failed for good, exit 5 that the
// running job refused the worker, any other exit code or a death by signal may be helped by a
// restart. And the supervisor's restart count, over real
// workers (/bin/sh) that fail: a crash loop gives its slot up after max_restarts, a worker that
// fails after running healthy_run starts the count afresh. Bounds: each case's workers run for at
// most 3 s in all; the supervisor is asked to reap every 10 ms.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agents/worker_supervisor.h"
#include "common/exit_codes.h"

namespace hdp::agents {
namespace {

// The waitpid status of a child that exits with `code`, or (code < 0) is killed by SIGKILL.
int status_of_child(int code) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (code < 0) ::raise(SIGKILL);
    _exit(code);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(WorkerExit, ExitCodesAndSignals) {
  EXPECT_EQ(classify_exit(status_of_child(kExitOk)), WorkerExit::kClean);
  EXPECT_EQ(classify_exit(status_of_child(kExitJobFailed)), WorkerExit::kJobFailed);
  EXPECT_EQ(classify_exit(status_of_child(kExitUsage)), WorkerExit::kJobFailed);
  EXPECT_EQ(classify_exit(status_of_child(kExitFailure)), WorkerExit::kFailed);
  EXPECT_EQ(classify_exit(status_of_child(kExitDrained)), WorkerExit::kFailed);
  EXPECT_EQ(classify_exit(status_of_child(kExitRefused)), WorkerExit::kRefused);
  EXPECT_EQ(classify_exit(status_of_child(-1)), WorkerExit::kFailed);
}

// Runs a supervisor of one slot whose worker is `script` (sh -c) until the slot is given up or
// `limit` passes; returns how many times the worker was started.
struct SupervisedRun {
  int starts = 0;
  bool given_up = false;
};
SupervisedRun supervise(const std::string& script, int max_restarts, std::chrono::milliseconds healthy_run,
                        std::chrono::milliseconds limit) {
  boost::asio::io_context io;
  SupervisedRun run;
  WorkerSupervisor::Options options{.command = {"/bin/sh", "-c", script},
                                    .slots = 1,
                                    .max_restarts = max_restarts,
                                    .backoff = {.initial = std::chrono::milliseconds(10), .max = std::chrono::milliseconds(20)},
                                    .healthy_run = healthy_run};
  WorkerSupervisor supervisor(io, options, [&](int, int, bool exhausted) {
    run.given_up = exhausted;
    io.stop();
  });
  supervisor.start_all([&](int) {
    ++run.starts;
    return std::vector<std::string>{"PATH=/usr/bin:/bin"};
  });
  boost::asio::steady_timer reaper(io);
  std::function<void()> reap = [&] {
    supervisor.reap();
    reaper.expires_after(std::chrono::milliseconds(10));
    reaper.async_wait([&](const boost::system::error_code& error) {
      if (!error) reap();
    });
  };
  reap();
  io.run_for(limit);
  return run;
}

// A worker that fails at once, again and again: started 1 + max_restarts times, then given up.
TEST(WorkerSupervisor, ACrashLoopGivesTheSlotUpAfterMaxRestarts) {
  const SupervisedRun run = supervise("exit 1", 3, std::chrono::seconds(60), std::chrono::seconds(10));
  EXPECT_TRUE(run.given_up);
  EXPECT_EQ(run.starts, 4);
}

// A worker that fails only after running healthy_run (here 100 ms; it runs 150 ms) is restarted
// every time (about 18 starts in 3 s with max_restarts 2), never given up. Before, the count ran over
// the agent's whole life and a long job's slot was given up at its third rare crash.
TEST(WorkerSupervisor, AWorkerThatRanHealthyRunStartsTheCountAfresh) {
  const SupervisedRun run = supervise("sleep 0.15; exit 1", 2, std::chrono::milliseconds(100), std::chrono::seconds(3));
  EXPECT_FALSE(run.given_up);
  EXPECT_GE(run.starts, 6) << "the slot should have been restarted well past max_restarts";
  // The same worker with the default window is given up after 1 + 2 starts.
  const SupervisedRun strict = supervise("sleep 0.15; exit 1", 2, std::chrono::seconds(60), std::chrono::seconds(10));
  EXPECT_TRUE(strict.given_up);
  EXPECT_EQ(strict.starts, 3);
}

// A worker that exits 2, 3 or 5 (its configuration cannot run, the job failed, the running job
// refused it) is started once and never again, and its exit reaches the agent as a final one (not
// a slot that ran out of restarts): a restart would end the same way.
TEST(WorkerSupervisor, AWorkerThatExits2Or3Or5IsNotRestarted) {
  for (const int code : {kExitUsage, kExitJobFailed, kExitRefused}) {
    const SupervisedRun run = supervise("exit " + std::to_string(code), 3, std::chrono::seconds(60), std::chrono::seconds(10));
    EXPECT_EQ(run.starts, 1) << "exit " << code;
    EXPECT_FALSE(run.given_up) << "exit " << code;
  }
}

}  // namespace
}  // namespace hdp::agents
