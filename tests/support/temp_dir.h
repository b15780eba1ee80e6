// File: tests/support/temp_dir.h
//
// A fresh directory under $TMPDIR (or /tmp), removed with its contents when the object dies.
#pragma once

#include <filesystem>
#include <string>

namespace hdp::test {

class TempDir {
 public:
  explicit TempDir(const std::string& name_prefix = "hdp-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hdp::test
