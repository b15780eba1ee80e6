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

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p) {
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(p.beta1), double(p.step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(p.beta2), double(p.step)));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * p.grad_scale;
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    param[i] -= p.lr * (p.weight_decay * param[i] + mhat / (std::sqrt(vhat) + p.eps));
  }
}

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
