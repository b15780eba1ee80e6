#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {
namespace {

// sign = +1 rotates by +a and overwrites y; sign = -1 rotates by -a and adds into y.
template <typename T>
void rotate(const T* x, const int64_t* positions, T* y, int64_t n, int heads, int head_dim, const T* inv_freq,
            int sign) {
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (worth_parallel(n * heads * head_dim))
  for (int64_t r = 0; r < n; ++r) {
    std::vector<T> cs(head_dim);  // cos in [0, half), sin in [half, D)
    for (int i = 0; i < half; ++i) {
      const T a = T(positions[r]) * inv_freq[i];
      cs[i] = std::cos(a);
      cs[half + i] = T(sign) * std::sin(a);
    }
    for (int h = 0; h < heads; ++h) {
      const T* xr = x + (r * heads + h) * head_dim;
      T* yr = y + (r * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const T lo = xr[i] * cs[i] - xr[half + i] * cs[half + i];
        const T hi = xr[half + i] * cs[i] + xr[i] * cs[half + i];
        if (sign > 0) {
          yr[i] = lo;
          yr[half + i] = hi;
        } else {
          yr[i] += lo;
          yr[half + i] += hi;
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(const T* x, const int64_t* positions, T* y, int64_t n, int heads, int head_dim, const T* inv_freq) {
  rotate(x, positions, y, n, heads, head_dim, inv_freq, +1);
}

template <typename T>
void rope_backward(const T* dy, const int64_t* positions, T* dx, int64_t n, int heads, int head_dim,
                   const T* inv_freq) {
  rotate(dy, positions, dx, n, heads, head_dim, inv_freq, -1);
}

template void rope_forward<float>(const float*, const int64_t*, float*, int64_t, int, int, const float*);
template void rope_forward<double>(const double*, const int64_t*, double*, int64_t, int, int, const double*);
template void rope_backward<float>(const float*, const int64_t*, float*, int64_t, int, int, const float*);
template void rope_backward<double>(const double*, const int64_t*, double*, int64_t, int, int, const double*);

}  // namespace hdp::kernels::cpu
