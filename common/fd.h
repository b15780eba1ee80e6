// File: common/fd.h
//
// A POSIX file descriptor closed on every path out of a scope (-1: none).
#pragma once

#include <unistd.h>

namespace hdp {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace hdp
