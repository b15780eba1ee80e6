// File: ops/tensor.h
//
// A dense, contiguous (row-major) tensor: shape, dtype, device, and shared storage. Copies of a
// Tensor and views share the storage (like torch.Tensor); clone() and to() copy the data.
// Views are contiguous element ranges of the storage, which is all the flat parameter buffer needs.
// A Tensor is a handle: `const` protects the handle (shape, storage), not the elements, so ops take
// output tensors as `const Tensor&` and write through them, as through a `T* const`.
//
// Example:
//   Tensor w = Tensor::zeros({4, 8}, DType::kF32);
//   Tensor row = w.view(8, {8});          // the second row, sharing w's storage
//   float* p = row.data<float>();          // throws InvalidArgument if the dtype is not f32
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/dtype.h"

namespace hdp::ops {

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised / zero-filled storage. CUDA needs a build with CUDA (else InvalidArgument).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::kCpu);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::kCpu);
  // A CPU tensor in page-locked memory where this build has CUDA and the driver grants it (copies
  // to and from a GPU then run by DMA, queued without the host waiting); plain host memory
  // otherwise, which works the same, only slower. Uninitialised.
  static Tensor pinned(const Shape& shape, DType dtype);
  // A CPU tensor whose memory starts on a page and fills its last page, so that no other
  // allocation shares a page with it: for memory page-locked in place (cudaHostRegister,
  // mesh/comm/staging_memory.h), which fails for a page another locked buffer holds. Blocks up to
  // 32 MiB share the allocator's heap (ops/host_memory.h), where plain tensors lie next to each
  // other. Uninitialised.
  static Tensor whole_pages(const Shape& shape, DType dtype);
  // A CPU tensor holding a copy of `values`; values.size() must equal the shape's element count.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_pinned() const;  // a CPU tensor whose memory is page-locked (pinned())
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // "f32[4, 8] cpu", for error messages.
  std::string describe() const;

  // Typed pointer to the first element; throws InvalidArgument when T is not the dtype.
  template <typename T>
  T* data() const;
  void* raw() const;

  // The `shape` elements starting `offset` elements into this tensor, sharing storage.
  Tensor view(int64_t offset, const Shape& shape) const;
  // The same elements under another shape with the same element count.
  Tensor reshape(const Shape& shape) const;

  Tensor clone() const;
  Tensor to(Device device) const;
  void zero_() const;
  // Copies src (same dtype and element count, any device) into this tensor's elements.
  void copy_from(const Tensor& src) const;
  // A host copy of the elements.
  template <typename T>
  std::vector<T> to_vector() const;

 private:
  struct Storage;
  enum class HostAllocation : int;  // how a CPU tensor's memory is allocated (tensor.cc)
  // empty(), pinned() and whole_pages(): `what` names the caller in errors.
  static Tensor allocate(const char* what, const Shape& shape, DType dtype, Device device, HostAllocation host);
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
};

// Whether a CUDA device can be used by this build on this machine.
bool cuda_available();
// The CUDA devices this process sees (after CUDA_VISIBLE_DEVICES); 0 in a build without CUDA, or
// without a driver or a device. Never throws.
int cuda_device_count();
// The current CUDA device's free and total memory in bytes; nullopt without CUDA or a device.
struct DeviceMemory {
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
};
std::optional<DeviceMemory> cuda_memory();
// Makes visible device `ordinal` this thread's current device (the one Tensor allocates on);
// InvalidArgument when there is no such device (or no CUDA in this build).
void use_cuda_device(int ordinal);

}  // namespace hdp::ops
