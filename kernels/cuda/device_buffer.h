// File: kernels/cuda/device_buffer.h
//
// A small owning device allocation for launcher scratch (offset tables, per-row partial sums),
// freed on scope exit. Move-only.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/cuda/memory.h"

namespace hdp::kernels::cuda {

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : ptr_(static_cast<T*>(device_alloc(count * sizeof(T)))), count_(count) {}
  // A device copy of host values.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    copy_host_to_device(ptr_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceBuffer() { device_free(ptr_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(o.count_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  T* get() const { return ptr_; }
  // A host copy, once the work queued on `stream` is done.
  std::vector<T> to_host(Stream stream) const {
    std::vector<T> out(count_);
    copy_device_to_host(out.data(), ptr_, count_ * sizeof(T), stream);
    return out;
  }

 private:
  T* ptr_;
  size_t count_;
};

}  // namespace hdp::kernels::cuda
