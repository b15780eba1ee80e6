#include "kernels/cpu/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {
namespace {

// The merge weights of one row; both 0 when neither partial saw a key.
template <typename T>
void weights(T lse1, T lse2, T& lse, T& w1, T& w2) {
  const T mx = std::max(lse1, lse2);
  if (mx == -std::numeric_limits<T>::infinity()) {
    lse = mx;
    w1 = w2 = T(0);
    return;
  }
  lse = mx + std::log(std::exp(lse1 - mx) + std::exp(lse2 - mx));
  w1 = std::exp(lse1 - lse);
  w2 = std::exp(lse2 - lse);
}

}  // namespace

template <typename T>
void attention_merge_forward(const T* out1, const T* lse1, const T* out2, const T* lse2, T* out, T* lse,
                             int64_t rows, int64_t dim) {
#pragma omp parallel for schedule(static) if (worth_parallel(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    T merged, w1, w2;
    weights(lse1[r], lse2[r], merged, w1, w2);
    for (int64_t c = 0; c < dim; ++c) out[r * dim + c] = w1 * out1[r * dim + c] + w2 * out2[r * dim + c];
    lse[r] = merged;
  }
}

template <typename T>
void attention_merge_backward(const T* out1, const T* lse1, const T* out2, const T* lse2, const T* out,
                              const T* dout, const T* dlse, T* dout1, T* dlse1, T* dout2, T* dlse2,
                              int64_t rows, int64_t dim) {
#pragma omp parallel for schedule(static) if (worth_parallel(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    T merged, w1, w2;
    weights(lse1[r], lse2[r], merged, w1, w2);
    const T* g = dout + r * dim;
    T dot1 = 0, dot2 = 0;
    for (int64_t c = 0; c < dim; ++c) {
      dot1 += g[c] * (out1[r * dim + c] - out[r * dim + c]);
      dot2 += g[c] * (out2[r * dim + c] - out[r * dim + c]);
      dout1[r * dim + c] += w1 * g[c];
      dout2[r * dim + c] += w2 * g[c];
    }
    const T gl = dlse ? dlse[r] : T(0);
    dlse1[r] += w1 * (gl + dot1);
    dlse2[r] += w2 * (gl + dot2);
  }
}

template void attention_merge_forward<float>(const float*, const float*, const float*, const float*, float*,
                                             float*, int64_t, int64_t);
template void attention_merge_forward<double>(const double*, const double*, const double*, const double*,
                                              double*, double*, int64_t, int64_t);
template void attention_merge_backward<float>(const float*, const float*, const float*, const float*,
                                              const float*, const float*, const float*, float*,
                                              float*, float*, float*, int64_t, int64_t);
template void attention_merge_backward<double>(const double*, const double*, const double*, const double*,
                                               const double*, const double*, const double*,
                                               double*, double*, double*, double*, int64_t, int64_t);

}  // namespace hdp::kernels::cpu
