// File: trainer/tensorboard.h
//
// Scalars in TensorBoard's event-file format, so that `tensorboard --logdir DIR` shows the
// training curves. A file (events.out.tfevents.<seconds>.<host>.<pid>) is a sequence of records
//
//   uint64 length (little-endian) | uint32 masked CRC32C of the length bytes | data | uint32 masked CRC32C of data
//
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, and data is a serialized Event
// (trainer/tensorboard.proto): first one with file_version "brain.Event:2", then one per step
// with a Summary of simple values. CRC32C is Boost.CRC's with the Castagnoli polynomial.
//
// Each writer makes its own file (the name carries the time, the host and the pid), so the rank-0
// processes of successive generations never write into one file; TensorBoard reads every file of
// the directory. Records are whole write(2)s; a crash leaves at most a torn last record, which
// readers skip. Not thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace hdp::trainer {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it; throws Error naming the path.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` holding every (tag, value); throws Error when the write fails.
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::filesystem::path& path() const { return path_; }

 private:
  void record(const std::string& data);

  std::filesystem::path path_;
  int fd_ = -1;
};

// The masked CRC32C of TensorBoard's (and TFRecord's) framing.
std::uint32_t masked_crc32c(const void* data, std::size_t size);

}  // namespace hdp::trainer
