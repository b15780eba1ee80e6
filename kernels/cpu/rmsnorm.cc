#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t n, int64_t dim, double eps) {
#pragma omp parallel for schedule(static) if (worth_parallel(n * dim))
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * dim;
    T ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += xi[c] * xi[c];
    const T r = T(1) / std::sqrt(ss / T(dim) + T(eps));
    rstd[i] = r;
    T* yi = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yi[c] = weight[c] * (xi[c] * r);
  }
}

template <typename T>
void rmsnorm_backward(const T* x, const T* weight, const T* rstd, const T* dy, T* dx, T* dweight, int64_t n,
                      int64_t dim) {
  // dx = r * w*dy - r^3/dim * x * sum(w*dy*x): the second term is the gradient through rstd.
#pragma omp parallel for schedule(static) if (worth_parallel(n * dim))
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * dim;
    const T* dyi = dy + i * dim;
    const T r = rstd[i];
    T dot = 0;
    for (int64_t c = 0; c < dim; ++c) dot += weight[c] * dyi[c] * xi[c];
    const T k = dot * r * r * r / T(dim);
    T* dxi = dx + i * dim;
    for (int64_t c = 0; c < dim; ++c) dxi[c] += r * weight[c] * dyi[c] - k * xi[c];
  }
  // dweight: threads own column blocks so the row sum has a fixed order (deterministic).
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(n * dim))
  for (int64_t cb = 0; cb < blocks; ++cb) {
    const int64_t c0 = cb * kBlock, c1 = std::min(dim, c0 + kBlock);
    T acc[kBlock] = {};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += dy[i * dim + c] * x[i * dim + c] * rstd[i];
    for (int64_t c = c0; c < c1; ++c) dweight[c] += acc[c - c0];
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, int64_t, int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, int64_t, int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*, float*, float*,
                                      int64_t, int64_t);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*, double*,
                                       double*, int64_t, int64_t);

}  // namespace hdp::kernels::cpu
