// Crash safety: a forked writer (two thread-ranks in one process) stops itself at a named point of
// the save (SIGSTOP from the fault hook, so the kill lands exactly there), and the test kills it
// with SIGKILL. The previous committed checkpoint must restore, the partial directory must never
// be picked, and the next save must remove it.
#include <gtest/gtest.h>

#include <signal.h>
#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint_root.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {

struct CrashPoint {
  std::string_view point;
  int rank;  // the rank whose arrival stops the process
};

class CheckpointCrash : public ::testing::TestWithParam<CrashPoint> {};

TEST_P(CheckpointCrash, KilledWriterLeavesThePreviousCheckpoint) {
  hdp::test::TempDir dir("hdp-crash");
  CheckpointOptions options = small_options(dir.path());
  const FlatLayout layout = tiny_llama_layout();
  const FullState older = make_state(layout, 1), newer = make_state(layout, 2);
  save_on(2, options, layout, older, 10);

  const CrashPoint crash = GetParam();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    options.fault_hook = [crash](std::string_view point, int rank) {
      if (point == crash.point && rank == crash.rank) raise(SIGSTOP);
    };
    try {
      save_on(2, options, layout, newer, 20);
    } catch (...) {
      _exit(3);
    }
    _exit(0);  // reached only if the hook never fired: the parent fails the test on WIFEXITED
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  const bool stopped = WIFSTOPPED(status);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ASSERT_TRUE(stopped) << "the writer never reached " << crash.point;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // The killed save left step-00000020.tmp; only step 10 counts as committed.
  ASSERT_EQ(list_uncommitted(dir.path()).size(), 1u);
  EXPECT_EQ(list_uncommitted(dir.path())[0].filename(), "step-00000020.tmp");
  ASSERT_EQ(list_committed(dir.path()).size(), 1u);
  EXPECT_EQ(read_latest(dir.path()), "step-00000010");
  const Restored restored = restore_on(3, options, layout);
  ASSERT_TRUE(restored.progress[0].has_value());
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, older);

  // The next save (same step, as after a restart from step 10) cleans up and commits.
  save_on(2, options, layout, newer, 20);
  EXPECT_TRUE(list_uncommitted(dir.path()).empty());
  EXPECT_EQ(restore_on(2, options, layout).state, newer);
}

INSTANTIATE_TEST_SUITE_P(Points, CheckpointCrash,
                         ::testing::Values(CrashPoint{kPointShardWriting, 1}, CrashPoint{kPointBeforeManifest, 0},
                                           CrashPoint{kPointBeforeRename, 0}),
                         [](const ::testing::TestParamInfo<CrashPoint>& info) {
                           std::string name(info.param.point);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace hdp::checkpoint::test
