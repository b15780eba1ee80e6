// The `hdp` command: subcommand dispatch and the mapping from exceptions to exit codes.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/redis_url.h"
#include "hdp/config.h"
#include "ops/host_memory.h"

namespace {

// Whether `name` is one of the app's subcommands.
bool is_subcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->check_name(name)) return true;
  }
  return false;
}

int run(int argc, char** argv) {
  using namespace hdp::cli;
  // Before any thread or buffer: what a micro-batch or a step frees stays for the next (a worker's
  // steps, a calibration's timed micro-batches; ops/host_memory.h). A sanitizer's allocator keeps
  // its own pools and refuses the settings: nothing to say.
  hdp::ops::retain_freed_host_memory();
  CLI::App app{"hdp: fault-tolerant, elastic training of long-context LLMs with Hybrid Data Parallelism", "hdp"};
  // At most one subcommand; "none" and "unknown" are reported below in words a user can act on.
  app.require_subcommand(0, 1);
  app.set_config("--config", "", "Read flags from a TOML or INI file ([subcommand] sections)");
  app.set_version_flag("-V,--version", HDP_VERSION);
  add_version_command(app);
  add_ping_command(app);
  add_agent_command(app);
  add_train_command(app);
  add_status_command(app);
  add_dashboard_command(app);
  add_run_command(app);
  add_plan_command(app);
  add_ckpt_command(app);
  add_control_commands(app);
  add_export_command(app);
  add_sample_command(app);
  add_tokenize_forwarder(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // `hdp nosuch --help` is the same mistake as `hdp nosuch`, not a request for the general help.
    if (argc > 1 && argv[1][0] != '-' && !is_subcommand(app, argv[1])) {
      std::cerr << "hdp: error: unknown subcommand '" << argv[1] << "' (see hdp --help)\n";
      return kExitUsage;
    }
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's chosen exit code (agent outcomes, worker results)
  } catch (const CLI::ExtrasError& e) {
    if (!app.get_subcommands().empty()) {
      std::cerr << "hdp: error: " << e.what() << " (see hdp --help)\n";
    } else {
      std::cerr << "hdp: error: unknown subcommand '" << app.remaining().front() << "' (see hdp --help)\n";
    }
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    // One clear line, then where to look; never CLI11's full usage dump.
    std::cerr << "hdp: error: " << e.what() << " (see hdp --help)\n";
    return kExitUsage;
  } catch (const hdp::Error& e) {
    return report_error(e);
  }
  if (app.get_subcommands().empty()) {
    std::cerr << "hdp: error: a subcommand is required (see hdp --help)\n";
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // A Redis password typed into a URL on the command line: hdp parses a copy of its arguments and
  // overwrites the password in the originals, which are what `ps` and /proc/PID/cmdline show (an
  // agent runs for weeks; only its first milliseconds show it). --redis-password-file keeps it out
  // of the command line altogether.
  std::vector<std::string> copies(argv, argv + argc);
  std::vector<char*> args;
  for (std::string& copy : copies) args.push_back(copy.data());
  args.push_back(nullptr);
  for (int i = 1; i < argc; ++i) hdp::elastic::scrub_password(argv[i]);
  try {
    return run(argc, args.data());
  } catch (const std::exception& e) {
    std::cerr << "hdp: internal error: " << e.what() << "\n";
    return hdp::cli::kExitFailure;
  }
}
