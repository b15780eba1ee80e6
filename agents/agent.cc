#include "agents/agent.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agents/systemd_notify.h"
#include "agents/worker_supervisor.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/leader_lease.h"
#include "elastic/membership_controller.h"
#include "elastic/node_registration.h"
#include "elastic/worker_env.h"
#include "hdp/config.h"

namespace hdp::agents {
namespace {

namespace asio = boost::asio;
using namespace elastic;
using std::chrono::milliseconds;

class Agent {
 public:
  Agent(const AgentOptions& options, std::shared_ptr<Store> store)
      : options_(options),
        store_(std::move(store)),
        stop_signals_(io_, SIGTERM, SIGINT, SIGUSR1),
        child_signal_(io_, SIGCHLD),
        poll_timer_(io_),
        heartbeat_timer_(io_),
        watchdog_timer_(io_),
        drain_timer_(io_),
        supervisor_(io_, {options.worker_command, options.slots, options.max_restarts},
                    [this](int slot, int status, bool exhausted) { on_final_exit(slot, status, exhausted); }),
        registration_(store_, initial_lease(options), options.timing.lease),
        leader_(store_, "", options.timing.leader_lease),
        job_state_(store_) {}

  AgentOutcome run() {
    register_incarnation();
    log()->info("node {} registered (incarnation {}, {} slot(s)) in job {}", options_.node_id,
                registration_.lease().incarnation, options_.slots, options_.job);
    notify_ready("registered as " + registration_.member_id());
    start_workers();
    wait_for_stop_signal();
    wait_for_children();
    heartbeat();
    if (auto interval = watchdog_interval()) keep_watchdog(*interval);
    io_.run();
    if (error_) std::rethrow_exception(error_);
    return *outcome_;
  }

 private:
  static NodeLease initial_lease(const AgentOptions& options) {
    NodeLease lease;
    lease.node = options.node_id;
    lease.host = options.advertise_address;
    lease.pid = static_cast<int>(getpid());
    lease.version = HDP_VERSION;
    lease.slots = options.slots;
    for (int slot = 0; slot < options.slots; ++slot) lease.healthy.push_back(slot);
    return lease;
  }

  // A new incarnation: the job's config (again, in case the store lost it), a fresh lease, and a
  // leader candidacy under the new member id.
  void register_incarnation() {
    ensure_config();
    registration_.register_new_incarnation(options_.timing.registration_wait);
    leader_ = LeaderLease(store_, registration_.member_id(), options_.timing.leader_lease);
    controller_.reset();
    checked_generation_ = -1;
    member_ = false;
    announced_generation_.reset();
    announced_at_ = std::chrono::steady_clock::now();
  }

  // Registers a new incarnation after an eviction, or completes one that failed part way (each
  // retry resumes the same incarnation), and only then starts the workers.
  void complete_registration() {
    register_incarnation();
    log()->info("node {}: re-registered as incarnation {}", options_.node_id, registration_.lease().incarnation);
    notify_status("re-registered as " + registration_.member_id());
    start_workers();
  }

  // Membership converges from any state: an agent with a live lease and a healthy worker that is
  // not in the current generation (dropped while alive: a worker restarting on a one-slot node, a
  // lease value overwritten, a leader that lost its announcement or its view of `gen`) announces
  // its join again — at once when a generation without it is published after its last
  // announcement, else at most once per lease. The leader treats a known identity as one
  // candidate, so announcing again is idempotent. Costs one GET of `gen:<g>` per generation seen.
  void check_membership(const std::optional<std::string>& value) {
    std::int64_t number = 0;
    if (value) {
      try {
        number = decode_generation_number(*value, keys::kGeneration);
      } catch (const InvalidArgument&) {
        return;  // observe_generation() logged it
      }
    }
    if (number != checked_generation_) {
      bool member = false;
      if (number > 0) {
        const std::string key = keys::generation(number);
        auto record = store_->get(key);
        if (!record) return;  // the leader reports this; look again at the next heartbeat
        const Generation generation = decode_generation(*record, key);  // garbage: guarded() logs it
        const auto& lease = registration_.lease();
        member = std::any_of(generation.members.begin(), generation.members.end(), [&](const Member& m) {
          return m.node == lease.node && m.incarnation == lease.incarnation;
        });
      }
      checked_generation_ = number;
      member_ = member;
    }
    if (member_ || supervisor_.healthy().empty()) return;
    if (!announced_generation_) announced_generation_ = number;  // the generation our registration joined
    const bool newer = *announced_generation_ != number;
    const auto now = std::chrono::steady_clock::now();
    if (!newer && now - announced_at_ < options_.timing.lease) return;
    // The lease first (`SET … XX`: never reviving it), in case someone overwrote its value.
    if (!registration_.heartbeat(supervisor_.healthy(), last_generation_, /*rewrite=*/true).alive) return;
    registration_.announce();
    announced_at_ = now;
    announced_generation_ = number;
    if (newer) {
      log()->warn("node {}: generation {} is without this node (incarnation {}); announcing its join again",
                  options_.node_id, number, registration_.lease().incarnation);
    } else {
      log()->debug("node {}: still not in generation {}; announced its join again", options_.node_id, number);
    }
  }

  // The first agent writes the job's --nnodes; later agents must agree, so that no two leaders
  // ever apply different limits.
  void ensure_config() {
    const std::string wanted = encode(options_.nnodes);
    if (store_->compare_and_set(keys::kConfig, std::nullopt, wanted)) return;
    auto stored = store_->get(keys::kConfig);
    if (!stored) return ensure_config();  // erased between our two calls
    JobConfig existing = decode_job_config(*stored, keys::kConfig);
    if (existing.min_nodes != options_.nnodes.min_nodes || existing.max_nodes != options_.nnodes.max_nodes) {
      throw InvalidArgument("job '" + options_.job + "' runs with --nnodes " + std::to_string(existing.min_nodes) + ":" +
                            std::to_string(existing.max_nodes) + ", this agent was given " +
                            std::to_string(options_.nnodes.min_nodes) + ":" + std::to_string(options_.nnodes.max_nodes));
    }
  }

  // The worker's whole environment: the agent's, with every variable of the worker contract
  // (elastic/worker_env.h) replaced by this agent's values, so its flags win over what it inherited.
  std::vector<std::string> worker_environment(int slot) const {
    WorkerEnvironment values;
    values.job = options_.job;
    values.redis_url = options_.redis_url;
    values.redis_password_file = options_.redis_password_file;
    values.node_id = options_.node_id;
    values.incarnation = registration_.lease().incarnation;
    values.local_rank = slot;
    values.nproc_per_node = options_.slots;
    values.advertise_address = options_.advertise_address;
    values.agent_pid = static_cast<int>(getpid());
    return elastic::worker_environment(values, environ);
  }

  void start_workers() {
    supervisor_.start_all([this](int slot) { return worker_environment(slot); });
  }

  // Runs `body`, riding out store outages and refusing to act on garbage read from the store.
  template <typename Body>
  void guarded(const char* what, Body&& body) {
    try {
      body();
    } catch (const StoreUnavailable& e) {
      log()->warn("node {}: {} skipped, store unavailable: {}", options_.node_id, what, e.what());
    } catch (const InvalidArgument& e) {
      log()->error("node {}: {} skipped: {}", options_.node_id, what, e.what());
    } catch (...) {
      error_ = std::current_exception();
      io_.stop();
    }
  }

  // Remembers the highest generation seen (the lease reports it, so that numbering survives a Redis
  // wipe). A value that does not decode, or is out of range, is logged (once per distinct value)
  // and ignored, never remembered: it must not stop this agent from renewing or contending for the
  // leader lease, and the leader's tick refuses to act on it anyway.
  void observe_generation(const std::optional<std::string>& number) {
    if (!number) return;
    try {
      last_generation_ = std::max(last_generation_, decode_generation_number(*number, keys::kGeneration));
    } catch (const InvalidArgument& e) {
      if (bad_generation_logged_ != *number) log()->error("node {}: ignoring it: {}", options_.node_id, e.what());
      bad_generation_logged_ = *number;
    }
  }

  // Takes part in leader election with the leader key just read; on winning, starts the leader's
  // fast tick. Followers try at the heartbeat's pace (lease/3), so a dead leader's lease (lease/2)
  // is taken over within 5/6 of a lease.
  void contend_for_leadership(const std::optional<std::string>& holder) {
    if (draining_ || leader_.held() || !leader_.try_acquire_or_renew(holder)) return;
    controller_ = std::make_unique<MembershipController>(store_, registration_.member_id(), options_.nnodes,
                                                         options_.settle);
    lead();
  }

  // The leader's tick (every 200 ms, lease/10 for short leases): renew the lease and run the
  // membership controller. Stops when the lease is lost.
  void lead() {
    guarded("leader tick", [&] {
      auto head = store_->multi_get({keys::kLeader, keys::kGeneration});
      observe_generation(head[1]);
      if (!draining_ && leader_.try_acquire_or_renew(head[0])) {
        if (auto published = controller_->tick()) last_generation_ = std::max(last_generation_, *published);
      }
    });
    if (!leader_.held() || draining_) {
      controller_.reset();
      return;
    }
    poll_timer_.expires_after(options_.timing.leader_tick);
    poll_timer_.async_wait([this](const boost::system::error_code& error) {
      if (!error && controller_) lead();
    });
  }

  void heartbeat() {
    guarded("heartbeat", [&] {
      // A re-registration that failed part way (a store outage, garbage in `joins`) is completed
      // first: until then this node has no workers and nothing to heartbeat for.
      if (!registration_.registered()) return complete_registration();
      auto beat = registration_.heartbeat(supervisor_.healthy(), last_generation_);
      if (beat.alive) {
        observe_generation(beat.generation);
        check_membership(beat.generation);
        return contend_for_leadership(beat.leader);
      }
      log()->warn("node {}: lease of incarnation {} was lost (evicted); restarting workers as a new member",
                  options_.node_id, registration_.lease().incarnation);
      supervisor_.kill_and_reap_all();
      leader_.release();
      poll_timer_.cancel();
      job_state_.event("evicted", {{"node", options_.node_id}, {"incarnation", registration_.lease().incarnation}});
      complete_registration();
    });
    heartbeat_timer_.expires_after(options_.timing.heartbeat);
    heartbeat_timer_.async_wait([this](const boost::system::error_code& error) {
      if (!error && !draining_) heartbeat();
    });
  }

  void keep_watchdog(milliseconds interval) {
    notify_watchdog();
    watchdog_timer_.expires_after(interval);
    watchdog_timer_.async_wait([this, interval](const boost::system::error_code& error) {
      if (!error) keep_watchdog(interval);
    });
  }

  void wait_for_stop_signal() {
    stop_signals_.async_wait([this](const boost::system::error_code& error, int signo) {
      if (error) return;
      if (draining_) {
        log()->warn("node {}: second signal ({}); stopping now", options_.node_id, strsignal(signo));
        supervisor_.kill_and_reap_all();
        return finish(AgentOutcome::kDrained);
      }
      log()->info("node {}: {}: draining (up to {} ms)", options_.node_id, strsignal(signo), options_.drain_timeout.count());
      notify_status("draining");
      begin_stop(AgentOutcome::kDrained, SIGTERM);
      drain_timer_.expires_after(options_.drain_timeout);
      drain_timer_.async_wait([this](const boost::system::error_code& timer_error) {
        if (timer_error || outcome_) return;
        log()->warn("node {}: drain timeout; killing the workers", options_.node_id);
        supervisor_.kill_and_reap_all();
        finish(AgentOutcome::kDrained);
      });
      wait_for_stop_signal();
    });
  }

  void wait_for_children() {
    child_signal_.async_wait([this](const boost::system::error_code& error, int) {
      if (error) return;
      int status = 0;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) supervisor_.on_exit(pid, status);
      wait_for_children();
    });
  }

  void begin_stop(AgentOutcome outcome, int signo) {
    draining_ = true;
    stop_outcome_ = outcome;
    supervisor_.signal_all(signo);
    if (supervisor_.all_exited()) finish(outcome);
  }

  void on_final_exit(int slot, int status, bool exhausted) {
    if (exhausted) ++exhausted_slots_;
    if (draining_) {
      if (supervisor_.all_exited()) finish(*stop_outcome_);
      return;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 3) return begin_stop(AgentOutcome::kJobFailed, SIGTERM);
    if (code == 0) {
      // A worker that finished cleanly: the job is complete once every worker has.
      if (supervisor_.all_exited()) finish(AgentOutcome::kCompleted);
      return;
    }
    if (exhausted_slots_ == options_.slots) {
      error_ = std::make_exception_ptr(Error("node " + options_.node_id + ": every worker failed " +
                                             std::to_string(options_.max_restarts) + " restarts; giving up"));
      finish_with_error();
    }
  }

  void finish_with_error() {
    cleanup();
    io_.stop();
  }

  void finish(AgentOutcome outcome) {
    if (outcome_) return;
    outcome_ = outcome;
    cleanup();
    io_.stop();
  }

  void cleanup() {
    notify_stopping();
    supervisor_.kill_and_reap_all();
    try {
      leader_.release();
      registration_.deregister();
    } catch (const Error& e) {
      log()->warn("node {}: could not deregister: {}", options_.node_id, e.what());
    }
  }

  const AgentOptions& options_;
  std::shared_ptr<Store> store_;
  asio::io_context io_;
  asio::signal_set stop_signals_;
  asio::signal_set child_signal_;
  asio::steady_timer poll_timer_, heartbeat_timer_, watchdog_timer_, drain_timer_;
  WorkerSupervisor supervisor_;
  NodeRegistration registration_;
  LeaderLease leader_;
  std::unique_ptr<MembershipController> controller_;  // while leader
  JobState job_state_;
  std::int64_t last_generation_ = 0;
  std::optional<std::string> bad_generation_logged_;  // the last `gen` value observe_generation() refused
  // check_membership(): the generation last read and whether this incarnation is in it; when and
  // in which generation it last announced its join.
  std::int64_t checked_generation_ = -1;
  bool member_ = false;
  std::optional<std::int64_t> announced_generation_;
  std::chrono::steady_clock::time_point announced_at_{};
  bool draining_ = false;
  int exhausted_slots_ = 0;
  std::optional<AgentOutcome> stop_outcome_;  // what a stop in progress will return
  std::optional<AgentOutcome> outcome_;
  std::exception_ptr error_;
};

}  // namespace

AgentOutcome run_agent(const AgentOptions& options, std::shared_ptr<Store> job_store) {
  if (options.slots < 1) throw InvalidArgument("--nproc-per-node must be >= 1");
  if (options.worker_command.empty()) throw InvalidArgument("the worker command is empty");
  Agent agent(options, std::move(job_store));
  return agent.run();
}

}  // namespace hdp::agents
