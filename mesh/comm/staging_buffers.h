// File: mesh/comm/staging_buffers.h
//
// The host buffers of one StagingCommunicator (staging_communicator.h), reused across calls: a
// step sends the same sizes again and again, so after the first step no call allocates (or
// page-locks, which costs far more than the allocation). Internal to mesh/comm.
//
// A buffer is taken for one operation (a Lease) and comes back when the lease ends. A lease whose
// operation may still be in flight in the inner communicator (its Work was dropped unwaited) is
// abandoned instead: the buffer is kept aside, out of reach of later calls, until the pool dies
// (after the inner communicator, which by then touches nothing).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/tensor.h"

namespace hdp::mesh::staging {

class HostBuffers : public std::enable_shared_from_this<HostBuffers> {
 public:
  // pin: page-lock every buffer (staging_memory.h's pin(); a buffer the driver refuses stays
  // pageable). At most kKeptFree buffers wait for reuse; one more is freed when it comes back.
  static constexpr std::size_t kKeptFree = 64;
  explicit HostBuffers(bool pin) : pin_(pin) {}
  ~HostBuffers();
  HostBuffers(const HostBuffers&) = delete;
  HostBuffers& operator=(const HostBuffers&) = delete;

  // One allocation, of whole pages of its own (ops::Tensor::whole_pages: page-locking in place
  // fails for a page that another locked buffer holds); unlocked before its storage can be freed
  // (the storage itself may outlive it in a Tensor handle the inner communicator still holds, then
  // as plain memory).
  struct Buffer {
    ops::Tensor storage;
    bool pinned = false;
    Buffer(ops::DType dtype, std::int64_t numel, bool pin);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
  };

  class Lease {
   public:
    Lease() = default;
    Lease(std::shared_ptr<HostBuffers> owner, std::unique_ptr<Buffer> buffer, ops::Tensor view);
    Lease(Lease&&) noexcept;
    Lease& operator=(Lease&&) noexcept;
    ~Lease();
    // The host tensor of the operation: the dtype and shape asked for.
    const ops::Tensor& tensor() const { return view_; }
    // The operation may still use the buffer: keep it aside until the pool dies.
    void abandon();

   private:
    std::shared_ptr<HostBuffers> owner_;
    std::unique_ptr<Buffer> buffer_;
    ops::Tensor view_;
  };

  // A host buffer for `numel` elements of `dtype`, shaped `shape`: a free one of that dtype holding
  // between numel and 2 * numel elements (the smallest), else a new one of exactly numel.
  Lease take(ops::DType dtype, const ops::Shape& shape);

  std::int64_t allocated() const { return allocated_; }  // buffers made
  std::int64_t pinned() const { return pinned_; }        // of which page-locked

 private:
  void give_back(std::unique_ptr<Buffer> buffer);
  void set_aside(std::unique_ptr<Buffer> buffer);

  const bool pin_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Buffer>> free_, abandoned_;
  std::atomic<std::int64_t> allocated_{0}, pinned_{0};
};

}  // namespace hdp::mesh::staging
