#include "agents/worker_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agents/process.h"
#include "common/exit_codes.h"
#include "common/error.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "elastic/worker_env.h"

namespace hdp::agents {

WorkerExit classify_exit(int status) {
  if (!WIFEXITED(status)) return WorkerExit::kFailed;
  const int code = WEXITSTATUS(status);
  if (code == 0) return WorkerExit::kClean;
  if (code == kExitJobFailed || code == kExitUsage) return WorkerExit::kJobFailed;
  if (code == kExitRefused) return WorkerExit::kRefused;
  return WorkerExit::kFailed;
}

WorkerSupervisor::WorkerSupervisor(boost::asio::io_context& io, Options options, ExitHandler on_final_exit)
    : io_(io), options_(std::move(options)), on_final_exit_(std::move(on_final_exit)), slots_(options_.slots) {}

WorkerSupervisor::~WorkerSupervisor() { kill_and_reap_all(); }

void WorkerSupervisor::start_all(Environment environment, Started started) {
  environment_ = std::move(environment);
  started_ = std::move(started);
  for (int slot = 0; slot < options_.slots; ++slot) {
    slots_[slot].restarts = 0;
    slots_[slot].stopping = false;
    slots_[slot].backoff = std::make_unique<elastic::Backoff>(options_.backoff);
    start(slot);
  }
  standby_.stopping = false;
  standby_.failures = 0;
  if (standby_.pid < 0) schedule_standby();
}

void WorkerSupervisor::start(int slot) {
  slots_[slot].started = std::chrono::steady_clock::now();
  if (!(standby_.pid > 0 && take_standby(slot))) {
    slots_[slot].pid = spawn({options_.command, environment_(slot)});
    log()->info("worker {} started (pid {}): {}", slot, slots_[slot].pid, options_.command.front());
  }
  if (started_) started_(slot);
}

bool WorkerSupervisor::take_standby(int slot) {
  const pid_t pid = standby_.pid;
  std::string text;
  try {
    text = elastic::StandbyAssignment::of(environment_(slot)).encode();
  } catch (const InvalidArgument& e) {
    // A value the assignment cannot carry (a newline in a path): this slot starts a process of
    // its own, and the standby waits for the next restart.
    log()->warn("worker {}'s slot cannot be handed to the standby worker: {}; starting a new process", slot, e.what());
    return false;
  }
  // A few hundred bytes into an empty pipe: the write does not block. It fails with EPIPE (its
  // SIGPIPE blocked and consumed, common/sigpipe.h) when the standby died and was not reaped yet.
  SigpipeBlock block;
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(standby_.input, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log()->warn("the standby worker (pid {}) could not be given worker {}'s slot ({}); starting a new process", pid,
                  slot, std::strerror(errno));
      signal_group(pid, SIGKILL);  // reaped by reap() as the standby
      close_standby_input();
      return false;
    }
    written += static_cast<std::size_t>(n);
  }
  close_standby_input();
  standby_.pid = -1;
  standby_.failures = 0;  // it lived until it was needed: the next one starts a new row
  slots_[slot].pid = pid;
  ++standbys_taken_;
  log()->info("worker {} is the standby worker (pid {}): {}", slot, pid, options_.command.front());
  schedule_standby();
  return true;
}

void WorkerSupervisor::schedule_standby() {
  // Without restarts no slot would ever be handed over.
  if (!options_.standby || options_.max_restarts == 0 || standby_.stopping) return;
  standby_.timer = std::make_unique<boost::asio::steady_timer>(io_, options_.standby_delay);
  standby_.timer->async_wait([this](const boost::system::error_code& error) {
    if (!error && !standby_.stopping && standby_.pid < 0) start_standby();
  });
}

void WorkerSupervisor::start_standby() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    log()->warn("no standby worker: pipe: {}", std::strerror(errno));
    return;
  }
  try {
    standby_.pid = spawn({.argv = options_.command, .environment = environment_(kStandbySlot), .stdin_fd = fds[0]});
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[0]);
  standby_.input = fds[1];
  log()->info("standby worker started (pid {})", standby_.pid);
}

void WorkerSupervisor::close_standby_input() {
  if (standby_.input >= 0) close(standby_.input);
  standby_.input = -1;
}

void WorkerSupervisor::standby_exited(int status) {
  const pid_t pid = standby_.pid;
  standby_.pid = -1;
  close_standby_input();
  signal_group(pid, SIGKILL);
  if (standby_.stopping) return;
  if (const WorkerExit kind = classify_exit(status); kind == WorkerExit::kJobFailed || kind == WorkerExit::kRefused) {
    // Its configuration cannot run (exit 2), the job failed (exit 3) or refused it (exit 5): the
    // slots' own workers report it; another standby would fail the same way.
    log()->error("the standby worker (pid {}) ended: {}; no standby from now on", pid, describe_status(status));
    standby_.stopping = true;
    return;
  }
  if (++standby_.failures > options_.max_restarts) {
    log()->error("the standby worker (pid {}) ended: {}; {} in a row: no standby from now on (restarts start new "
                 "processes)", pid, describe_status(status), standby_.failures);
    return;
  }
  log()->warn("the standby worker (pid {}) ended before it was needed: {}; another in {} ms", pid,
              describe_status(status), options_.standby_delay.count());
  schedule_standby();
}

bool WorkerSupervisor::on_exit(pid_t pid, int status) {
  if (pid == standby_.pid) {
    standby_exited(status);
    return true;
  }
  for (int slot = 0; slot < options_.slots; ++slot) {
    Slot& s = slots_[slot];
    if (s.pid != pid) continue;
    s.pid = -1;
    signal_group(pid, SIGKILL);  // whatever the worker left running in its group goes with it
    const WorkerExit kind = classify_exit(status);
    if (s.restarts > 0 && std::chrono::steady_clock::now() - s.started >= options_.healthy_run) {
      s.restarts = 0;  // it ran long enough: not part of a crash loop
      s.backoff->reset();
    }
    if (s.stopping || kind == WorkerExit::kClean) {
      log()->info("worker {} (pid {}) ended: {}", slot, pid, describe_status(status));
      on_final_exit_(slot, status, false);
    } else if (s.restarts >= options_.max_restarts) {
      log()->error("worker {} (pid {}) failed: {}; no restarts left ({} used)", slot, pid, describe_status(status),
                   s.restarts);
      on_final_exit_(slot, status, true);
    } else if (kind == WorkerExit::kJobFailed) {
      log()->error("worker {} (pid {}) reports the job failed ({})", slot, pid, describe_status(status));
      on_final_exit_(slot, status, false);
    } else if (kind == WorkerExit::kRefused) {
      log()->error("worker {} (pid {}) was refused by the running job ({})", slot, pid, describe_status(status));
      on_final_exit_(slot, status, false);
    } else {
      ++s.restarts;
      ++restarts_total_;
      // The first restart is at once: a worker that crashed once holds up its peers, which wait
      // for it in the next generation (its slot stays in the lease). A worker that keeps failing
      // is restarted with backoff from its second restart on.
      const auto delay = s.restarts == 1 ? std::chrono::milliseconds(0) : s.backoff->next();
      log()->warn("worker {} (pid {}) failed: {}; restart {}/{} in {} ms", slot, pid, describe_status(status),
                  s.restarts, options_.max_restarts, delay.count());
      s.restart_timer = std::make_unique<boost::asio::steady_timer>(io_, delay);
      s.restart_timer->async_wait([this, slot](const boost::system::error_code& error) {
        if (!error && !slots_[slot].stopping && slots_[slot].pid < 0) start(slot);
      });
    }
    return true;
  }
  return false;
}

void WorkerSupervisor::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) on_exit(pid, status);
}

std::vector<int> WorkerSupervisor::healthy() const {
  std::vector<int> result;
  for (int slot = 0; slot < options_.slots; ++slot) {
    if (slots_[slot].pid > 0) result.push_back(slot);
  }
  return result;
}

bool WorkerSupervisor::all_exited() const { return healthy().empty(); }

void WorkerSupervisor::signal_all(int signo) {
  standby_.stopping = true;
  if (standby_.timer) standby_.timer->cancel();
  if (standby_.pid > 0) signal_group(standby_.pid, signo);
  for (auto& slot : slots_) {
    slot.stopping = true;
    if (slot.restart_timer) slot.restart_timer->cancel();
    if (slot.pid > 0) signal_group(slot.pid, signo);
  }
}

void WorkerSupervisor::kill_and_reap_all() {
  standby_.stopping = true;  // until start_all(): a timer handler already queued starts none
  if (standby_.timer) standby_.timer->cancel();
  if (standby_.pid > 0) {
    signal_group(standby_.pid, SIGKILL);
    int status = 0;
    waitpid(standby_.pid, &status, 0);
    standby_.pid = -1;
  }
  close_standby_input();
  for (auto& slot : slots_) {
    if (slot.restart_timer) slot.restart_timer->cancel();
    if (slot.pid <= 0) continue;
    signal_group(slot.pid, SIGKILL);
    int status = 0;
    waitpid(slot.pid, &status, 0);
    slot.pid = -1;
  }
}

}  // namespace hdp::agents
