// File: common/sigpipe.h
//
// SIGPIPE without changing the process's signal dispositions. Libraries hdp uses write to sockets
// without MSG_NOSIGNAL (hiredis with write(2), Gloo with writev(2)), so a write to a peer that
// closed or reset the connection raises SIGPIPE, whose default action kills the process without a
// word. A library must not ignore the signal process-wide, so hdp blocks it in the threads that
// write: for the duration of a call (SigpipeBlock, consuming a SIGPIPE raised meanwhile), or for
// good in a thread hdp owns (block_sigpipe_in_this_thread; threads it then creates inherit the mask).
#pragma once

#include <signal.h>

namespace hdp {

void block_sigpipe_in_this_thread();

class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
};

}  // namespace hdp
