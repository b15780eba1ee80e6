// File: agents/worker_supervisor.h
//
// One worker process per slot: started with its slot's environment, restarted when it crashes (at
// once the first time, then with backoff; up to max_restarts per slot in a row, a worker that ran
// for healthy_run before it failed counting as the first of a new row; never after exit 3, 2 or 5,
// common/exit_codes.h: see classify_exit()), never left behind (process groups + PDEATHSIG, see agents/process.h). The
// agent calls reap() on SIGCHLD, which hands each exit to on_exit().
//
// With Options::standby, one more process per node is kept ahead of need: a standby worker
// (elastic/worker_env.h, HDP_STANDBY), started with the node's environment, which prepares what
// does not depend on a slot (the process and its libraries, the configuration, the data's index)
// and then waits on its standard input. A restart hands the slot to it (the slot's variables
// written on that input, StandbyAssignment) instead of starting a process from nothing; the next
// standby is started standby_delay later. A standby that fails before it is needed is started
// again after the delay, up to max_restarts times in a row (a handover starts a new row), never
// after exit 2, 3 or 5; it never counts as a slot's restart nor as a running worker. None is kept
// with max_restarts 0 (no slot is ever handed over).
// Single-threaded: every call runs on the agent's io_context thread.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "elastic/backoff.h"

namespace hdp::agents {

// What a worker's exit status (waitpid's) says of the job.
enum class WorkerExit {
  kClean,      // exit 0: the job completed, or its ranks agreed to stop
  kJobFailed,  // exit 3 (the job failed permanently) or 2 (its configuration cannot run):
               // restarting the worker would fail the same way
  kRefused,    // exit 5: the running job refused it (trainer/job_identity.h) and goes on without
               // this node; restarting it would be refused the same way
  kFailed,     // anything else (another exit code, a signal): a restart may help
};
WorkerExit classify_exit(int status);

class WorkerSupervisor {
 public:
  struct Options {
    std::vector<std::string> command;
    int slots = 1;
    int max_restarts = 3;
    elastic::BackoffOptions backoff{.initial = std::chrono::milliseconds(200), .max = std::chrono::seconds(5)};
    // A worker that ran this long before it failed is not crash-looping: its slot's restart count
    // and backoff start afresh (as Kubernetes resets a container's backoff after 10 minutes of
    // running), so that a long job outlives rare crashes of one slot.
    std::chrono::milliseconds healthy_run = std::chrono::minutes(10);
    bool standby = false;
    // After start_all(), and after the standby took a slot, the next standby starts this much
    // later: its preparation then does not compete with the workers' own start or a recovery.
    std::chrono::milliseconds standby_delay{2000};
  };
  // The slot of a standby worker in Environment's argument.
  static constexpr int kStandbySlot = -1;
  // A slot's whole environment ("NAME=value" entries; see ProcessSpec in agents/process.h); for
  // kStandbySlot, the standby's (HDP_STANDBY=1).
  using Environment = std::function<std::vector<std::string>(int slot)>;
  // Called once for each process that becomes a slot's worker: one spawned for it, or the standby
  // handed it (not for a standby while it stands by, nor for a handover that failed).
  using Started = std::function<void(int slot)>;
  // Called for every exit the supervisor does not handle by restarting: a clean exit (0), an exit
  // of a stopping worker, or a slot that ran out of restarts.
  using ExitHandler = std::function<void(int slot, int status, bool restarts_exhausted)>;

  WorkerSupervisor(boost::asio::io_context& io, Options options, ExitHandler on_final_exit);
  ~WorkerSupervisor();

  // Starts every slot's worker (slots restart counters too); `started`, when set, is told each
  // worker that takes a slot from now on, restarts included.
  void start_all(Environment environment, Started started = {});
  // Returns true when `pid` was one of ours.
  bool on_exit(pid_t pid, int status);
  // Reaps every child that has exited (the agent's children are its workers) and hands each to
  // on_exit(); never blocks.
  void reap();

  std::vector<int> healthy() const;  // slots whose worker is running
  bool all_exited() const;
  int restarts_total() const { return restarts_total_; }  // every restart so far, all slots
  // To every running worker's process group, the standby's too; no standby is started again until
  // start_all().
  void signal_all(int signo);
  // SIGKILL every worker's group and the standby's and reap them now (blocks until they are gone:
  // SIGKILL cannot be ignored, so this is quick). Pending restarts are cancelled, and no standby
  // is started again until start_all().
  void kill_and_reap_all();
  pid_t standby_pid() const { return standby_.pid; }  // -1: none running
  int standbys_taken() const { return standbys_taken_; }  // restarts that a standby served

 private:
  struct Slot {
    pid_t pid = -1;
    int restarts = 0;  // in a row: since the last worker of this slot that ran healthy_run
    std::chrono::steady_clock::time_point started{};
    bool stopping = false;  // signalled by us: its exit is final
    std::unique_ptr<boost::asio::steady_timer> restart_timer;
    std::unique_ptr<elastic::Backoff> backoff;
  };
  struct Standby {
    pid_t pid = -1;
    int input = -1;  // the write end of its standard input
    int failures = 0;  // in a row, before it was needed
    bool stopping = false;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void start(int slot);
  // Hands `slot` to the standby; false (the standby is gone) when it could not be told.
  bool take_standby(int slot);
  void schedule_standby();
  void start_standby();
  void close_standby_input();
  void standby_exited(int status);

  boost::asio::io_context& io_;
  Options options_;
  ExitHandler on_final_exit_;
  Environment environment_;
  Started started_;
  std::vector<Slot> slots_;
  int restarts_total_ = 0;
  Standby standby_;
  int standbys_taken_ = 0;
};

}  // namespace hdp::agents
