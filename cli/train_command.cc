// `hdp train --smoke`: the elastic smoke worker (trainer/smoke_worker.h), started by an agent.
// SIGTERM/SIGINT/SIGUSR1 stop it at the next step boundary (exit 0); a wrong all-reduce sum exits 3.
#include <signal.h>

#include <atomic>
#include <memory>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "common/error.h"
#include "trainer/smoke_worker.h"

namespace hdp::cli {
namespace {

std::atomic<bool> stop_requested{false};

void request_stop(int) { stop_requested = true; }

struct TrainFlags {
  bool smoke = false;
  long steps = 200;
  int step_ms = 50;
  int timeout_ms = 10000;
};

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* command = app.add_subcommand("train", "Run one worker (started by `hdp agent`, which sets its environment)");
  command->add_flag("--smoke", flags->smoke, "Run the elastic smoke worker: all-reduce with exact sums every step");
  command->add_option("--steps", flags->steps, "Steps until the job completes")->check(CLI::Range(1L, 1L << 40))->capture_default_str();
  command->add_option("--step-ms", flags->step_ms, "Pause per step")->check(CLI::Range(0, 60000))->capture_default_str();
  command->add_option("--timeout-ms", flags->timeout_ms, "Rendezvous and collective timeout")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  command->callback([flags] {
    if (!flags->smoke) {
      throw InvalidArgument("hdp train needs a mode: --smoke runs the elastic smoke worker (the model trainer "
                            "arrives with the data plane)");
    }
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGUSR1, &action, nullptr);  // Slurm signals a whole step, workers included
    auto ctx = elastic::ElasticContext::from_environment();
    trainer::SmokeOptions options;
    options.steps = flags->steps;
    options.step_time = std::chrono::milliseconds(flags->step_ms);
    options.timeout = std::chrono::milliseconds(flags->timeout_ms);
    if (trainer::run_smoke_worker(ctx, options, stop_requested) == trainer::SmokeResult::kWrongSum) {
      throw CLI::RuntimeError(kExitJobFailed);
    }
  });
}

}  // namespace hdp::cli
