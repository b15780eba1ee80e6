// staging_memory.h with the CUDA runtime (a build with CUDA): host buffers page-locked with
// cudaHostRegister (the buffers are ops::Tensor storage, which the inner TCP communicator takes,
// so they are locked in place rather than allocated with cudaHostAlloc), and device copies on the
// caller's stream through kernels/cuda/memory.h.
#include <cuda_runtime.h>

#include "common/error.h"
#include "kernels/cuda/memory.h"
#include "mesh/comm/staging_memory.h"

namespace hdp::mesh::staging {
namespace {

void check_same(const ops::Tensor& a, const ops::Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) {
    throw InvariantViolation("staging: cannot copy " + b.describe() + " into " + a.describe());
  }
}

}  // namespace

bool pin(const ops::Tensor& host) {
  if (host.device() != ops::Device::kCpu || host.bytes() == 0) return false;
  if (cudaHostRegister(host.raw(), host.bytes(), cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();  // no device, or locked memory refused: the buffer stays pageable, which still works
  return false;
}

void unpin(const ops::Tensor& host) noexcept {
  if (host.defined() && host.bytes() > 0) {
    if (cudaHostUnregister(host.raw()) != cudaSuccess) cudaGetLastError();
  }
}

void to_host(const ops::Tensor& host, const ops::Tensor& src, Stream stream) {
  if (src.device() != ops::Device::kCuda) {
    host.copy_from(src);
    return;
  }
  check_same(host, src);
  kernels::cuda::copy_device_to_host(host.raw(), src.raw(), src.bytes(), stream);  // waits for the stream
}

void from_host(const ops::Tensor& dst, const ops::Tensor& host, Stream stream) {
  if (dst.device() != ops::Device::kCuda) {
    dst.copy_from(host);
    return;
  }
  check_same(dst, host);
  kernels::cuda::copy_host_to_device(dst.raw(), host.raw(), host.bytes(), stream);
  // From locked memory the copy is asynchronous: the buffer goes back to the pool only once it ran.
  kernels::cuda::stream_synchronize(stream);
}

}  // namespace hdp::mesh::staging
