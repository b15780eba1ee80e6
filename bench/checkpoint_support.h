// File: bench/checkpoint_support.h
//
// What bench/checkpoint times and compares against: repeated samples summarised as median and
// spread, and the raw POSIX baselines (the same bytes, the same disk, the same run).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/flat_layout.h"
#include "checkpoint/state.h"

namespace hdp::bench {

// Wall-clock seconds of fn().
double seconds(const std::function<void()>& fn);

// Repeated measurements of one quantity.
class Samples {
 public:
  void add(double value) { values_.push_back(value); }
  double median() const;
  double min() const;
  double max() const;
  // "median [min-max]" with `digits` decimals.
  std::string summary(int digits = 3) const;

 private:
  std::vector<double> values_;
};

// Exits the benchmark with `what` and errno's text when !ok (a benchmark has no one to recover).
void check(bool ok, const char* what);

// The three flat buffers of a whole model, filled with a deterministic pattern.
struct Buffers {
  std::array<std::vector<float>, checkpoint::kBufferCount> data;
};
Buffers filled(std::int64_t elements);

// The baseline writer: per rank one file holding its three buffer slices, written with pwrite in
// 64 MiB pieces, then fsync, then fsync of the directory. kLikeHdp also does what hdp's writer
// does at the system-call level: the file's space allocated first (fallocate) and each piece
// handed to the disk right after it is written (sync_file_range); what remains between it and
// hdp is HDF5, the checksums and the commit.
enum class RawWrite { kPlain, kLikeHdp };
void raw_write(const std::filesystem::path& dir, const Buffers& buffers, const std::vector<checkpoint::ShardRange>& ranges,
               RawWrite mode);

// Removes `path`, then commits the removal (syncfs), so that freeing its blocks (and the discards
// of a filesystem mounted with `discard`) is not left for the next timed run to wait behind.
void remove_settled(const std::filesystem::path& path);

// Evicts the (clean, fsynced) pages of every file under `dir` from the page cache.
void evict(const std::filesystem::path& dir);

// Reads every file in `dir` once with pread in 64 MiB pieces; returns the bytes read.
std::uint64_t raw_read(const std::filesystem::path& dir);

}  // namespace hdp::bench
