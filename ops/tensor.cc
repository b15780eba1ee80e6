#include "ops/tensor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "hdp/config.h"
#include "kernels/cuda/memory.h"

namespace hdp::ops {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kBF16:
      return 2;
  }
  throw InvariantViolation("dtype_size: unknown dtype");
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kBF16: return "bf16";
  }
  throw InvariantViolation("dtype_name: unknown dtype");
}

std::string device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
#if HDP_HAVE_CUDA
  return kernels::cuda::device_count();
#else
  return 0;
#endif
}

std::optional<DeviceMemory> cuda_memory() {
#if HDP_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  if (cuda_available() && kernels::cuda::memory_info(free_bytes, total_bytes)) {
    return DeviceMemory{static_cast<std::int64_t>(free_bytes), static_cast<std::int64_t>(total_bytes)};
  }
#endif
  return std::nullopt;
}

void use_cuda_device(int ordinal) {
  const int count = cuda_device_count();
  if (ordinal < 0 || ordinal >= count) {
    throw InvalidArgument("CUDA device " + std::to_string(ordinal) + ": this process sees " + std::to_string(count) +
                          " CUDA device(s)");
  }
#if HDP_HAVE_CUDA
  kernels::cuda::set_device(ordinal);
#endif
}

enum class Tensor::HostAllocation : int {
  kAligned,     // 64-byte aligned, for the vector loops
  kPinned,      // page-locked by the driver where it grants it (Tensor::pinned), else kAligned
  kWholePages,  // whole pages of its own (Tensor::whole_pages)
};

namespace {

std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

// Owns one allocation.
struct Tensor::Storage {
  void* ptr = nullptr;
  Device device = Device::kCpu;
  bool pinned = false;  // CPU memory from host_alloc_pinned

  Storage(size_t bytes, Device dev, HostAllocation host) : device(dev) {
#if HDP_HAVE_CUDA
    if (device == Device::kCpu && host == HostAllocation::kPinned && cuda_available()) {
      ptr = kernels::cuda::host_alloc_pinned(bytes);
      pinned = ptr != nullptr;
      if (pinned) return;
    }
#endif
    if (device == Device::kCpu) {
      const size_t align = host == HostAllocation::kWholePages ? page_bytes() : 64;
      ptr = std::aligned_alloc(align, std::max(align, (bytes + align - 1) / align * align));  // a multiple of align
      if (!ptr) throw FatalError("Tensor: out of host memory allocating " + std::to_string(bytes) + " bytes");
      return;
    }
#if HDP_HAVE_CUDA
    ptr = kernels::cuda::device_alloc(bytes);
#else
    throw InvalidArgument("Tensor: a CUDA tensor was requested but this build of hdp has no CUDA");
#endif
  }
  ~Storage() {
#if HDP_HAVE_CUDA
    if (pinned) {
      kernels::cuda::host_free_pinned(ptr);
      return;
    }
#endif
    if (device == Device::kCpu) {
      std::free(ptr);
      return;
    }
#if HDP_HAVE_CUDA
    kernels::cuda::device_free(ptr);
#endif
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

namespace {

// Host and device copies in every direction; CPU-to-CPU is memcpy.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (dst_dev == Device::kCpu && src_dev == Device::kCpu) {
    if (bytes) std::memcpy(dst, src, bytes);
    return;
  }
#if HDP_HAVE_CUDA
  if (dst_dev == Device::kCuda && src_dev == Device::kCuda) {
    kernels::cuda::copy_device_to_device(dst, src, bytes);
  } else if (dst_dev == Device::kCuda) {
    kernels::cuda::copy_host_to_device(dst, src, bytes);
  } else {
    kernels::cuda::copy_device_to_host(dst, src, bytes);
  }
#else
  throw InvariantViolation("Tensor: a CUDA tensor exists in a build without CUDA");
#endif
}

}  // namespace

Tensor Tensor::allocate(const char* what, const Shape& shape, DType dtype, Device device, HostAllocation host) {
  for (int64_t d : shape)
    if (d < 0) throw InvalidArgument(std::string(what) + ": negative dimension in shape " + shape_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(t.bytes(), device, host);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return allocate("Tensor::empty", shape, dtype, device, HostAllocation::kAligned);
}

Tensor Tensor::pinned(const Shape& shape, DType dtype) {
  return allocate("Tensor::pinned", shape, dtype, Device::kCpu, HostAllocation::kPinned);
}

Tensor Tensor::whole_pages(const Shape& shape, DType dtype) {
  return allocate("Tensor::whole_pages", shape, dtype, Device::kCpu, HostAllocation::kWholePages);
}

bool Tensor::is_pinned() const { return storage_ && storage_->pinned; }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  Tensor t = empty(shape, dtype_of<T>());
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw InvalidArgument("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                          shape_string(shape));
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.bytes());
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return dtype_name(dtype_) + shape_string(shape_) + " " + device_name(device_);
}

void* Tensor::raw() const {
  if (!defined()) throw InvalidArgument("Tensor: access to an undefined tensor");
  return static_cast<char*>(storage_->ptr) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

template <typename T>
T* Tensor::data() const {
  if (dtype_ != dtype_of<T>())
    throw InvalidArgument("Tensor::data: tensor is " + describe() + ", requested " + dtype_name(dtype_of<T>()));
  return static_cast<T*>(raw());
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  Tensor t = *this;
  t.shape_ = shape;
  t.offset_ = offset_ + offset;
  if (offset < 0 || offset + t.numel() > numel())
    throw InvalidArgument("Tensor::view: " + shape_string(shape) + " at offset " + std::to_string(offset) +
                          " does not fit in " + describe());
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Tensor t = *this;
  t.shape_ = shape;
  if (t.numel() != numel())
    throw InvalidArgument("Tensor::reshape: cannot reshape " + describe() + " to " + shape_string(shape));
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  if (src.dtype_ != dtype_ || src.numel() != numel())
    throw InvalidArgument("Tensor::copy_from: cannot copy " + src.describe() + " into " + describe());
  copy_bytes(raw(), device_, src.raw(), src.device_, bytes());
}

void Tensor::zero_() const {
  if (device_ == Device::kCpu) {
    if (bytes()) std::memset(raw(), 0, bytes());
    return;
  }
#if HDP_HAVE_CUDA
  kernels::cuda::device_zero(raw(), bytes());
#endif
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  if (dtype_ != dtype_of<T>())
    throw InvalidArgument("Tensor::to_vector: tensor is " + describe() + ", requested " + dtype_name(dtype_of<T>()));
  copy_bytes(out.data(), Device::kCpu, raw(), device_, bytes());
  return out;
}

#define HDP_TENSOR_INSTANTIATE(T)                                                \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&); \
  template T* Tensor::data<T>() const;                                         \
  template std::vector<T> Tensor::to_vector<T>() const;
HDP_TENSOR_INSTANTIATE(float)
HDP_TENSOR_INSTANTIATE(double)
HDP_TENSOR_INSTANTIATE(int32_t)
HDP_TENSOR_INSTANTIATE(int64_t)
HDP_TENSOR_INSTANTIATE(uint16_t)
#undef HDP_TENSOR_INSTANTIATE

}  // namespace hdp::ops
