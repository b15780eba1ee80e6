#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {

template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, int64_t n, int64_t vocab) {
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (worth_parallel(n * vocab))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * vocab;
    const T mx = *std::max_element(row, row + vocab);
    T sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    lse[i] = mx + std::log(sum);
    if (targets[i] >= 0) total += double(lse[i] - row[targets[i]]);
  }
  return total;
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, T dloss, T* dlogits,
                            int64_t n, int64_t vocab) {
#pragma omp parallel for schedule(static) if (worth_parallel(n * vocab))
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0) continue;
    const T* row = logits + i * vocab;
    T* drow = dlogits + i * vocab;
    for (int64_t v = 0; v < vocab; ++v) drow[v] += dloss * std::exp(row[v] - lse[i]);
    drow[targets[i]] -= dloss;
  }
}

template double cross_entropy_forward<float>(const float*, const int32_t*, float*, int64_t, int64_t);
template double cross_entropy_forward<double>(const double*, const int32_t*, double*, int64_t, int64_t);
template void cross_entropy_backward<float>(const float*, const int32_t*, const float*, float, float*, int64_t,
                                            int64_t);
template void cross_entropy_backward<double>(const double*, const int32_t*, const double*, double, double*,
                                             int64_t, int64_t);

}  // namespace hdp::kernels::cpu
