#include "kernels/cpu/swiglu.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* h, int64_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) h[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
}

template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dh, T* dgate, T* dup, int64_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + std::exp(-gate[i]));
    const T silu = gate[i] * s;
    dgate[i] += dh[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));  // silu'(g) = s (1 + g (1 - s))
    dup[i] += dh[i] * silu;
  }
}

template void swiglu_forward<float>(const float*, const float*, float*, int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*, int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*, double*, int64_t);

}  // namespace hdp::kernels::cpu
