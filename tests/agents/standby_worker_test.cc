// File: tests/agents/standby_worker_test.cc
//
// The supervisor's standby worker (agents/worker_supervisor.h, Options::standby) over real
// processes (/bin/sh scripts that honour HDP_STANDBY as `hdp train` does: wait for the slot's
// variables on standard input, then run as the slot's worker): a crashed worker's slot is handed to
// the standby that was started ahead of it, with the slot's variables and without HDP_STANDBY; the
// next standby follows after the delay; a standby that dies before it is needed is replaced, and
// given up after max_restarts in a row; a standby found dead at the handover is passed over for a
// new process; none outlives kill_and_reap_all. Bounds: each case runs its io_context for at most
// 10 s; the supervisor reaps every 10 ms. A standby that exits 2 is not started again; a drain
// (signal_all) ends the standby too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agents/worker_supervisor.h"
#include "elastic/worker_env.h"
#include "tests/support/temp_dir.h"

namespace hdp::agents {
namespace {

using namespace std::chrono_literals;

// A worker script: a standby first reads "NAME=value" lines up to an empty one and exports them
// (end of input without one: exit 0, not needed), then it is the slot's worker. Every worker
// appends "<pid> <HDP_LOCAL_RANK> <HDP_STANDBY or ->" to `log` once it runs as a slot's, then does
// `then`.
std::string script(const std::string& log, const std::string& then) {
  return "if [ \"$HDP_STANDBY\" = 1 ]; then\n"
         "  unset HDP_STANDBY; got=0\n"
         "  while IFS= read -r line; do [ -z \"$line\" ] && { got=1; break; }; export \"$line\"; done\n"
         "  [ $got = 1 ] || exit 0\n"
         "fi\n"
         "echo \"$$ $HDP_LOCAL_RANK ${HDP_STANDBY:--}\" >> '" + log + "'\n" + then;
}

std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

class StandbyWorker : public ::testing::Test {
 protected:
  // A supervisor of `slots` slots running `command`, the standby on, its delay 50 ms.
  void start(const std::string& command, int slots = 1, int max_restarts = 3) {
    WorkerSupervisor::Options options{.command = {"/bin/sh", "-c", command},
                                      .slots = slots,
                                      .max_restarts = max_restarts,
                                      .backoff = {.initial = 10ms, .max = 20ms},
                                      .standby = true,
                                      .standby_delay = 50ms};
    supervisor_ = std::make_unique<WorkerSupervisor>(io_, options, [this](int slot, int status, bool) {
      final_exits_.emplace_back(slot, status);
    });
    supervisor_->start_all([](int slot) {
      elastic::WorkerEnvironment values;
      values.job = "j";
      values.redis_url = "redis://127.0.0.1:1";
      values.node_id = "n";
      values.incarnation = "00000000000000aa";
      values.standby = slot == WorkerSupervisor::kStandbySlot;
      values.local_rank = values.standby ? 0 : slot;
      values.nproc_per_node = 2;
      const char* inherited[] = {"PATH=/usr/bin:/bin", nullptr};
      return elastic::worker_environment(values, inherited);
    }, [this](int slot) { started_.push_back(slot); });
    reap();
  }
  // Runs the io_context until `done` or 10 s.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_for(10ms);
    }
    return true;
  }
  void reap() {
    if (reaping_) supervisor_->reap();
    reaper_.expires_after(10ms);
    reaper_.async_wait([this](const boost::system::error_code& error) {
      if (!error) reap();
    });
  }
  void TearDown() override {
    if (supervisor_) supervisor_->kill_and_reap_all();
  }

  test::TempDir dir_;
  boost::asio::io_context io_;
  boost::asio::steady_timer reaper_{io_};
  std::unique_ptr<WorkerSupervisor> supervisor_;
  std::vector<std::pair<int, int>> final_exits_;
  std::vector<int> started_;  // the slots the supervisor said a worker took, in order
  bool reaping_ = true;
};

TEST_F(StandbyWorker, ACrashedWorkersSlotIsHandedToTheStandbyWithTheSlotsVariables) {
  const auto log = dir_.path() / "workers";
  // Slot 1's first worker crashes once the standby is up; every other worker runs on.
  const std::string marker = (dir_.path() / "crashed").string();
  start(script(log.string(), "if [ \"$HDP_LOCAL_RANK\" = 1 ] && [ ! -e '" + marker + "' ]; then\n"
                             "  while [ ! -e '" + marker + "' ]; do sleep 0.02; done; exit 1\n"
                             "fi\n"
                             "exec sleep 30\n"),
        2);
  ASSERT_TRUE(run_until([&] { return supervisor_->standby_pid() > 0 && lines_of(log).size() == 2; }));
  const pid_t standby = supervisor_->standby_pid();
  std::ofstream(marker).put('x');  // slot 1's worker exits 1
  ASSERT_TRUE(run_until([&] { return supervisor_->standbys_taken() == 1 && lines_of(log).size() == 3; }))
      << "the standby did not take the slot";
  const std::vector<std::string> lines = lines_of(log);
  EXPECT_EQ(lines[2], std::to_string(standby) + " 1 -") << "the standby runs as slot 1's worker, HDP_STANDBY unset";
  EXPECT_EQ(supervisor_->restarts_total(), 1);
  EXPECT_EQ(supervisor_->healthy(), (std::vector<int>{0, 1}));
  EXPECT_EQ(started_, (std::vector<int>{0, 1, 1})) << "the standby handed slot 1 is its worker now";
  EXPECT_TRUE(alive(standby));
  // The next standby follows after the delay; it is not a running worker.
  ASSERT_TRUE(run_until([&] { return supervisor_->standby_pid() > 0; }));
  EXPECT_NE(supervisor_->standby_pid(), standby);
  EXPECT_EQ(supervisor_->healthy().size(), 2u);
  EXPECT_TRUE(final_exits_.empty());
  // None outlives kill_and_reap_all, the standby included.
  const pid_t next = supervisor_->standby_pid();
  supervisor_->kill_and_reap_all();
  EXPECT_FALSE(alive(standby));
  EXPECT_FALSE(alive(next));
  EXPECT_EQ(supervisor_->standby_pid(), -1);
}

TEST_F(StandbyWorker, AStandbyThatDiesBeforeItIsNeededIsReplacedThenGivenUp) {
  const auto starts = dir_.path() / "standbys";
  // Every standby notes its start and exits 1 at once; the slot's worker runs on.
  start("if [ \"$HDP_STANDBY\" = 1 ]; then echo $$ >> '" + starts.string() + "'; exit 1; fi; exec sleep 30", 1,
        /*max_restarts=*/2);
  // 1 + max_restarts standbys, 50 ms apart, then none: no fourth within 300 ms more (six delays).
  ASSERT_TRUE(run_until([&] { return lines_of(starts).size() == 3 && supervisor_->standby_pid() < 0; }));
  const auto until = std::chrono::steady_clock::now() + 300ms;
  run_until([&] { return std::chrono::steady_clock::now() > until; });
  EXPECT_EQ(lines_of(starts).size(), 3u) << "given up after max_restarts failures in a row";
  EXPECT_EQ(supervisor_->standby_pid(), -1);
  EXPECT_EQ(supervisor_->healthy(), (std::vector<int>{0}));
  EXPECT_EQ(supervisor_->restarts_total(), 0) << "a standby's failure is no slot's restart";
  EXPECT_EQ(started_, std::vector<int>{0}) << "a standby takes no slot while it stands by";
  EXPECT_TRUE(final_exits_.empty());
}

TEST_F(StandbyWorker, AStandbyFoundDeadAtTheHandoverIsPassedOverForANewProcess) {
  const auto log = dir_.path() / "workers";
  start(script(log.string(), "exec sleep 30\n"), 1);
  ASSERT_TRUE(run_until([&] { return supervisor_->standby_pid() > 0 && lines_of(log).size() == 1; }));
  const pid_t standby = supervisor_->standby_pid();
  const pid_t worker = std::stoi(lines_of(log)[0]);
  // The standby dies and is not reaped yet, then the worker crashes: the handover's write fails
  // (the standby's zombie holds no descriptor: the pipe has no reader), and a new process takes
  // the slot.
  reaping_ = false;
  kill(standby, SIGKILL);
  kill(worker, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(worker, &status, 0), worker);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(standby), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped
  EXPECT_TRUE(supervisor_->on_exit(worker, status));
  ASSERT_TRUE(run_until([&] { return lines_of(log).size() == 2; }));
  EXPECT_EQ(supervisor_->standby_pid(), standby) << "still the dead standby's, until it is reaped";
  reaping_ = true;
  const std::vector<std::string> lines = lines_of(log);
  EXPECT_NE(lines[1].substr(0, lines[1].find(' ')), std::to_string(standby));
  EXPECT_EQ(lines[1].substr(lines[1].find(' ')), " 0 -");
  EXPECT_EQ(supervisor_->standbys_taken(), 0);
  EXPECT_EQ(started_, (std::vector<int>{0, 0})) << "one worker for the slot, not the failed handover too";
  // Reaped at last, the dead standby is replaced after the delay.
  ASSERT_TRUE(run_until([&] { return supervisor_->standby_pid() > 0 && supervisor_->standby_pid() != standby; }));
}

// A standby that exits 2 (a configuration it cannot run) is not started again: another would fail
// the same way, and the slots' own workers report it.
TEST_F(StandbyWorker, AStandbyThatCannotRunItsConfigurationIsNotStartedAgain) {
  const auto starts = dir_.path() / "standbys";
  start("if [ \"$HDP_STANDBY\" = 1 ]; then echo $$ >> '" + starts.string() + "'; exit 2; fi; exec sleep 30");
  ASSERT_TRUE(run_until([&] { return lines_of(starts).size() == 1 && supervisor_->standby_pid() < 0; }));
  const auto until = std::chrono::steady_clock::now() + 300ms;
  run_until([&] { return std::chrono::steady_clock::now() > until; });
  EXPECT_EQ(lines_of(starts).size(), 1u);
  EXPECT_EQ(supervisor_->healthy(), (std::vector<int>{0}));
}

// A drain (signal_all) reaches the standby too, which ends; none is started after it.
TEST_F(StandbyWorker, ADrainEndsTheStandbyAndStartsNoOther) {
  const auto log = dir_.path() / "workers";
  start(script(log.string(), "exec sleep 30\n"), 1);
  ASSERT_TRUE(run_until([&] { return supervisor_->standby_pid() > 0 && lines_of(log).size() == 1; }));
  const pid_t standby = supervisor_->standby_pid();
  supervisor_->signal_all(SIGTERM);
  ASSERT_TRUE(run_until([&] { return supervisor_->all_exited() && supervisor_->standby_pid() < 0; }));
  EXPECT_FALSE(alive(standby));
  const auto until = std::chrono::steady_clock::now() + 300ms;
  run_until([&] { return std::chrono::steady_clock::now() > until; });
  EXPECT_EQ(supervisor_->standby_pid(), -1) << "no standby after a drain";
  EXPECT_EQ(final_exits_.size(), 1u) << "the slot's worker's exit is final";
}

}  // namespace
}  // namespace hdp::agents
