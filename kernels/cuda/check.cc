#include "kernels/cuda/check.h"

#include <string>

#include "common/error.h"
#include "kernels/cuda/cublas_api.h"

namespace hdp::kernels::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clear the error if it is not sticky, so a caller that catches can go on using the device.
  cudaGetLastError();
  throw FatalError("[" + std::string(file) + ":" + std::to_string(line) + "] CUDA error " + cudaGetErrorName(err) +
                   ": " + cudaGetErrorString(err) + " in " + call);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw FatalError("[" + std::string(file) + ":" + std::to_string(line) + "] cuBLAS error " +
                   cublas().status_name(status) + ": " + cublas().status_string(status) + " in " + call);
}

}  // namespace hdp::kernels::cuda::detail
