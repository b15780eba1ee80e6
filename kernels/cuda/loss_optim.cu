/*
 * Cross-entropy, the attention LSE merge, AdamW and the squared norm (fp32).
 * CPU references: kernels/cpu/{cross_entropy,attention_merge,adamw}.cc; same contracts.
 */
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/loss_optim.h"

namespace hdp::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Max / sum over the block (blockDim.x == kThreads); every thread gets the result.
template <typename Op>
__device__ float block_reduce(float v, Op op) {
  __shared__ float warp_vals[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_vals[threadIdx.x / 32] = v;
  __syncthreads();
  float r = warp_vals[0];
  for (int w = 1; w < kThreads / 32; ++w) r = op(r, warp_vals[w]);
  return r;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// ----------------------------------------------------------------------------
// CUDA kernels

// One block per row: lse and the row's loss (0 for an uncounted row).
__global__ void cross_entropy_forward_kernel(const float* logits, const int32_t* targets, float* lse, float* loss,
                                             int64_t vocab) {
  const float* row = logits + blockIdx.x * vocab;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_reduce(mx, MaxOp{});
  float sum = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += expf(row[v] - mx);
  sum = block_reduce(sum, SumOp{});
  if (threadIdx.x == 0) {
    const float l = mx + logf(sum);
    const int32_t t = targets[blockIdx.x];
    lse[blockIdx.x] = l;
    loss[blockIdx.x] = t >= 0 ? l - row[t] : 0.0f;
  }
}

__global__ void cross_entropy_backward_kernel(const float* logits, const int32_t* targets, const float* lse,
                                              float dloss, float* dlogits, int64_t n, int64_t vocab) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n * vocab) return;
  const int64_t r = i / vocab;
  const int32_t t = targets[r];
  if (t < 0) return;
  dlogits[i] += dloss * (expf(logits[i] - lse[r]) - (i % vocab == t ? 1.0f : 0.0f));
}

// The merge weights of one row; both 0 when neither partial saw a key.
__device__ void merge_weights(float l1, float l2, float& lse, float& w1, float& w2) {
  const float mx = fmaxf(l1, l2);
  if (mx == -INFINITY) {
    lse = mx;
    w1 = w2 = 0.0f;
    return;
  }
  lse = mx + logf(expf(l1 - mx) + expf(l2 - mx));
  w1 = expf(l1 - lse);
  w2 = expf(l2 - lse);
}

// One thread per row.
__global__ void merge_forward_kernel(const float* o1, const float* l1, const float* o2, const float* l2, float* o,
                                     float* l, int64_t rows, int64_t dim) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float lse, w1, w2;
  merge_weights(l1[r], l2[r], lse, w1, w2);
  for (int64_t c = 0; c < dim; ++c) o[r * dim + c] = w1 * o1[r * dim + c] + w2 * o2[r * dim + c];
  l[r] = lse;
}

__global__ void merge_backward_kernel(const float* o1, const float* l1, const float* o2, const float* l2,
                                      const float* o, const float* dout, const float* dlse, float* do1, float* dl1,
                                      float* do2, float* dl2, int64_t rows, int64_t dim) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float lse, w1, w2;
  merge_weights(l1[r], l2[r], lse, w1, w2);
  float dot1 = 0, dot2 = 0;
  for (int64_t c = 0; c < dim; ++c) {
    const int64_t i = r * dim + c;
    dot1 += dout[i] * (o1[i] - o[i]);
    dot2 += dout[i] * (o2[i] - o[i]);
    do1[i] += w1 * dout[i];
    do2[i] += w2 * dout[i];
  }
  const float g = dlse ? dlse[r] : 0.0f;
  dl1[r] += w1 * (g + dot1);
  dl2[r] += w2 * (g + dot2);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWParams p, float bc1,
                             float bc2) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i] * p.grad_scale;
  m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
  v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
  const float mhat = m[i] / bc1, vhat = v[i] / bc2;
  param[i] -= p.lr * (p.weight_decay * param[i] + mhat / (sqrtf(vhat) + p.eps));
}

// Per-block partial sums in double, reduced on the host (deterministic for a given launch shape).
__global__ void sum_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * double(x[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

}  // namespace

// ----------------------------------------------------------------------------
// kernel launchers

double cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t n, int64_t vocab, Stream stream) {
  if (n == 0) return 0;
  DeviceBuffer<float> loss(static_cast<size_t>(n));
  cross_entropy_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, native(stream)>>>(logits, targets, lse, loss.get(), vocab);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<float> rows = loss.to_host(stream);
  return std::accumulate(rows.begin(), rows.end(), 0.0);
}

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float dloss,
                            float* dlogits, int64_t n, int64_t vocab, Stream stream) {
  if (n * vocab == 0) return;
  cross_entropy_backward_kernel<<<blocks_for(n * vocab), kThreads, 0, native(stream)>>>(logits, targets, lse, dloss, dlogits, n, vocab);
  CUDA_CHECK(cudaGetLastError());
}

void attention_merge_forward(const float* out1, const float* lse1, const float* out2, const float* lse2, float* out,
                             float* lse, int64_t rows, int64_t dim, Stream stream) {
  if (rows == 0) return;
  merge_forward_kernel<<<blocks_for(rows), kThreads, 0, native(stream)>>>(out1, lse1, out2, lse2, out, lse, rows, dim);
  CUDA_CHECK(cudaGetLastError());
}

void attention_merge_backward(const float* out1, const float* lse1, const float* out2, const float* lse2,
                              const float* out, const float* dout, const float* dlse, float* dout1, float* dlse1,
                              float* dout2, float* dlse2, int64_t rows, int64_t dim, Stream stream) {
  if (rows == 0) return;
  merge_backward_kernel<<<blocks_for(rows), kThreads, 0, native(stream)>>>(out1, lse1, out2, lse2, out, dout, dlse, dout1, dlse1, dout2,
                                                        dlse2, rows, dim);
  CUDA_CHECK(cudaGetLastError());
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p, Stream stream) {
  if (n == 0) return;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(p.beta1), double(p.step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(p.beta2), double(p.step)));
  adamw_kernel<<<blocks_for(n), kThreads, 0, native(stream)>>>(param, grad, m, v, n, p, bc1, bc2);
  CUDA_CHECK(cudaGetLastError());
}

double sum_squares(const float* x, int64_t n, Stream stream) {
  if (n == 0) return 0;
  const unsigned blocks = std::min(blocks_for(n), 1024u);
  DeviceBuffer<double> partial(blocks);
  sum_squares_kernel<<<blocks, kThreads, 0, native(stream)>>>(x, n, partial.get());
  CUDA_CHECK(cudaGetLastError());
  const std::vector<double> parts = partial.to_host(stream);
  return std::accumulate(parts.begin(), parts.end(), 0.0);
}

}  // namespace hdp::kernels::cuda
