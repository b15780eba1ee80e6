#include "kernels/cpu/adamw.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace hdp::kernels {

float clip_scale(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace hdp::kernels

namespace hdp::kernels::cpu {

template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWParams& p) {
  const T b1 = p.beta1, b2 = p.beta2, lr = p.lr, wd = p.weight_decay, eps = p.eps, scale = p.grad_scale;
  const T bc1 = T(1) - static_cast<T>(std::pow(double(p.beta1), double(p.step)));
  const T bc2 = T(1) - static_cast<T>(std::pow(double(p.beta2), double(p.step)));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * scale;
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    const T mhat = m[i] / bc1;
    const T vhat = v[i] / bc2;
    param[i] -= lr * (wd * param[i] + mhat / (std::sqrt(vhat) + eps));
  }
}

template void adamw_step<float>(float*, const float*, float*, float*, int64_t, const AdamWParams&);
template void adamw_step<double>(double*, const double*, double*, double*, int64_t, const AdamWParams&);

template <typename T>
double sum_squares(const T* x, int64_t n) {
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) total += double(x[i]) * double(x[i]);
  return total;
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace hdp::kernels::cpu
