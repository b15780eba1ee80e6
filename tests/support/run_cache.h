// File: tests/support/run_cache.h
//
// A directory of results that the test processes of one build share: a test that needs the same
// deterministic run in every case (the fault-free job a cluster suite compares its faulty runs
// with) computes it once, and every other case, each its own process under CTest, reads it.
//
// The entry is keyed by a recipe (everything the test passes to the run) and by the content of
// the binary that computes it ($HDP_BIN_DIR/hdp): a rebuilt hdp is a new key, so an entry never
// outlives the code that made it. One process at a time holds a name's lock (flock), so a second
// process waits for the first's run instead of repeating it; a run that did not complete is never
// marked complete, and the next holder starts it again in an empty directory.
//
// A name must not be another name followed by '-' and 16 hex digits (commit() would prune it).
// CTest sets HDP_TEST_CACHE (cmake/HdpHelpers.cmake) to a folder of the build tree. Without it
// (a test binary run by hand) every run is computed in a fresh temporary directory, as before.
//
// Example:
//   RunCache::Entry entry("trainer-cluster-reference", recipe, 300s);
//   if (!entry.complete()) { run_into(entry.dir()); if (it worked) entry.commit(); }
//   read(entry.dir());
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/support/temp_dir.h"

namespace hdp::test {

class RunCacheEntry {
 public:
  // An empty `name` caches nothing: dir() is a fresh temporary directory. Otherwise holds `name`'s
  // lock until destroyed, waiting up to `wait` for another process's run; throws
  // std::runtime_error past it.
  RunCacheEntry(const std::string& name, const std::string& recipe, std::chrono::milliseconds wait);
  ~RunCacheEntry();
  RunCacheEntry(const RunCacheEntry&) = delete;
  RunCacheEntry& operator=(const RunCacheEntry&) = delete;

  // The directory to read, or to run into when !complete() (then it is empty).
  const std::filesystem::path& dir() const { return dir_; }
  // An earlier process of this build completed the same recipe here.
  bool complete() const { return complete_; }
  // Marks the run in dir() complete and removes the name's entries of other keys (older builds).
  void commit();

 private:
  std::filesystem::path root_;  // empty: no cache, dir_ is a TempDir
  std::string name_;
  std::filesystem::path dir_;
  std::unique_ptr<TempDir> temp_;
  int lock_fd_ = -1;
  bool complete_ = false;
};

}  // namespace hdp::test
