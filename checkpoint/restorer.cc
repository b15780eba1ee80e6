#include "checkpoint/restorer.h"

#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/hdf5_file.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_io.h"
#include "common/error.h"
#include "common/log.h"

namespace hdp::checkpoint {
namespace fs = std::filesystem;
namespace {

void check_target(const FlatLayout& layout, const ShardTarget& target) {
  layout.slices(target.range);  // throws when the range leaves the buffer
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    if (std::ssize(target.buffers[b]) != target.range.size()) {
      throw InvalidArgument("restore: " + std::string(kBufferNames[b]) + " holds " + std::to_string(target.buffers[b].size()) +
                            " elements, the shard range " + std::to_string(target.range.size()));
    }
  }
}

// Every file the manifest lists exists with the size it had when written; the same answer on
// every rank, since all ranks look at the same directory.
void check_files(const Manifest& manifest, const fs::path& dir) {
  for (const std::string& fault : structural_faults(manifest)) throw FatalError(dir.string() + ": manifest: " + fault);
  for (const FileRecord& file : manifest.files) {
    const fs::path path = dir / file.name;
    std::error_code error;
    const std::uintmax_t size = fs::file_size(path, error);
    if (error) throw FatalError(path.string() + ": missing (" + error.message() + ")");
    if (size != file.bytes) {
      throw FatalError(path.string() + ": " + std::to_string(size) + " bytes, the manifest says " + std::to_string(file.bytes) +
                       (size < file.bytes ? " (truncated)" : ""));
    }
  }
}

// Reads this rank's part of one checkpoint into `target`; throws FatalError on any fault.
RestoredProgress read_checkpoint(const Manifest& manifest, const fs::path& dir, const FlatLayout& layout,
                                 const ShardTarget& target) {
  std::map<std::size_t, Hdf5File> open;  // by file index, opened on first use
  auto file = [&](std::size_t index) -> const Hdf5File& {
    auto it = open.find(index);
    if (it == open.end()) it = open.emplace(index, Hdf5File::open_read(dir / manifest.files[index].name)).first;
    return it->second;
  };
  std::vector<float> scratch;
  const std::vector<Slice> slices = layout.slices(target.range);
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    for (const Slice& slice : slices) {
      const TensorRecord& tensor = manifest.tensors[slice.tensor];
      const ShardRange wanted{slice.tensor_offset, slice.tensor_offset + slice.length};
      for (const PieceRecord& piece : tensor.pieces[b]) {
        const ShardRange part = intersect(wanted, {piece.offset, piece.offset + piece.length});
        if (part.empty()) continue;
        const std::int64_t out_offset = layout.offset(slice.tensor) + part.begin - target.range.begin;
        read_piece_verified(file(piece.file), piece, manifest.checksum_block_elems(), part.begin - piece.offset,
                            target.buffers[b].subspan(static_cast<std::size_t>(out_offset), static_cast<std::size_t>(part.size())),
                            std::string(kBufferNames[b]) + " tensor '" + tensor.name + "'", scratch);
      }
    }
  }
  RestoredProgress progress{dir, manifest.step, manifest.data, manifest.data_fingerprint, {}};
  for (std::size_t f = 0; f < manifest.files.size(); ++f) progress.rng_states.push_back(read_rng_verified(file(f), manifest.files[f]));
  return progress;
}

}  // namespace

std::optional<RestoredProgress> restore_latest(const CheckpointOptions& options, const FlatLayout& layout,
                                               Group& group, const ShardTarget& target) {
  validate(options);
  check_target(layout, target);
  std::vector<CommittedCheckpoint> committed = list_committed(options.root);
  if (options.only_step) {
    std::erase_if(committed, [&](const CommittedCheckpoint& c) { return c.step != *options.only_step; });
    if (committed.empty()) {
      throw InvalidArgument("no committed checkpoint of step " + std::to_string(*options.only_step) + " under '" +
                            options.root.string() + "'");
    }
  }
  if (committed.empty()) return std::nullopt;
  std::string newest_fault;
  for (auto candidate = committed.rbegin(); candidate != committed.rend(); ++candidate) {
    std::string fault;
    bool every_rank = true;  // the manifest and the file sizes look the same from every rank
    std::optional<RestoredProgress> progress;
    std::optional<Manifest> manifest;
    try {
      manifest = read_manifest(candidate->path);
    } catch (const Error& e) {
      fault = e.what();
    }
    // A readable manifest for another model is refused on every rank alike, never skipped.
    if (manifest) check_compatible(*manifest, layout, options.model_config, candidate->path);
    if (manifest) {
      try {
        check_files(*manifest, candidate->path);
        every_rank = false;  // from here on each rank reads its own blocks
        progress = read_checkpoint(*manifest, candidate->path, layout, target);
      } catch (const Error& e) {
        fault = e.what();
      }
    }
    if (group.all_true(fault.empty())) return progress;
    const bool saw_it = !fault.empty();
    if (!saw_it) fault = "another rank found a fault in " + candidate->path.string();
    if (newest_fault.empty()) newest_fault = fault;
    log()->error("checkpoint restore (rank {}): skipping {}: {}", group.rank(), candidate->path.string(), fault);
    if (options.hooks.on_error) {
      options.hooks.on_error({candidate->step, candidate->path, fault, Operation::kRestore,
                              saw_it && (!every_rank || group.rank() == 0)});
    }
  }
  throw FatalError("no valid checkpoint under " + options.root.string() + " (" + std::to_string(committed.size()) +
                   " committed, all faulty); newest fault: " + newest_fault);
}

}  // namespace hdp::checkpoint
