// Ranks as forked processes (PipeGroup): the Group interface carries the commit protocol across
// processes, and a rank killed with SIGKILL in the middle of its shard write makes the save fail
// on the surviving ranks instead of committing, leaving the previous checkpoint.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/saver.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/checkpoint/process_group.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {

constexpr int kWorld = 3;

std::function<void(Group&)> save_rank(const CheckpointOptions& options, const FlatLayout& layout, const FullState& state,
                                      std::int64_t step) {
  return [&options, &layout, &state, step](Group& group) {
    const std::vector<ShardRange> ranges = uneven_ranges(layout.total(), group.world_size());
    Saver saver(options, layout, group);
    saver.save(snapshot_of(state, ranges[static_cast<std::size_t>(group.rank())], group.rank(), step));
  };
}

TEST(CheckpointProcesses, ProcessesSaveAndThreadsRestore) {
  hdp::test::TempDir dir("hdp-procs");
  const CheckpointOptions options = small_options(dir.path());
  const FlatLayout layout = tiny_llama_layout();
  const FullState state = make_state(layout, 3);
  for (int status : run_process_ranks(kWorld, save_rank(options, layout, state, 10))) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  const Restored restored = restore_on(2, options, layout);
  EXPECT_EQ(restored.state, state);
  EXPECT_EQ(restored.progress[1]->rng_states.size(), static_cast<std::size_t>(kWorld));
  EXPECT_EQ(restored.progress[1]->rng_states[2], rng_bytes(2, 10));
}

TEST(CheckpointProcesses, ARankKilledMidWriteFailsTheSaveOnTheOthers) {
  hdp::test::TempDir dir("hdp-procs");
  CheckpointOptions options = small_options(dir.path());
  const FlatLayout layout = tiny_llama_layout();
  const FullState older = make_state(layout, 1), newer = make_state(layout, 2);
  save_on(kWorld, options, layout, older, 10);

  options.fault_hook = [](std::string_view point, int rank) {
    if (point == kPointShardWriting && rank == 1) raise(SIGSTOP);
  };
  bool stopped = false;
  const std::vector<int> statuses = run_process_ranks(kWorld, save_rank(options, layout, newer, 20), [&](const std::vector<pid_t>& pids) {
    int status = 0;
    waitpid(pids[1], &status, WUNTRACED);  // rank 1 stopped itself at the point: kill it there
    stopped = WIFSTOPPED(status);
    kill(pids[1], SIGKILL);
  });
  ASSERT_TRUE(stopped);
  EXPECT_TRUE(WIFSIGNALED(statuses[1]) && WTERMSIG(statuses[1]) == SIGKILL);
  for (int r : {0, 2}) {  // the survivors learn from the collective that the save failed, and return
    EXPECT_TRUE(WIFEXITED(statuses[static_cast<std::size_t>(r)]) && WEXITSTATUS(statuses[static_cast<std::size_t>(r)]) == 3)
        << "rank " << r << " status " << statuses[static_cast<std::size_t>(r)];
  }
  ASSERT_EQ(list_committed(dir.path()).size(), 1u);
  options.fault_hook = nullptr;
  const Restored restored = restore_on(2, options, layout);
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, older);
}

}  // namespace
}  // namespace hdp::checkpoint::test
