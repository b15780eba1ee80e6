// File: tests/agents/worker_exit_test.cc
//
// classify_exit() (agents/worker_supervisor.h) over the statuses of real child processes: exit 0
// is clean, exits 3 and 2 (common/exit_codes.h) say the job failed for good, any other exit code
// or a death by signal may be helped by a restart.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
  EXPECT_EQ(classify_exit(status_of_child(-1)), WorkerExit::kFailed);
}

}  // namespace
}  // namespace hdp::agents
