#include "kernels/cpu/embedding.h"

#include <algorithm>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {

template <typename T>
void embedding_forward(const int32_t* tokens, const T* weight, T* out, int64_t n, int64_t dim) {
#pragma omp parallel for schedule(static) if (worth_parallel(n * dim))
  for (int64_t i = 0; i < n; ++i) std::copy_n(weight + tokens[i] * dim, dim, out + i * dim);
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, T* dweight, int64_t n, int64_t dim) {
  // Threads own column blocks, not tokens: repeated tokens would otherwise race on one row, and the
  // sum order stays fixed, so the result does not depend on the thread count.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(n * dim))
  for (int64_t cb = 0; cb < blocks; ++cb) {
    const int64_t c0 = cb * kBlock, c1 = std::min(dim, c0 + kBlock);
    for (int64_t i = 0; i < n; ++i) {
      T* dst = dweight + tokens[i] * dim;
      const T* src = dout + i * dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

template void embedding_forward<float>(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_forward<double>(const int32_t*, const double*, double*, int64_t, int64_t);
template void embedding_backward<float>(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_backward<double>(const int32_t*, const double*, double*, int64_t, int64_t);

}  // namespace hdp::kernels::cpu
