#include "checkpoint/saver.h"

#include <chrono>
#include <exception>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/manifest.h"
#include "checkpoint/posix_io.h"
#include "checkpoint/rank_record.h"
#include "checkpoint/shard_io.h"
#include "common/error.h"
#include "common/log.h"

namespace hdp::checkpoint {
namespace fs = std::filesystem;
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `step` and returns what it threw (null on success), as an hdp::Error: filesystem and other
// standard exceptions become FatalError. A save must reach every collective whatever went wrong.
template <class F>
std::exception_ptr capture(F&& step) {
  try {
    step();
    return nullptr;
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    return std::make_exception_ptr(FatalError(e.what()));
  }
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

Saver::Saver(CheckpointOptions options, FlatLayout layout, Group& group)
    : options_(std::move(options)), layout_(std::move(layout)), group_(group) {
  validate(options_);
}

void Saver::save(const ShardSnapshot& shard) {
  const double started = now_seconds();
  const fs::path final_dir = options_.root / step_dir_name(shard.step);
  fs::path tmp = final_dir;
  tmp += ".tmp";
  // Every rank sees the same directory, so all of them refuse together, before any collective.
  if (fs::exists(final_dir)) {
    fail(shard.step, final_dir,
         std::make_exception_ptr(InvalidArgument("checkpoint " + final_dir.string() + " is already committed")), {},
         /*every_rank=*/true);
  }

  std::exception_ptr error;
  if (group_.rank() == 0) {
    error = capture([&] {
      fs::create_directories(options_.root);
      remove_uncommitted(options_.root);
      fs::create_directory(tmp);
    });
  }
  if (!group_.all_true(!error)) fail(shard.step, tmp, error, "rank 0 could not prepare " + tmp.string());

  error = capture([&] {
    const std::int64_t block_elems = options_.checksum_block_bytes / static_cast<std::int64_t>(sizeof(float));
    const RankRecord record = write_rank_file(tmp, group_.rank(), layout_, shard, block_elems, options_.fault_hook);
    // Not fsynced: rank 0 reads it before the commit, the manifest it goes into is fsynced, and
    // it is removed before the commit, so a crash can leave it only in an uncommitted directory.
    write_small_file(tmp / rank_record_name(group_.rank()), to_json(record).dump());
  });
  if (!group_.all_true(!error)) fail(shard.step, tmp, error, "another rank could not write its shard");
  if (group_.rank() != 0) return;

  error = capture([&] { commit(tmp, final_dir, started); });
  if (error) fail(shard.step, tmp, error, {});
}

void Saver::fail(std::int64_t step, const fs::path& path, const std::exception_ptr& error,
                 const std::string& elsewhere, bool every_rank) const {
  if (!error) throw FatalError("checkpoint step " + std::to_string(step) + " failed: " + elsewhere);
  const std::string message = message_of(error);
  log()->error("checkpoint step {} (rank {}): {}", step, group_.rank(), message);
  if (options_.hooks.on_error) {
    options_.hooks.on_error({step, path, message, Operation::kSave, !every_rank || group_.rank() == 0});
  }
  std::rethrow_exception(error);
}

void Saver::commit(const fs::path& tmp, const fs::path& final_dir, double started_seconds) {
  if (options_.fault_hook) options_.fault_hook(kPointBeforeManifest, 0);
  std::vector<RankRecord> records;
  for (int r = 0; r < group_.world_size(); ++r) {
    records.push_back(rank_record_from_json(nlohmann::json::parse(read_small_file(tmp / rank_record_name(r)))));
  }
  Manifest manifest = assemble_manifest(layout_, options_.model_config, options_.checksum_block_bytes, records);
  manifest.data_fingerprint = options_.data_fingerprint;
  const std::string text = to_json(manifest).dump(1);
  write_file_durably(tmp / kManifestFile, text);
  for (int r = 0; r < group_.world_size(); ++r) fs::remove(tmp / rank_record_name(r));
  fsync_path(tmp);
  if (options_.fault_hook) options_.fault_hook(kPointBeforeRename, 0);
  fs::rename(tmp, final_dir);
  fsync_path(options_.root);
  // Committed from here on: what follows only tidies up and reports.
  write_latest(options_.root, final_dir);
  for (const fs::path& old : retain_newest(options_.root, options_.keep)) {
    log()->info("checkpoint retention (keep {}): deleted {}", options_.keep, old.string());
  }
  const CommitInfo info{manifest.step, final_dir, manifest.total_bytes() + text.size(), now_seconds() - started_seconds};
  log()->info("checkpoint step {} committed: {} ({} bytes in {:.3f} s)", info.step, info.path.string(), info.bytes,
              info.seconds);
  if (options_.hooks.on_commit) options_.hooks.on_commit(info);
}

}  // namespace hdp::checkpoint
