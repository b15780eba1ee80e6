// File: checkpoint/group.h
//
// The two collectives a checkpoint needs from the job's communicator, behind a tiny interface so
// that tests can use threads or processes and the trainer its mesh.
#pragma once

namespace hdp::checkpoint {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Blocks until every rank of the group has called it.
  virtual void barrier() = 0;
  // Logical AND of `local` over all ranks; blocks like barrier(). Restore uses it so that every
  // rank falls back to the same checkpoint when any rank found a fault.
  virtual bool all_true(bool local) = 0;
};

// The group of a single process (rank 0 of 1): what tools such as `hdp ckpt` use.
class SoloGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void barrier() override {}
  bool all_true(bool local) override { return local; }
};

}  // namespace hdp::checkpoint
