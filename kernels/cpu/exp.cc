#include "kernels/cpu/exp.h"

#include <bit>
#include <cmath>

namespace hdp::kernels::cpu {

// Function multiversioning resolves through an ifunc at load time, before AddressSanitizer's runtime
// is up, so sanitizer builds (which check correctness, not speed) use the baseline code only.
#if defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_ADDRESS__)
#define HDP_EXP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HDP_EXP_CLONES
#endif

HDP_EXP_CLONES float exp_shift_sum(float* x, int64_t n, float shift) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    // exp(v) = 2^k * exp(r), k = round(v / ln 2), |r| <= ln2 / 2; ln 2 split in two for accuracy.
    // v is clamped so 2^k stays a normal float (results below 1e-37 are irrelevant to a softmax).
    // Plain comparisons, not std::fmax/fmin: those are libm calls here and stop the vectorisation.
    float v = x[i] - shift;
    v = v > 88.0f ? 88.0f : v;
    v = v < -87.0f ? -87.0f : v;
    // Round to nearest by adding and subtracting 1.5 * 2^23 (|v / ln 2| < 2^22): no floorf call,
    // which is not inlined without -ffast-math and would stop the vectorisation.
    const float k = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = v - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = (p * r * r + r + 1.0f) * std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
    x[i] = e;
    sum += e;
  }
  return sum;
}

double exp_shift_sum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

}  // namespace hdp::kernels::cpu
