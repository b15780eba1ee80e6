// `hdp drain|cordon|uncordon|stop|checkpoint --job J ...`: requests that act on a running job from
// any machine that can reach its Redis (elastic/control.h; docs/operations.md). Each writes the
// request and a `request` event in one commit and returns; with --wait it then follows the request
// until the job reports it done (its `request_done` event), or gives up after --timeout-s.
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/job_options.h"
#include "common/error.h"
#include "common/text.h"
#include "elastic/control.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/redis_url.h"

namespace hdp::cli {
namespace {

struct ControlFlags {
  JobOptions job;
  std::string node;
  bool wait = false;
  int timeout_s = 600;
};

// The job's store, once the job is known to exist there.
std::shared_ptr<elastic::Store> existing_job(const ControlFlags& flags) {
  auto store = flags.job.connect_job();
  if (!elastic::JobState(store).exists()) {
    throw InvalidArgument("no job '" + flags.job.job_id() + "' in redis at " +
                          elastic::parse_redis_url(flags.job.redis.url).display());
  }
  return store;
}

// A job that has ended (its `outcome` key: completed, or stopped until an agent starts it again)
// has no rank to take up a stop, a checkpoint or a setting: such a request would stay pending.
// A stopped job may still take settings for its resumption (`stopped_too` false).
void refuse_if_ended(elastic::Store& store, const ControlFlags& flags, const std::string& what, bool stopped_too = true) {
  const auto outcome = store.get(elastic::keys::kOutcome);
  if (outcome == "completed" || (stopped_too && outcome == "stopped")) {
    throw InvalidArgument("job '" + flags.job.job_id() + "' has " + *outcome + ": no rank to " + what +
                          (*outcome == "stopped" ? " (start its agents again to resume it)" : ""));
  }
}

// The incarnation of `node` that a drain would take out: the one its claim names, with a live lease.
std::string live_incarnation(elastic::Store& store, const std::string& node, const std::string& job) {
  const auto incarnation = store.get(elastic::keys::node(node));
  if (!incarnation) throw InvalidArgument("node '" + node + "' is not registered in job '" + job + "'");
  if (!store.get(elastic::keys::lease(node, *incarnation))) {
    throw InvalidArgument("node '" + node + "' has no live agent in job '" + job + "' (incarnation " + *incarnation +
                          "'s lease expired): nothing to drain");
  }
  return *incarnation;
}

// Follows request `id` until its `request_done` event; prints it. Throws Error at the timeout.
void wait_for(elastic::Store& store, const std::string& op, const std::string& id, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& entry : store.stream_tail(elastic::keys::kEvents, elastic::kEventsKept)) {
      bool done = false, ours = false;
      for (const auto& [k, v] : entry.fields) {
        done = done || (k == "type" && v == "request_done");
        ours = ours || (k == "id" && v == id);
      }
      if (!done || !ours) continue;
      std::string line;
      for (const auto& [k, v] : entry.fields) {
        if (k != "type" && k != "time_ms" && k != "op" && k != "id") line += " " + k + "=" + v;
      }
      std::cout << op << " " << id << " done:" << line << std::endl;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  throw Error("the " + op + " request " + id + " was not done within " + std::to_string(timeout_s) +
              " s (it stays pending; `hdp status` shows it)");
}

CLI::App* control_subcommand(CLI::App& app, const char* name, const char* help, const std::shared_ptr<ControlFlags>& flags,
                             bool node) {
  CLI::App* command = app.add_subcommand(name, help);
  flags->job.add_to(*command);
  if (node) command->add_option("node", flags->node, "The node id (its agent's --node-id)")->required();
  return command;
}

void add_wait(CLI::App& command, ControlFlags& flags, const char* what) {
  command.add_flag("--wait", flags.wait, std::string("Wait until ") + what + " and print the outcome");
  command.add_option("--timeout-s", flags.timeout_s, "How long --wait waits")->check(CLI::Range(1, 86400))->capture_default_str();
}

}  // namespace

void add_control_commands(CLI::App& app) {
  {
    auto flags = std::make_shared<ControlFlags>();
    CLI::App* command = control_subcommand(
        app, "drain", "Take one node out of a running job at a step boundary; the job goes on without it", flags, true);
    add_wait(*command, *flags, "the node has left");
    command->callback([flags] {
      auto store = existing_job(*flags);
      const std::string incarnation = live_incarnation(*store, flags->node, flags->job.job_id());
      elastic::JobControl control(store, elastic::requester());
      const elastic::Request r = control.drain(flags->node, incarnation);
      std::cout << "drain of " << flags->node << " (incarnation " << incarnation << ") requested by " << r.by << " ("
                << r.id << "); the ranks act at their next step boundary (or its agent at its next heartbeat)" << std::endl;
      if (flags->wait) wait_for(*store, "drain", r.id, flags->timeout_s);
    });
  }
  {
    auto flags = std::make_shared<ControlFlags>();
    CLI::App* command = control_subcommand(
        app, "stop", "Stop a running job as a whole: every rank at one step, a final checkpoint", flags, false);
    add_wait(*command, *flags, "the job has stopped");
    command->callback([flags] {
      auto store = existing_job(*flags);
      refuse_if_ended(*store, *flags, "stop");
      const elastic::Request r = elastic::JobControl(store, elastic::requester()).stop();
      std::cout << "stop of job " << flags->job.job_id() << " requested by " << r.by << " (" << r.id
                << "); the ranks stop at their next step boundary (or the agents at their next heartbeat)" << std::endl;
      if (flags->wait) wait_for(*store, "stop", r.id, flags->timeout_s);
    });
  }
  {
    auto flags = std::make_shared<ControlFlags>();
    CLI::App* command = control_subcommand(
        app, "checkpoint", "Have a running job save a checkpoint at its next step", flags, false);
    add_wait(*command, *flags, "the checkpoint is committed");
    command->callback([flags] {
      auto store = existing_job(*flags);
      refuse_if_ended(*store, *flags, "save a checkpoint");
      const elastic::Request r = elastic::JobControl(store, elastic::requester()).checkpoint();
      std::cout << "checkpoint of job " << flags->job.job_id() << " requested by " << r.by << " (" << r.id
                << "); rank 0 takes it up at its next step" << std::endl;
      if (flags->wait) wait_for(*store, "checkpoint", r.id, flags->timeout_s);
    });
  }
  {
    auto flags = std::make_shared<ControlFlags>();
    auto assignments = std::make_shared<std::vector<std::string>>();
    CLI::App* command = control_subcommand(
        app, "config", "Show the live settings of a running job, or change them (config set NAME=VALUE ...)", flags,
        false);
    CLI::App* set = command->add_subcommand(
        "set", "Change live settings: in force on every rank from one step on (" +
                   join(elastic::live_settings(), ", ",
                        [](const elastic::LiveSetting& s) { return std::string(s.name) + ": " + std::string(s.flag); }) +
                   ")");
    set->add_option("assignments", *assignments, "NAME=VALUE ...")->required();
    set->fallthrough();
    command->require_subcommand(0, 1);
    command->callback([flags, assignments, set] {
      auto store = existing_job(*flags);
      elastic::JobControl control(store, elastic::requester());
      if (set->parsed()) {
        elastic::LiveSettings checked;  // bad names and values are named first
        for (const auto& assignment : *assignments) elastic::assign_setting(checked, assignment);
        refuse_if_ended(*store, *flags, "take up a setting", false);
        const elastic::LiveSettings now = control.set(*assignments);
        std::cout << "job " << flags->job.job_id() << ": settings set by " << control.by() << ": " << now.describe()
                  << "; rank 0 takes them up at its next step" << std::endl;
        return;
      }
      const auto value = store->get(elastic::keys::kSettings);
      const elastic::LiveSettings settings = value ? elastic::decode_settings(*value, elastic::keys::kSettings)
                                                   : elastic::LiveSettings{};
      std::cout << "set with hdp config set: " << (settings.empty() ? "nothing (the job's flags)" : settings.describe())
                << std::endl;
      // Every value in force, as rank 0 reports it with each step; the last change, from its event.
      auto state = store->hash_get_all(elastic::keys::kState);
      std::cout << "in force: "
                << (state.count("settings_in_force")
                        ? state["settings_in_force"] + " (reported with step " + state["step"] + ")"
                        : std::string("not reported yet (no step since the job started)"))
                << std::endl;
      std::string changed;
      for (const auto& entry : store->stream_tail(elastic::keys::kEvents, elastic::kEventsKept)) {
        std::map<std::string, std::string> fields(entry.fields.begin(), entry.fields.end());
        if (fields["type"] == "settings_applied") changed = "from step " + fields["step"] + ": " + fields["settings"];
      }
      if (!changed.empty()) std::cout << "last change in force " << changed << std::endl;
    });
  }
  for (const bool on : {true, false}) {
    auto flags = std::make_shared<ControlFlags>();
    CLI::App* command = control_subcommand(
        app, on ? "cordon" : "uncordon",
        on ? "Keep a node from being admitted to a job (a member stays until it leaves)"
           : "Let a cordoned node be admitted again",
        flags, true);
    command->callback([flags, on] {
      auto store = existing_job(*flags);
      elastic::JobControl control(store, elastic::requester());
      const bool changed = on ? control.cordon(flags->node) : control.uncordon(flags->node);
      std::cout << flags->node << (changed ? (on ? " cordoned" : " uncordoned")
                                           : (on ? " was already cordoned" : " was not cordoned"))
                << " in job " << flags->job.job_id() << std::endl;
    });
  }
}

}  // namespace hdp::cli
