#include "trainer/checkpoint_reporting.h"

#include <cmath>
#include <exception>
#include <filesystem>
#include <string>

#include "common/log.h"

namespace hdp::trainer {
namespace {

// The path as a tool on another machine of the job needs it: absolute (the root may be relative
// to the worker's directory). Falls back to the path as given when the working directory is gone.
std::string absolute_text(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return (error ? path : absolute).string();
}

const char* operation_name(checkpoint::Operation operation) {
  return operation == checkpoint::Operation::kSave ? "save" : "restore";
}

}  // namespace

CheckpointReporter::CheckpointReporter(std::shared_ptr<elastic::Store> job_store, std::int64_t generation, int rank,
                                       bool async)
    : job_(job_store), generation_(generation), rank_(rank) {
  if (async) async_ = std::make_unique<StateReport>(std::move(job_store), std::vector<std::string>{});
}

checkpoint::Hooks CheckpointReporter::hooks() {
  return {[this](const checkpoint::CommitInfo& info) { record_commit(info); },
          [this](const checkpoint::ErrorInfo& info) { record_error(info); }};
}

CheckpointReporter::Counts CheckpointReporter::counts() const {
  if (!async_) return {recorded_, stale_, failed_};
  return {recorded_ + static_cast<int>(async_->written()), stale_ + static_cast<int>(async_->stale()), failed_};
}

void CheckpointReporter::record_commit(const checkpoint::CommitInfo& info) noexcept {
  try {
    const std::string step = std::to_string(info.step), path = absolute_text(info.path);
    elastic::Write event = elastic::event_write(
        "checkpoint", {{"step", step},
                       {"path", path},
                       {"bytes", std::to_string(info.bytes)},
                       {"ms", std::to_string(std::llround(info.seconds * 1000))},
                       {"generation", std::to_string(generation_)},
                       {"rank", std::to_string(rank_)}});
    if (async_) {
      async_->post(generation_, {{"last_ckpt_step", step}, {"last_ckpt_path", path}}, {std::move(event)});
      return;
    }
    if (job_.fenced_update(generation_, {{"last_ckpt_step", step}, {"last_ckpt_path", path}}, {std::move(event)})) {
      ++recorded_;
      return;
    }
    ++stale_;
    log()->warn("checkpoint step {} is committed at {}, but not recorded in the job state: generation {} is no "
                "longer current",
                info.step, path, generation_);
  } catch (const std::exception& e) {
    ++failed_;
    log()->error("checkpoint step {} is committed at {}, but could not be recorded in the job state: {}", info.step,
                 info.path.string(), e.what());
  }
}

void CheckpointReporter::record_error(const checkpoint::ErrorInfo& info) noexcept {
  if (!info.primary) return;  // another rank reports this fault
  try {
    job_.event("error", {{"source", "checkpoint"},
                         {"operation", operation_name(info.operation)},
                         {"step", std::to_string(info.step)},
                         {"path", absolute_text(info.path)},
                         {"message", info.message},
                         {"generation", std::to_string(generation_)},
                         {"rank", std::to_string(rank_)}});
    ++recorded_;
  } catch (const std::exception& e) {
    ++failed_;
    log()->error("checkpoint {} error at step {} could not be recorded in the job state: {} (the error: {})",
                 operation_name(info.operation), info.step, e.what(), info.message);
  }
}

}  // namespace hdp::trainer
