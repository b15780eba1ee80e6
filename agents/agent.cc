// File: agents/agent.cc
//
// `hdp agent`'s orchestration and event loop (agent.h): one Asio thread runs the heartbeat, the
// leader's tick, the signals, the drain and stop, and the end of the run; the workers are
// SupervisedWorkers (supervised_workers.h) and the generation stream is watched by a
// GenerationWatcher (generation_watcher.h).
#include "agents/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agents/agent_metrics.h"
#include "agents/generation_watcher.h"
#include "agents/node_directory.h"
#include "agents/supervised_workers.h"
#include "agents/systemd_notify.h"
#include "agents/worker_channel.h"
#include "agents/worker_supervisor.h"
#include "common/error.h"
#include "common/log.h"
#include "common/release.h"
#include "elastic/control.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/membership_agent.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "hdp/config.h"
#include "metrics/timed_store.h"

namespace hdp::agents {
namespace {

namespace asio = boost::asio;
using namespace elastic;
using std::chrono::milliseconds;

class Agent {
 public:
  Agent(const AgentOptions& options, std::shared_ptr<Store> store, std::shared_ptr<const RedisStore> redis,
        AgentMetrics* metrics, const std::filesystem::path& node_directory)
      : options_(options),
        metrics_(metrics),
        stop_signals_(io_, SIGTERM, SIGINT, SIGUSR1),
        child_signal_(io_, SIGCHLD),
        poll_timer_(io_),
        heartbeat_timer_(io_),
        watchdog_timer_(io_),
        drain_timer_(io_),
        recheck_timer_(io_),
        supervisor_(io_,
                    {.command = options.worker_command,
                     .slots = options.slots,
                     .max_restarts = options.max_restarts,
                     .standby = options.standby_worker},
                    [this](int slot, int status, bool exhausted) { on_final_exit(slot, status, exhausted); }),
        channel_(io_, options.timing.heartbeat, [this](std::int64_t g) { on_generation_broke(g); },
                 [this](bool preparing) { on_workers_preparing(preparing); }),
        workers_(options, supervisor_, metrics, channel_, node_directory),
        control_(control_options(options, redis), store, workers_),
        redis_(std::move(redis)),
        store_primary_(control_.store(), redis_ && redis_->endpoint().is_sentinel()),
        watcher_(store, control_.records(), io_, [this](std::optional<std::int64_t> g) { on_watch(g); }) {}

  AgentOutcome run() {
    // A job that was stopped is resumed by starting its agents again (hdp run, a requeued Slurm
    // job, systemd): its `stopped` outcome, which ends publishing, goes first.
    if (elastic::clear_stopped_outcome(control_.store())) {
      log()->info("node {}: job {} was stopped; resuming it", options_.node_id, options_.job);
    }
    if (elastic::withdraw_stop(control_.store())) {
      log()->info("node {}: a pending `hdp stop` of job {} was withdrawn: starting an agent resumes the job",
                  options_.node_id, options_.job);
    }
    control_.register_node();
    notify_ready("registered as " + control_.member_id());
    wait_for_stop_signal();
    wait_for_children();
    heartbeat();
    if (auto interval = watchdog_interval()) keep_watchdog(*interval);
    io_.run();
    if (error_) std::rethrow_exception(error_);
    return *outcome_;
  }

 private:
  static MembershipAgentOptions control_options(const AgentOptions& options,
                                                const std::shared_ptr<const RedisStore>& redis) {
    MembershipAgentOptions control;
    if (redis) {
      control.store_connection = [redis] { return redis->reconnects(); };
      control.presence = std::make_shared<elastic::AgentPresence>(options.job, [redis] { return redis->client_names(); });
    }
    control.job = options.job;
    control.node.node = options.node_id;
    control.node.host = options.advertise_address;
    control.node.pid = static_cast<int>(getpid());
    control.node.version = HDP_VERSION;
    control.node.wire = kWireProtocol;
    control.node.slots = options.slots;
    for (int slot = 0; slot < options.slots; ++slot) control.node.healthy.push_back(slot);
    control.nnodes = options.nnodes;
    control.timing = options.timing;
    control.settle = options.settle;
    return control;
  }

  // Runs one step of the control plane; an error it does not ride out ends the agent.
  template <typename Body>
  bool control(Body&& body) {
    try {
      body();
      return true;
    } catch (...) {
      error_ = std::current_exception();
      finish_with_error();
      return false;
    }
  }

  // The newest generation to the workers, with its record when this agent holds it (the watch
  // derived it from the stream, or the membership check read it).
  void tell_workers() {
    const std::int64_t g = control_.last_generation();
    channel_.publish(g, control_.records()->get(g));
  }

  // The leader's tick (every 200 ms, lease/10 for short leases), while this agent leads.
  void lead() {
    if (!control([&] { control_.lead(); })) return;
    tell_workers();
    if (!control_.leading()) {
      leading_ = false;
      return;
    }
    poll_timer_.expires_after(options_.timing.leader_tick);
    poll_timer_.async_wait([this](const boost::system::error_code& error) {
      if (error == boost::asio::error::operation_aborted && std::exchange(lead_now_, false)) return lead();
      if (error) {
        leading_ = false;
        return;
      }
      lead();
    });
  }

  // A worker said generation g broke (its peer's connection failed, or a collective timed out): a
  // leader ticks now rather than at its next tick; a follower whose leader's agent is gone takes
  // the leader lease over and leads now (MembershipAgent::generation_broke). Once per generation
  // (none for a generation older than the newest this agent knows), and again every
  // kLeaderRecheck while the check finds the leader's agent connected, no newer generation came
  // and kLeaderRechecks are not spent: the kernel closes a dying node's sockets process by
  // process, so its workers' peers can report the break while the leader's agent is still on its
  // way out (killed with them, or an instant after), and a single check then left the takeover to
  // the leader lease (tests/trainer/data_plane_detection_test.cc). When the leader is alive it
  // publishes the next generation within a tick, which ends the rechecks.
  static constexpr milliseconds kLeaderRecheck{100};
  static constexpr int kLeaderRechecks = 10;

  void on_generation_broke(std::int64_t g) {
    if (outcome_ || error_ || g <= broken_seen_) return;
    broken_seen_ = g;
    check_leader_after_break(g, kLeaderRechecks);
  }

  void check_leader_after_break(std::int64_t g, int rechecks) {
    if (outcome_ || error_ || broken_seen_ != g || control_.last_generation() > g) return;
    if (!control_.leading()) watcher_.interrupt();  // the leader check needs the connection the watch holds
    MembershipAgent::BreakCheck check;
    if (!control([&] { check = control_.generation_broke(g); })) return;
    const bool leads = check.leads;
    if (!leads) {
      if (rechecks <= 0 || !check.leader_connected) return;
      recheck_timer_.expires_after(kLeaderRecheck);
      recheck_timer_.async_wait([this, g, rechecks](const boost::system::error_code& error) {
        if (!error) check_leader_after_break(g, rechecks - 1);
      });
      return;
    }
    if (!leading_) {
      leading_ = true;
      return lead();
    }
    lead_now_ = poll_timer_.cancel() > 0;  // the aborted wait runs lead() at once
  }

  // Whether the node's workers are setting themselves up changed (agents/worker_channel.h): the
  // store is told at once (elastic/preparing_workers.h), over the connection the watch holds.
  void on_workers_preparing(bool preparing) {
    if (outcome_ || error_) return;
    if (!control_.leading() && control_.workers_preparing_calls_store(preparing)) watcher_.interrupt();
    control([&] { control_.workers_preparing(preparing); });
  }

  // A read of the generation stream ended: act on a new generation at once (tell the workers,
  // check the membership), then let the watch block again until the next heartbeat.
  void on_watch(std::optional<std::int64_t> generation) {
    if (outcome_ || error_) return;
    if (generation) {
      if (!control([&] { control_.notified(*generation); })) return;
      tell_workers();
    }
    // A read that ended within the margin before the heartbeat (its grant ran out, or it was
    // interrupted there) cannot be granted again: the heartbeat, which reads `gen` and grants the
    // next read, comes now rather than at its timer, so that the watch does not sit out the margin
    // (up to 100 ms of every heartbeat interval, in which a new generation reached this node's
    // workers only at the heartbeat).
    if (!grant_watch() && heartbeat_timer_.cancel() > 0) heartbeat();
  }

  // The connection is the watch's until shortly before the next heartbeat (which needs it), while
  // this agent follows (draining too: its workers may still have to stop in a next generation);
  // a leader reads `gen` every tick. The margin is for Redis's timeout of a blocking read, which
  // it checks at its own tick (every 100 ms at the default `hz 10`): at heartbeats of 1 s and more
  // a read granted until the margin ends by the heartbeat; a tenth of a shorter one covers less,
  // and a read that runs into the heartbeat holds it up by the rest. False when the grant would
  // leave no read worth starting (GenerationWatcher::kShortestRead).
  bool grant_watch() {
    if (control_.leading()) return true;
    const auto margin = std::min(milliseconds(100), options_.timing.heartbeat / 10);
    return watcher_.allow_until(next_heartbeat_ - margin);
  }

  void heartbeat() {
    const std::string member = control_.member_id();
    const auto started = std::chrono::steady_clock::now();
    if (!control([&] { control_.heartbeat(); })) return;
    if (control_.refused()) return finish(AgentOutcome::kRefused);  // another build than the job's (logged)
    check_store_outage();
    act_on_requests();
    record_store_primary();
    if (metrics_) {
      metrics_->update({.heartbeat_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                        .renewed = control_.last_renewed(),
                        .view = control_.view(),
                        .last_generation = control_.last_generation(),
                        .leader = control_.leading(),
                        .workers_running = static_cast<int>(supervisor_.healthy().size()),
                        .restarts_total = supervisor_.restarts_total(),
                        .store_primary = redis_ ? redis_->primary() : std::string(),
                        .store_failovers = redis_ ? redis_->failovers() : 0});
    }
    if (control_.member_id() != member) notify_status("re-registered as " + control_.member_id());
    tell_workers();  // the fallback to the watch: `gen` as read now
    if (control_.leading() && !leading_) {
      leading_ = true;
      lead();
    }
    next_heartbeat_ = std::chrono::steady_clock::now() + options_.timing.heartbeat;
    grant_watch();
    heartbeat_timer_.expires_after(options_.timing.heartbeat);
    heartbeat_timer_.async_wait([this](const boost::system::error_code& error) {
      // A draining agent keeps its lease until its workers are out (they leave at a step boundary:
      // until then the node is a member), then deregisters.
      if (!error && !outcome_) heartbeat();
    });
  }

  // Past --store-outage-limit without a single store call answered: the job cannot change its
  // membership, record a step or stop by request; the workers stop at a step boundary with a
  // final checkpoint on disk (SIGUSR1, as a job stop) and the agent exits 1 naming the store.
  void check_store_outage() {
    const auto since = control_.unreachable_since();
    if (draining_ || options_.store_outage_limit.count() <= 0 || !since) return;
    const auto out = std::chrono::steady_clock::now() - *since;
    if (out < options_.store_outage_limit) return;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(out).count();
    const std::string what = "the store (redis " + elastic::mask_password(options_.redis_url) +
                             ") has answered no call for " + std::to_string(seconds) + " s (--store-outage-limit " +
                             std::to_string(options_.store_outage_limit.count() / 1000) + " s)";
    log()->error("node {}: {}: stopping the workers", options_.node_id, what);
    error_ = std::make_exception_ptr(Error("node " + options_.node_id + ": " + what + "; the workers were stopped"));
    start_stop(/*job_stop=*/true, "the store is gone");
  }

  // The primary this agent's connection went to, in the job's record (StorePrimaryRecord): no
  // command unless the connection was opened again since the last record. A store error (the
  // primary moving again, garbage in the keys) is logged, at most every 30 s while it repeats, and
  // the step retried at the next heartbeat: nothing decides from the record.
  void record_store_primary() {
    if (!redis_) return;
    try {
      store_primary_.record(redis_->primary(), redis_->reconnects());
      store_primary_error_.clear();
    } catch (const Error& e) {
      const auto now = std::chrono::steady_clock::now();
      if (e.what() != store_primary_error_ || now - store_primary_logged_ >= std::chrono::seconds(30)) {
        log()->warn("node {}: recording the store's primary: {} (retried at the next heartbeat)", options_.node_id,
                    e.what());
        store_primary_error_ = e.what();
        store_primary_logged_ = now;
      }
    }
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
      // SIGUSR1 (Slurm's scancel --signal, a stop for the whole job): the workers get SIGUSR1 and
      // every rank stops. SIGTERM/SIGINT (systemctl stop, a drain of this node): the workers get
      // SIGTERM and this node leaves while the job goes on (trainer/trainer.h).
      start_stop(signo == SIGUSR1, strsignal(signo));
      wait_for_stop_signal();
    });
  }

  // A job stop (the workers get SIGUSR1) or a drain of this node (SIGTERM), from a signal or a
  // request (`why`); the agent exits 4 once its workers are out, or at the drain timeout.
  void start_stop(bool job_stop, const std::string& why) {
    log()->info("node {}: {}: {} (up to {} ms)", options_.node_id, why, job_stop ? "stopping the job" : "draining this node",
                options_.drain_timeout.count());
    notify_status(job_stop ? "stopping the job" : "draining");
    begin_stop(AgentOutcome::kDrained, job_stop ? SIGUSR1 : SIGTERM);
    drain_timer_.expires_after(options_.drain_timeout);
    drain_timer_.async_wait([this](const boost::system::error_code& timer_error) {
      if (timer_error || outcome_) return;
      log()->warn("node {}: drain timeout; killing the workers", options_.node_id);
      supervisor_.kill_and_reap_all();
      finish(AgentOutcome::kDrained);
    });
  }

  // The requests the heartbeat read (elastic/control.h): `hdp stop` acts as SIGUSR1 here, `hdp
  // drain` of this node's incarnation as SIGTERM.
  void act_on_requests() {
    if (draining_ || outcome_) return;
    const elastic::ControlRequests& requests = control_.requests();
    if (requests.stop) {
      acted_on_ = {"stop", requests.stop->id};
      return start_stop(true, "hdp stop (asked by " + requests.stop->by + ")");
    }
    if (const auto* drain = requests.drain_of(options_.node_id, control_.lease().incarnation)) {
      acted_on_ = {"drain", drain->id};
      start_stop(false, "hdp drain (asked by " + drain->by + ")");
    }
  }

  // The request this agent acted on is done: its workers are out.
  void finish_acted_on() {
    if (!acted_on_) return;
    const auto& [op, id] = *acted_on_;
    if (op == "drain") {
      elastic::finish_request(control_.store(), op, id, "left", {{"incarnation", control_.lease().incarnation}},
                              options_.node_id);
      return;
    }
    std::optional<std::string> outcome;
    try {
      outcome = control_.store().get(elastic::keys::kOutcome);
    } catch (const Error&) {
    }
    elastic::finish_request(control_.store(), op, id, outcome.value_or("agents_stopped"));
  }

  void wait_for_children() {
    child_signal_.async_wait([this](const boost::system::error_code& error, int) {
      if (error) return;
      supervisor_.reap();
      workers_.forget_gone();
      wait_for_children();
    });
  }

  void begin_stop(AgentOutcome outcome, int signo) {
    draining_ = true;
    stop_outcome_ = outcome;
    supervisor_.signal_all(signo);
    if (supervisor_.all_exited()) finish(outcome);
  }

  void on_final_exit(int /*slot*/, int status, bool exhausted) {
    if (exhausted) ++exhausted_slots_;
    if (draining_) {
      if (supervisor_.all_exited()) finish(*stop_outcome_);
      return;
    }
    switch (classify_exit(status)) {
      case WorkerExit::kJobFailed: return begin_stop(AgentOutcome::kJobFailed, SIGTERM);
      case WorkerExit::kRefused: return begin_stop(AgentOutcome::kRefused, SIGTERM);
      case WorkerExit::kClean:
        // The job completed, or its ranks agreed to stop (a signal reached a worker but not this
        // agent); the job's outcome tells which.
        if (supervisor_.all_exited()) {
          watcher_.stop();  // the store is needed now, not at the next heartbeat
          finish(elastic::job_completed(control_.store()) ? AgentOutcome::kCompleted : AgentOutcome::kDrained);
        }
        return;
      case WorkerExit::kFailed: break;
    }
    if (exhausted_slots_ == options_.slots) {
      error_ = std::make_exception_ptr(Error("node " + options_.node_id + ": every worker failed " +
                                             std::to_string(options_.max_restarts) + " restarts in a row; giving up"));
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
    watcher_.stop();
    supervisor_.kill_and_reap_all();
    channel_.close();
    finish_acted_on();
    control_.leave();
  }

  const AgentOptions& options_;
  AgentMetrics* metrics_;  // null: no metrics
  asio::io_context io_;
  asio::signal_set stop_signals_;
  asio::signal_set child_signal_;
  asio::steady_timer poll_timer_, heartbeat_timer_, watchdog_timer_, drain_timer_, recheck_timer_;
  WorkerSupervisor supervisor_;
  WorkerChannel channel_;
  SupervisedWorkers workers_;
  MembershipAgent control_;
  std::shared_ptr<const RedisStore> redis_;  // null: the store is not a RedisStore
  std::int64_t broken_seen_ = 0;  // the newest generation a worker said broke
  bool lead_now_ = false;         // poll_timer_'s wait was cancelled to tick at once
  StorePrimaryRecord store_primary_;         // over control_.store(); used only with redis_
  std::string store_primary_error_;          // the last error of record_store_primary() ("" after a success)
  std::chrono::steady_clock::time_point store_primary_logged_{};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::optional<std::pair<std::string, std::string>> acted_on_;  // the request (op, id) this agent acted on
  bool leading_ = false;  // the leader tick's timer is running
  bool draining_ = false;
  int exhausted_slots_ = 0;
  std::optional<AgentOutcome> stop_outcome_;  // what a stop in progress will return
  std::optional<AgentOutcome> outcome_;
  std::exception_ptr error_;
  GenerationWatcher watcher_;  // last: its thread posts to the members above
};

}  // namespace

AgentOutcome run_agent(const AgentOptions& options, std::shared_ptr<Store> job_store,
                       std::shared_ptr<const RedisStore> redis) {
  if (options.slots < 1) throw InvalidArgument("--nproc-per-node must be >= 1");
  if (options.worker_command.empty()) throw InvalidArgument("the worker command is empty");
  // The node's directory is a saving for the workers (their data's index) unless metrics need it
  // for their files: without a temporary directory the agent runs without it.
  std::optional<NodeDirectory> node_directory;
  try {
    node_directory.emplace();
  } catch (const Error& e) {
    if (options.metrics_port) throw;
    log()->warn("node {}: {}; its workers share no directory (each indexes its data itself)", options.node_id,
                e.what());
  }
  const std::filesystem::path node_dir = node_directory ? node_directory->path() : std::filesystem::path();
  // The metrics endpoint first: a port in use fails the agent before it registers.
  std::unique_ptr<AgentMetrics> metrics;
  if (options.metrics_port) {
    metrics = std::make_unique<AgentMetrics>(AgentMetricsOptions{.job = options.job,
                                                                 .node = options.node_id,
                                                                 .slots = options.slots,
                                                                 .address = options.metrics_address,
                                                                 .port = *options.metrics_port,
                                                                 .lease = options.timing.lease,
                                                                 .directory = node_dir});
    job_store = std::make_shared<metrics::TimedStore>(std::move(job_store), metrics->registry(),
                                                      metrics::Labels{{"hdp_job", options.job}, {"node", options.node_id}});
  }
  Agent agent(options, std::move(job_store), std::move(redis), metrics.get(), node_dir);
  return agent.run();
}

}  // namespace hdp::agents
