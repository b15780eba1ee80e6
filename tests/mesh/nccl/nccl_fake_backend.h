// File: tests/mesh/nccl/nccl_fake_backend.h
//
// A fake NCCL (nccl_backend.h) on the CPU, for NcclCommunicator's logic: an init finishes once
// every rank of the id has joined; a launched group is recorded and completes at once, or hangs
// while `hang` is set (until release()); `fail` makes the communicator report an asynchronous
// error. It moves no data: what it checks is what the communicator asks NCCL to do, and when.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh::testing {

class FakeNccl final : public nccl::Backend, public std::enable_shared_from_this<FakeNccl> {
 public:
  explicit FakeNccl(ops::Device device = ops::Device::kCpu) : device_(device) {}

  std::atomic<bool> hang{false};  // launched groups do not complete
  std::atomic<bool> fail{false};  // poll() reports an error

  ops::Device device() const override { return device_; }

  nccl::UniqueId unique_id() override {
    nccl::UniqueId id{};
    const int n = ++ids_;
    id[0] = static_cast<std::uint8_t>(n);
    id[1] = static_cast<std::uint8_t>(n >> 8);
    id[127] = 0xa5;
    return id;
  }

  std::unique_ptr<nccl::Comm> init(const nccl::UniqueId& id, int size, int rank) override {
    std::lock_guard lock(mutex_);
    joined_[id] += 1;
    inits_.push_back({id, rank});
    return std::make_unique<FakeComm>(shared_from_this(), id, size);
  }

  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
  }

  // Every group launched so far, in launch order, and the counts of aborts and clean destroys.
  std::vector<std::vector<nccl::Op>> launched() const {
    std::lock_guard lock(mutex_);
    return launched_;
  }
  int aborts() const { return aborts_; }
  int destroys() const { return destroys_; }
  std::vector<std::pair<nccl::UniqueId, int>> inits() const {
    std::lock_guard lock(mutex_);
    return inits_;
  }

 private:
  class FakeCompletion final : public nccl::Completion {
   public:
    FakeCompletion(std::shared_ptr<FakeNccl> owner, bool hangs) : owner_(std::move(owner)), hangs_(hangs) {}
    bool done() override {
      std::lock_guard lock(owner_->mutex_);
      return !hangs_ || owner_->released_;
    }

   private:
    std::shared_ptr<FakeNccl> owner_;
    bool hangs_;
  };

  class FakeComm final : public nccl::Comm {
   public:
    FakeComm(std::shared_ptr<FakeNccl> owner, nccl::UniqueId id, int size)
        : owner_(std::move(owner)), id_(id), size_(size) {}
    ~FakeComm() override {
      if (!aborted_) ++owner_->destroys_;
    }
    nccl::Status poll() override {
      if (aborted_) return {nccl::Status::Code::kFailed, "aborted"};
      if (owner_->fail) return {nccl::Status::Code::kFailed, "fake NCCL: remote process exited"};
      std::lock_guard lock(owner_->mutex_);
      if (owner_->joined_[id_] < size_) return {nccl::Status::Code::kInProgress, ""};
      return {};
    }
    std::unique_ptr<nccl::Completion> launch(std::span<const nccl::Op> ops, Stream) override {
      std::lock_guard lock(owner_->mutex_);
      owner_->launched_.emplace_back(ops.begin(), ops.end());
      return std::make_unique<FakeCompletion>(owner_, owner_->hang.load());
    }
    void abort() override {
      aborted_ = true;
      ++owner_->aborts_;
    }

   private:
    std::shared_ptr<FakeNccl> owner_;
    nccl::UniqueId id_;
    int size_;
    bool aborted_ = false;
  };

  ops::Device device_;
  mutable std::mutex mutex_;
  std::map<nccl::UniqueId, int> joined_;
  std::vector<std::pair<nccl::UniqueId, int>> inits_;
  std::vector<std::vector<nccl::Op>> launched_;
  bool released_ = false;
  std::atomic<int> ids_{0}, aborts_{0}, destroys_{0};
};

}  // namespace hdp::mesh::testing
