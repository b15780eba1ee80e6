#include "kernels/cuda/blas.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_api.h"

namespace hdp::kernels::cuda {
namespace {

// A handle is not safe to share between threads; one per thread is the pattern cuBLAS documents.
class Handle {
 public:
  Handle() { CUBLAS_CHECK(cublas().create(&handle_)); }
  ~Handle() { cublas().destroy(handle_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

cublasHandle_t thread_handle() {
  thread_local Handle handle;
  return handle.get();
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream stream) {
  if (m == 0 || n == 0) return;
  // cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
  // so the operands swap and each keeps its own transpose flag.
  CUBLAS_CHECK(cublas().set_stream(thread_handle(), native(stream)));
  CUBLAS_CHECK(cublas().sgemm(thread_handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                           static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream stream) {
  if (m == 0 || n == 0) return;
  CUBLAS_CHECK(cublas().set_stream(thread_handle(), native(stream)));
  CUBLAS_CHECK(cublas().gemm_ex(thread_handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_16BF,
                            static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta, c, CUDA_R_32F,
                            static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void axpy(int64_t n, float alpha, const float* x, float* y, Stream stream) {
  if (n == 0) return;
  CUBLAS_CHECK(cublas().set_stream(thread_handle(), native(stream)));
  CUBLAS_CHECK(cublas().saxpy(thread_handle(), static_cast<int>(n), &alpha, x, 1, y, 1));
}

}  // namespace hdp::kernels::cuda
