#include "trainer/step_reporter.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/control.h"
#include "elastic/job_keys.h"

namespace hdp::trainer {
namespace {

// What rank 0 reads of what the job is asked, in read_asked()'s order: with every step report, and
// at once after a hold.
const std::vector<std::string> kAskedKeys{elastic::keys::kControl, elastic::keys::kSettings, elastic::keys::kStandby};

}  // namespace

std::string fixed3(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

void EventLog::record(const elastic::Membership& m, const std::string& type, elastic::Fields fields) {
  fields.emplace_back("generation", std::to_string(m.generation));
  try {
    job_.event(type, std::move(fields));
  } catch (const Error& e) {
    log()->warn("cannot record the {} event: {}", type, e.what());
  }
}

StepReporter::StepReporter(const TrainerConfig& config, std::shared_ptr<elastic::Store> store, EventLog& events,
                           const std::filesystem::path& metrics_file)
    : config_(config), store_(store), job_(store), goodput_(std::move(store)), events_(events), metrics_(metrics_file) {}

void StepReporter::step(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result, double step_ms,
                        double lr, const checkpoint::DataPosition& position, const SpeedFigures& speeds, int world,
                        const EvalFigures* eval) {
  trained_ = true;
  if (world == 0) world = m.world_size;
  const double tokens_per_s = result.step_tokens / (step_ms / 1000.0);
  const auto rank = static_cast<std::size_t>(m.rank);
  metrics_.step({.step = step,
                 .loss = result.loss(),
                 .tokens_per_s = tokens_per_s,
                 .lr = lr,
                 .grad_norm = result.grad_norm,
                 .step_s = step_ms / 1000.0,
                 .compute_s = result.compute_ms / 1000.0,
                 .comm_wait_s = result.comm_wait_ms / 1000.0,
                 .tokens = result.step_tokens,
                 .world_size = world,
                 .rank = m.rank,
                 .generation = m.generation,
                 .speed = rank < speeds.relative.size() ? speeds.relative[rank] : 1.0});
  if (eval) metrics_.evaluated(eval->loss);
  GoodputReport::Figures goodput;
  if (m.rank == 0) {
    goodput = goodput_.step(m.generation, step, step_ms, [this] { flush_reports(); });
    if (goodput.ettr) metrics_.goodput(*goodput.ettr, goodput.recomputed);
  } else {
    metrics_.not_goodput_reporter();
  }
  metrics_.publish();
  if (m.rank != 0) return;
  // A step that evaluated is logged whatever --log-every, its eval_loss in the same line.
  if (step % config_.log_every == 0 || step == config_.steps || eval) {
    char evaluated[128] = "";
    if (eval) {
      std::snprintf(evaluated, sizeof evaluated, "  eval_loss %.4f (%lld tokens of --eval-data in %.0f ms)", eval->loss,
                    static_cast<long long>(eval->tokens), eval->ms);
    }
    // Offloading (the planner's choice, on a GPU) is named with what rank 0 moved to host memory.
    char offloaded[64] = "";
    if (result.offloaded_bytes > 0) {
      std::snprintf(offloaded, sizeof offloaded, ", %.2f GB of activations offloaded",
                    static_cast<double>(result.offloaded_bytes) / 1e9);
    }
    log()->info("step {}/{}  loss {:.4f}  lr {:.2e}  {:.0f} tokens/s  world {}  {:.0f} ms (compute {:.0f}, wait {:.0f}{}){}",
                step, config_.steps, result.loss(), lr, tokens_per_s, world, step_ms, result.compute_ms,
                result.comm_wait_ms, offloaded, evaluated);
  }
  if (!config_.metrics_file.empty()) write_metrics_line(m, step, result, step_ms, lr, position, tokens_per_s, world, speeds, eval);
  if (!config_.tensorboard_dir.empty()) write_tensorboard(step, result, step_ms, lr, tokens_per_s, world, eval);
  post_state(m, step, result, step_ms, lr, tokens_per_s, world, speeds, eval, std::move(goodput.fields));
}

void StepReporter::post_state(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result,
                              double step_ms, double lr, double tokens_per_s, int world, const SpeedFigures& speeds,
                              const EvalFigures* eval, elastic::Fields goodput) {
  // The figures as the job state holds them; a non-finite one (a diverged run's NaN loss) is
  // left out of the state and the sample, whose readers accept only finite numbers: the curve
  // shows a gap, and the worker's log line and metrics say "nan".
  elastic::Fields figures;
  auto figure = [&](const char* name, const char* format, double value) {
    if (!std::isfinite(value)) return;
    char text[48];
    std::snprintf(text, sizeof text, format, value);
    figures.emplace_back(name, text);
  };
  figure("loss", "%.6f", result.loss());
  figure("tokens_per_s", "%.1f", tokens_per_s);
  figure("step_ms", "%.1f", step_ms);
  figure("lr", "%.6g", lr);
  figure("grad_norm", "%.6g", result.grad_norm);
  if (eval) figure("eval_loss", "%.6f", eval->loss);
  const std::string speeds_text = join(speeds.relative, ",", fixed3);
  // `status` and `generation` too, every step: a `state` hash deleted by hand (or lost) has both
  // again at the next step, not only at the next publication.
  elastic::Fields state = {{"status", "running"},
                           {"generation", std::to_string(m.generation)},
                           {"step", std::to_string(step)},
                           {"tokens", std::to_string(step * config_.batch_tokens)},
                           {"world_size", std::to_string(world)},
                           {"speeds", speeds_text},
                           {"settings_in_force", elastic::describe(config_)}};
  state.insert(state.end(), figures.begin(), figures.end());
  if (eval) state.emplace_back("eval_step", std::to_string(step));
  state.insert(state.end(), goodput.begin(), goodput.end());  // the job's ETTR (elastic/goodput.h)
  elastic::Fields sample = {{"step", std::to_string(step)},
                            {"world_size", std::to_string(world)},
                            {"generation", std::to_string(m.generation)},
                            {"time_ms", std::to_string(elastic::now_ms())}};
  sample.insert(sample.end(), figures.begin(), figures.end());
  // Off the step's critical path (state_report.h): the requests and settings come from the newest
  // report written, a step or more behind.
  if (!state_report_) {
    state_report_ = std::make_unique<StateReport>(store_, kAskedKeys);
  }
  state_report_->post(m.generation, std::move(state), {elastic::sample_write(std::move(sample))});
  take_reads();
}

void StepReporter::take_reads() {
  StateReport::Reads reads = state_report_->reads();
  if (reads.serial == reads_serial_) return;
  reads_serial_ = reads.serial;
  read_asked(reads.values);
}

void StepReporter::read_asked(const std::vector<std::optional<std::string>>& values) {
  if (values.size() != kAskedKeys.size()) return;
  read_requests(values[0]);
  read_settings(values[1]);
  read_standby(values[2]);
}

bool StepReporter::flush_reports() {
  if (!state_report_ || state_report_->flush(kFlushTimeout)) return true;
  log()->warn("the last step reports were not written within {} ms (the store is unavailable)", kFlushTimeout.count());
  return false;
}

// The requests rank 0 takes up (elastic/control.h): a checkpoint. A value that does not decode is
// logged once; the agents, which read the same key, log it too.
void StepReporter::read_requests(const std::optional<std::string>& value) {
  checkpoint_request_.reset();
  requests_ = {};
  if (!value) return;
  requests_ = bad_control_
                  .decode(*value, [&] { return elastic::decode_control(*value, elastic::keys::kControl); },
                          [](const InvalidArgument& e) { log()->warn("ignoring the pending requests: {}", e.what()); })
                  .value_or(elastic::ControlRequests{});
  if (requests_.checkpoint && requests_.checkpoint->id != checkpoint_taken_) checkpoint_request_ = *requests_.checkpoint;
}

void StepReporter::read_settings(const std::optional<std::string>& value) {
  if (!value) {
    settings_ = {};
    return;
  }
  if (auto settings = bad_settings_.decode(
          *value, [&] { return elastic::decode_settings(*value, elastic::keys::kSettings); },
          [](const InvalidArgument& e) { log()->warn("keeping the settings in force: {}", e.what()); })) {
    settings_ = std::move(*settings);
  }
}

// The leader's list of nodes standing by: "n4,n7" (empty: none). Anything else reads as none,
// logged once: the conservative side (a leave that only a standby would make up stops the job).
void StepReporter::read_standby(const std::optional<std::string>& value) {
  standby_ = 0;
  if (!value) return;
  if (const auto nodes = elastic::count_node_list(*value)) {
    standby_ = *nodes;
    bad_standby_.good();
  } else if (bad_standby_.bad(*value)) {
    log()->warn("'{}' is not a list of node ids: counting no node standing by", elastic::keys::kStandby);
  }
}

void StepReporter::read_settings_now() {
  try {
    read_settings(job_.store().get(elastic::keys::kSettings));
  } catch (const Error& e) {
    log()->warn("cannot read the live settings: {}", e.what());
  }
}

void StepReporter::read_requests_now() {
  // The reports written or in flight read the store before now: take what they read first, so
  // that none of it replaces what is read here.
  if (state_report_) {
    state_report_->flush(kFlushTimeout);
    take_reads();
  }
  // The nodes standing by with them: a leave asked during the hold is judged against the spares
  // registered by then, not those of the last report.
  try {
    read_asked(job_.store().multi_get(kAskedKeys));
  } catch (const Error& e) {
    log()->warn("cannot read the pending requests: {}", e.what());
  }
}

void StepReporter::settings_applied(const elastic::Membership& m, std::int64_t step, const std::string& in_force) {
  events_.record(m, "settings_applied", {{"step", std::to_string(step)}, {"settings", in_force}});
}

void StepReporter::checkpoint_done(std::string id, std::int64_t step, const std::string& outcome,
                                   const std::string& path) {
  checkpoint_taken_ = id;  // `id` is a copy: it may come from checkpoint_request_, reset below
  checkpoint_request_.reset();
  elastic::Fields details{{"step", std::to_string(step)}};
  if (!path.empty()) details.emplace_back("path", path);
  elastic::finish_request(job_.store(), "checkpoint", id, outcome, details);
}

void StepReporter::write_metrics_line(const elastic::Membership& m, std::int64_t step, const mesh::StepResult& result,
                                      double step_ms, double lr, const checkpoint::DataPosition& position,
                                      double tokens_per_s, int world, const SpeedFigures& speeds,
                                      const EvalFigures* eval) {
  nlohmann::json line = {{"step", step},           {"loss", result.loss()},
                               {"world_size", world},    {"generation", m.generation},
                               {"lr", lr},               {"grad_norm", result.grad_norm},
                               {"tokens_per_s", tokens_per_s}, {"step_ms", step_ms},
                               {"compute_ms", result.compute_ms}, {"speeds", speeds.relative},
                               {"plan_speeds", speeds.plan_speeds}, {"time_ms", elastic::now_ms()},
                               // Where the data stands after the step (what a checkpoint of it saves).
                               {"data_epoch", position.epoch}, {"data_sample", position.sample}};
  if (step_started_ms_ > 0) line["start_ms"] = step_started_ms_;
  if (eval) line["eval_loss"] = eval->loss;
  if (result.offloaded_bytes > 0) line["offloaded_bytes"] = result.offloaded_bytes;  // rank 0's
  // One write of a whole line in append mode: lines of successive rank-0 processes never mix.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fd = ::open(config_.metrics_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    log()->warn("cannot append to --metrics-file {}: {}", config_.metrics_file.string(), std::strerror(errno));
  }
  if (fd >= 0) ::close(fd);
}

// Rank 0's curves for TensorBoard; a failure to write is logged once a file and never stops training.
void StepReporter::write_tensorboard(std::int64_t step, const mesh::StepResult& result, double step_ms, double lr,
                                     double tokens_per_s, int world, const EvalFigures* eval) {
  try {
    if (tensorboard_failed_) return;
    if (!tensorboard_) tensorboard_ = std::make_unique<TensorBoardWriter>(config_.tensorboard_dir);
    tensorboard_->scalars(step, {{"train/loss", result.loss()},
                                 {"train/lr", lr},
                                 {"train/tokens_per_s", tokens_per_s},
                                 {"train/world_size", world},
                                 {"train/step_ms", step_ms},
                                 {"train/grad_norm", result.grad_norm}});
    if (eval) tensorboard_->scalars(step, {{"eval/loss", eval->loss}});
  } catch (const Error& e) {
    if (!tensorboard_failed_) log()->warn("TensorBoard: {}; no further event files from this process", e.what());
    tensorboard_failed_ = true;
    tensorboard_.reset();
  }
}

void StepReporter::recovered(const elastic::Membership& m, mesh::Communicator& comm, std::int64_t step,
                             std::int64_t furthest) {
  const std::int64_t mine = interrupted_ ? static_cast<std::int64_t>(ms_since(*interrupted_)) : 0;
  interrupted_.reset();
  const std::int64_t ms = comm.allreduce_max(mine);
  const std::int64_t lost = furthest >= step - 1 ? furthest - (step - 1) : 0;
  if (ms > 0) metrics_.recovered(static_cast<double>(ms) / 1000.0, lost);
  if (ms > 0 && m.rank == 0) {
    metrics_.job_recovered(restored_from_, static_cast<double>(ms) / 1000.0);
    log()->info("generation {}: recovered in {:.2f} s, {} step(s) lost", m.generation, ms / 1000.0, lost);
    events_.record(m, "recovered",
                   {{"step", std::to_string(step)},
                    {"seconds", fixed3(ms / 1000.0)},
                    {"lost_steps", std::to_string(lost)},
                    {"source", restored_from_},
                    {"world_size", std::to_string(m.world_size)}});
  }
}

void StepReporter::completed(const elastic::Membership& m, std::int64_t step) {
  flush_reports();  // the last step's state before the outcome
  if (!job_.complete(m.generation, step)) log()->warn("completion at step {} refused: a newer generation exists", step);
  log()->info("completed {} steps", step);
}

void StepReporter::stopped(const elastic::Membership& m, std::int64_t step, const std::string& checkpoint) {
  flush_reports();
  events_.record(m, "stopped", {{"step", std::to_string(step)}, {"checkpoint", checkpoint}});
  try {
    if (!job_.stop(m.generation, step)) log()->warn("the stop at step {} was not recorded: a newer generation exists", step);
  } catch (const Error& e) {
    log()->warn("cannot record the stop: {}", e.what());
  }
}

}  // namespace hdp::trainer
