/*
 * Flash-attention-style packed varlen attention with GQA (fp32), forward and backward.
 * CPU reference: kernels/cpu/attention.cc; layout and masking rule: kernels/attention_layout.h.
 *
 * One warp owns one (query row, head) in the forward and the dq pass: each lane keeps head_dim/32
 * elements of q and of the output accumulator in registers and streams over the visible keys with
 * an online softmax (running max and sum, rescaling the accumulator), then writes out and the LSE.
 * The backward recomputes each probability from the LSE: a dq pass per query row and a dk/dv pass
 * in which one warp owns one (key row, kv head) and walks the query rows (of every query head in
 * its group) that see that key, so no gradient element is written by two warps (no atomics).
 */
#include "common/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_buffer.h"

namespace hdp::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;

// The layout as plain values and device pointers.
struct Params {
  int64_t tq, tk;
  int n_seqs, n_heads, n_kv_heads, head_dim;
  float scale;
  bool causal;
  const int32_t* cu_q;
  const int32_t* cu_k;
  const int64_t* q_pos;
  const int64_t* k_pos;
};

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sequence owning global row `row`: the last b with cu[b] <= row (skips empty sequences).
__device__ int find_seq(const int32_t* cu, int n_seqs, int64_t row) {
  int lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Keys of sequence b visible to its local query row i (a prefix of the sequence's keys).
__device__ int64_t visible(const Params& p, int b, int64_t i) {
  const int64_t nk = p.cu_k[b + 1] - p.cu_k[b];
  if (!p.causal) return nk;
  const int64_t v = p.q_pos[b] + i - p.k_pos[b] + 1;
  return v < 0 ? 0 : (v > nk ? nk : v);
}

// Loads this lane's elements of a head_dim vector (element lane + 32 e).
__device__ void load(const float* src, int head_dim, float (&dst)[kPerLane]) {
  const int lane = threadIdx.x % 32;
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    dst[e] = c < head_dim ? src[c] : 0.0f;
  }
}

__device__ float dot(const float (&a)[kPerLane], const float* b, int head_dim) {
  const int lane = threadIdx.x % 32;
  float s = 0;
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < head_dim) s += a[e] * b[c];
  }
  return warp_sum(s);
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void forward_kernel(Params p, const float* q, const float* k, const float* v, float* out, float* lse) {
  const int64_t w = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (w >= p.tq * p.n_heads) return;
  const int64_t row = w / p.n_heads;
  const int h = static_cast<int>(w % p.n_heads), g = h / (p.n_heads / p.n_kv_heads), lane = threadIdx.x % 32;
  const int b = find_seq(p.cu_q, p.n_seqs, row);
  const int64_t n_vis = visible(p, b, row - p.cu_q[b]);
  float qr[kPerLane], acc[kPerLane] = {};
  load(q + w * p.head_dim, p.head_dim, qr);
  float m = -INFINITY, l = 0;
  for (int64_t j = 0; j < n_vis; ++j) {
    const int64_t kv = ((p.cu_k[b] + j) * p.n_kv_heads + g) * p.head_dim;
    const float s = dot(qr, k + kv, p.head_dim) * p.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), pj = expf(s - m_new);
    l = l * corr + pj;
    for (int e = 0; e < kPerLane; ++e) {
      const int c = lane + 32 * e;
      acc[e] = acc[e] * corr + (c < p.head_dim ? pj * v[kv + c] : 0.0f);
    }
    m = m_new;
  }
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.head_dim) out[w * p.head_dim + c] = l > 0 ? acc[e] / l : 0.0f;
  }
  if (lane == 0) lse[w] = l > 0 ? m + logf(l) : -INFINITY;
}

// delta[w] = dout . out - dlse for each (row, head).
__global__ void delta_kernel(Params p, const float* out, const float* dout, const float* dlse, float* delta) {
  const int64_t w = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (w >= p.tq * p.n_heads) return;
  float o[kPerLane];
  load(out + w * p.head_dim, p.head_dim, o);
  const float d = dot(o, dout + w * p.head_dim, p.head_dim);
  if (threadIdx.x % 32 == 0) delta[w] = d - (dlse ? dlse[w] : 0.0f);
}

__global__ void dq_kernel(Params p, const float* q, const float* k, const float* v, const float* lse,
                          const float* dout, const float* delta, float* dq) {
  const int64_t w = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (w >= p.tq * p.n_heads) return;
  const int64_t row = w / p.n_heads;
  const int h = static_cast<int>(w % p.n_heads), g = h / (p.n_heads / p.n_kv_heads), lane = threadIdx.x % 32;
  const int b = find_seq(p.cu_q, p.n_seqs, row);
  const int64_t n_vis = visible(p, b, row - p.cu_q[b]);
  float qr[kPerLane], dor[kPerLane], acc[kPerLane] = {};
  load(q + w * p.head_dim, p.head_dim, qr);
  load(dout + w * p.head_dim, p.head_dim, dor);
  for (int64_t j = 0; j < n_vis; ++j) {
    const int64_t kv = ((p.cu_k[b] + j) * p.n_kv_heads + g) * p.head_dim;
    const float pj = expf(dot(qr, k + kv, p.head_dim) * p.scale - lse[w]);
    const float ds = pj * (dot(dor, v + kv, p.head_dim) - delta[w]);
    for (int e = 0; e < kPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < p.head_dim) acc[e] += ds * k[kv + c];
    }
  }
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.head_dim) dq[w * p.head_dim + c] += p.scale * acc[e];
  }
}

__global__ void dkv_kernel(Params p, const float* q, const float* k, const float* v, const float* lse,
                           const float* dout, const float* delta, float* dk, float* dv) {
  const int64_t w = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (w >= p.tk * p.n_kv_heads) return;
  const int64_t key = w / p.n_kv_heads;
  const int g = static_cast<int>(w % p.n_kv_heads), group = p.n_heads / p.n_kv_heads, lane = threadIdx.x % 32;
  const int b = find_seq(p.cu_k, p.n_seqs, key);
  const int64_t j = key - p.cu_k[b], nq = p.cu_q[b + 1] - p.cu_q[b];
  // Query rows see a prefix of the keys that grows with i, so those seeing key j form a suffix.
  int64_t first = 0;
  if (p.causal) {
    first = p.k_pos[b] + j - p.q_pos[b];
    first = first < 0 ? 0 : first;
  }
  float kr[kPerLane], vr[kPerLane], dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  load(k + w * p.head_dim, p.head_dim, kr);
  load(v + w * p.head_dim, p.head_dim, vr);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = first; i < nq; ++i) {
      const int64_t qw = (p.cu_q[b] + i) * p.n_heads + h;
      const float pj = expf(dot(kr, q + qw * p.head_dim, p.head_dim) * p.scale - lse[qw]);
      const float ds = pj * (dot(vr, dout + qw * p.head_dim, p.head_dim) - delta[qw]);
      for (int e = 0; e < kPerLane; ++e) {
        const int c = lane + 32 * e;
        if (c < p.head_dim) {
          dv_acc[e] += pj * dout[qw * p.head_dim + c];
          dk_acc[e] += ds * q[qw * p.head_dim + c];
        }
      }
    }
  }
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.head_dim) {
      dv[w * p.head_dim + c] += dv_acc[e];
      dk[w * p.head_dim + c] += p.scale * dk_acc[e];
    }
  }
}

unsigned blocks_for_warps(int64_t warps) { return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// The layout's offset tables on the device, and the kernel parameters pointing at them.
struct DeviceLayout {
  DeviceBuffer<int32_t> cu_q, cu_k;
  DeviceBuffer<int64_t> q_pos, k_pos;
  Params params;

  explicit DeviceLayout(const AttentionLayout& l)
      : cu_q(std::vector<int32_t>(l.cu_q.begin(), l.cu_q.end())),
        cu_k(std::vector<int32_t>(l.cu_k.begin(), l.cu_k.end())),
        q_pos(std::vector<int64_t>(l.q_pos.begin(), l.q_pos.end())),
        k_pos(std::vector<int64_t>(l.k_pos.begin(), l.k_pos.end())) {
    HDP_CHECK(l.head_dim <= kMaxHeadDim, "CUDA attention supports head_dim <= 256, got " + std::to_string(l.head_dim));
    params = Params{l.tq, l.tk, static_cast<int>(l.n_seqs()), l.n_heads, l.n_kv_heads, l.head_dim,
                    static_cast<float>(l.scale), l.causal, cu_q.get(), cu_k.get(), q_pos.get(), k_pos.get()};
  }
};

}  // namespace

// ----------------------------------------------------------------------------
// kernel launchers

void attention_forward(const AttentionLayout& layout, const float* q, const float* k, const float* v, float* out,
                       float* lse, Stream stream) {
  const int64_t warps = layout.tq * layout.n_heads;
  if (warps == 0) return;
  const DeviceLayout d(layout);
  forward_kernel<<<blocks_for_warps(warps), 32 * kWarpsPerBlock, 0, native(stream)>>>(d.params, q, k, v, out, lse);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(native(stream)));  // the offset tables are freed when `d` goes out of scope
}

void attention_backward(const AttentionLayout& layout, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, const float* dlse, float* dq,
                        float* dk, float* dv, Stream stream) {
  const int64_t q_warps = layout.tq * layout.n_heads, k_warps = layout.tk * layout.n_kv_heads;
  if (q_warps == 0 || k_warps == 0) return;
  const DeviceLayout d(layout);
  DeviceBuffer<float> delta(static_cast<size_t>(q_warps));
  delta_kernel<<<blocks_for_warps(q_warps), 32 * kWarpsPerBlock, 0, native(stream)>>>(d.params, out, dout, dlse, delta.get());
  CUDA_CHECK(cudaGetLastError());
  dq_kernel<<<blocks_for_warps(q_warps), 32 * kWarpsPerBlock, 0, native(stream)>>>(d.params, q, k, v, lse, dout, delta.get(), dq);
  CUDA_CHECK(cudaGetLastError());
  dkv_kernel<<<blocks_for_warps(k_warps), 32 * kWarpsPerBlock, 0, native(stream)>>>(d.params, q, k, v, lse, dout, delta.get(), dk, dv);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(native(stream)));  // scratch buffers are freed on return
}

}  // namespace hdp::kernels::cuda
