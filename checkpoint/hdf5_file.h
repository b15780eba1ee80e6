// File: checkpoint/hdf5_file.h
//
// A thin RAII layer over the HDF5 C API: exactly the calls a shard file needs. Every failure
// throws hdp::FatalError naming the file, the object and the HDF5 call. Datasets are 1-D,
// contiguous, with fill disabled, so that a write goes straight from the caller's buffer to disk.
// A file being written starts the disk on its datasets as soon as kWritebackBytes of them are
// written (sync_file_range), so the disk works while the writer hashes and copies the next ones,
// instead of receiving everything at the final fsync.
// libhdf5 must be the thread-safe build: ranks-as-threads and the async writers call it from
// several threads, and the library serialises them with its global lock.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace hdp::checkpoint {

// Owns one hid_t and closes it with the matching H5*close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Hid() { reset(); }
  Hid(Hid&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& other) noexcept;
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  // Gives up ownership without closing.
  hid_t release();
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

class Hdf5File {
 public:
  // Truncates or creates `path` for writing; HDF5 file locking is off (the directory protocol
  // gives each file one writer, and locking fails on NFS and Lustre).
  static Hdf5File create(const std::filesystem::path& path);
  static Hdf5File open_read(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }

  // Allocates disk space for a file about to receive `raw_bytes` of dataset contents in
  // `datasets` datasets, plus their metadata (fallocate; HDF5 trims the file to its real size on
  // close), so that a full disk fails here, before HDF5 has written anything: libhdf5 1.10
  // cannot close a file whose writes failed (H5Fclose fails and leaves a dangling handle that
  // crashes the process at exit). A no-op where the filesystem cannot preallocate. Throws
  // FatalError naming the file when the space is not there.
  void reserve(std::uint64_t raw_bytes, std::size_t datasets);

  // Creates the 1-D dataset `name` ("/params/model.norm.weight"; missing groups are created) and
  // writes `data` into it.
  void write_floats(const std::string& name, std::span<const float> data);
  void write_bytes(const std::string& name, std::span<const std::uint8_t> data);
  // Sets an int64 attribute on an existing object (a group or dataset).
  void set_attribute(const std::string& object, const std::string& attribute, std::int64_t value);

  // Elements of a 1-D dataset.
  std::int64_t length(const std::string& name) const;
  // Reads elements [offset, offset + out.size()) of a 1-D contiguous float32 dataset with pread,
  // outside HDF5's global lock (threads read in parallel). May block on the disk.
  void read_floats(const std::string& name, std::int64_t offset, std::span<float> out) const;
  std::vector<std::uint8_t> read_bytes(const std::string& name) const;
  // Byte offset of a contiguous dataset's raw data inside the file (tests flip bytes there).
  std::uint64_t raw_data_offset(const std::string& name) const;

  // Flushes HDF5's caches, closes the file, then fsyncs it once through a duplicate of its
  // descriptor taken before the close (H5Fflush and H5Fclose alone do not fsync: the sec2 driver
  // has no flush callback; the duplicate reports an I/O error recorded on the open file since it
  // was created, and keeps the file's inode, with that error, in memory). May block on the disk.
  void close_durably();

  // Dataset bytes gathered before they are handed to the disk. A dataset this large is handed
  // over right after it is written (a large checkpoint's tensors), with whatever had gathered
  // before it; smaller ones go together.
  static constexpr std::uint64_t kWritebackBytes = std::uint64_t{8} << 20;

 private:
  Hdf5File(std::filesystem::path path, Hid file) : path_(std::move(path)), file_(std::move(file)) {}
  Hid open_dataset(const std::string& name) const;
  std::int64_t length_of(const Hid& dataset, const std::string& name) const;
  int descriptor() const;  // the VFD's file descriptor (sec2)
  void write_dataset(const std::string& name, hid_t type, std::int64_t length, const void* data);
  // Adds [begin, end) to the written bytes not yet handed to the disk; hands them over (without
  // waiting) once they span kWritebackBytes.
  void start_writeback(std::uint64_t begin, std::uint64_t end);
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path path_;
  Hid file_;
  std::uint64_t unsent_begin_ = 0, unsent_end_ = 0;  // empty when unsent_end_ is 0
};

}  // namespace hdp::checkpoint
