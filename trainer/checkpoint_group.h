// File: trainer/checkpoint_group.h
//
// checkpoint::Group over a Communicator, for the checkpoint writer: AsyncSaver calls its group
// from its own writer thread, so the trainer gives it a communicator of its own (the generation's
// "ckpt" channel, mesh/comm/communicator_factory.h), never the training one (a communicator's
// collectives must come from one thread in one order on every rank).
//
// Failure: barrier() and all_true() throw what the communicator throws (PeerLost, TimeoutError),
// each within `timeout` (the communicator's default when zero; note that a TcpCommunicator's
// collective never runs longer than its communicator's timeout()). A save that meets one fails
// on this rank (the saver's writer thread catches it), and ~AsyncSaver, which waits for the save
// in flight, is bounded by the same timeout.
#pragma once

#include <chrono>

#include "checkpoint/group.h"
#include "mesh/comm/communicator.h"

namespace hdp::trainer {

class CommunicatorGroup final : public checkpoint::Group {
 public:
  // `comm` must outlive the group.
  explicit CommunicatorGroup(mesh::Communicator& comm,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds::zero())
      : comm_(comm), timeout_(timeout) {}

  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.size(); }
  void barrier() override;
  // An allreduce (min) of one i32: 1 where `local` is true.
  bool all_true(bool local) override;

 private:
  mesh::Communicator& comm_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hdp::trainer
