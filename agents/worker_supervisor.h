// File: agents/worker_supervisor.h
//
// One worker process per slot: started with its slot's environment, restarted when it crashes (at
// once the first time, then with backoff; up to max_restarts per slot in a row, a worker that ran
// for healthy_run before it failed counting as the first of a new row; never after exit 3 or 2,
// common/exit_codes.h: see classify_exit()), never left behind (process groups + PDEATHSIG, see agents/process.h). The
// agent calls reap() on SIGCHLD, which hands each exit to on_exit().
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
  };
  // A slot's whole environment ("NAME=value" entries; see ProcessSpec in agents/process.h).
  using Environment = std::function<std::vector<std::string>(int slot)>;
  // Called for every exit the supervisor does not handle by restarting: a clean exit (0), an exit
  // of a stopping worker, or a slot that ran out of restarts.
  using ExitHandler = std::function<void(int slot, int status, bool restarts_exhausted)>;

  WorkerSupervisor(boost::asio::io_context& io, Options options, ExitHandler on_final_exit);
  ~WorkerSupervisor();

  // Starts every slot's worker (slots restart counters too).
  void start_all(Environment environment);
  // Returns true when `pid` was one of ours.
  bool on_exit(pid_t pid, int status);
  // Reaps every child that has exited (the agent's children are its workers) and hands each to
  // on_exit(); never blocks.
  void reap();

  std::vector<int> healthy() const;  // slots whose worker is running
  bool all_exited() const;
  int restarts_total() const { return restarts_total_; }  // every restart so far, all slots
  void signal_all(int signo);  // to every running worker's process group
  // SIGKILL every worker's group and reap them now (blocks until they are gone: SIGKILL cannot be
  // ignored, so this is quick). Pending restarts are cancelled.
  void kill_and_reap_all();

 private:
  struct Slot {
    pid_t pid = -1;
    int restarts = 0;  // in a row: since the last worker of this slot that ran healthy_run
    std::chrono::steady_clock::time_point started{};
    bool stopping = false;  // signalled by us: its exit is final
    std::unique_ptr<boost::asio::steady_timer> restart_timer;
    std::unique_ptr<elastic::Backoff> backoff;
  };
  void start(int slot);

  boost::asio::io_context& io_;
  Options options_;
  ExitHandler on_final_exit_;
  Environment environment_;
  std::vector<Slot> slots_;
  int restarts_total_ = 0;
};

}  // namespace hdp::agents
