/*
 * Tensor-core packed varlen attention with GQA (bf16 in, fp32 accumulate), forward and backward.
 * Layout and masking: kernels/attention_layout.h; the fp32 kernel it is checked against:
 * kernels/cuda/attention.cu. Matrix products use WMMA (16x16x16 bf16 fragments, fp32 accumulators)
 * from shared memory; the online softmax and the masks are plain CUDA on the fp32 scores.
 *
 * Forward: one block per (64-query tile of one sequence, query head), four warps, each owning 16 of
 * the tile's rows. Key/value tiles of 64 rows stream through shared memory; per tile a warp computes
 * S = Q K^T for its rows, updates each row's running max and sum (the whole warp on one row at a
 * time, shuffles for the reductions), writes P = exp(S - max) as bf16, and rescales and adds P V
 * into its rows of the output, which stay in registers (accumulator fragments) until the end.
 *
 * Backward (FlashAttention-2): one block per (64-key tile, kv head). It keeps dK and dV of its keys
 * in registers (each warp 16 key rows, as accumulator fragments) and walks every query tile (of
 * every query head in the GQA group) that sees them:
 * S = Q K^T and dP = dO V^T by query rows, P = exp(S - lse), dS = P (dP - delta) scale, then
 * dV += P^T dO and dK += dS^T Q by key rows, and dQ = dS K added to global memory with atomics.
 */
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"

namespace hdp::kernels::cuda {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and key rows of a tile
constexpr int kWarps = 4;  // each warp owns 16 rows of a tile
constexpr int kThreads = 32 * kWarps;

// Row strides in shared memory: padded so rows start in different banks; wmma needs a multiple of 8
// (16-bit) or 4 (fp32) elements, and every fragment pointer below stays 32-byte aligned.
template <int D>
struct Ld {
  static constexpr int kH = D + 8;       // bf16 [64][D] tiles
  static constexpr int kF = D + 4;       // fp32 [64][D] accumulators
  static constexpr int kS = kTile + 4;   // fp32 [64][64] scores
  static constexpr int kP = kTile + 8;   // bf16 [64][64] probabilities
};

// A tile: up to 64 rows of one sequence, starting `start` rows into it.
struct Tile {
  int32_t seq;
  int32_t start;
};

struct Params {
  int n_heads, n_kv_heads;
  float scale;
  bool causal;
  const int32_t* cu_q;
  const int32_t* cu_k;
  const int64_t* q_pos;
  const int64_t* k_pos;
  const Tile* tiles;
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Keys of sequence b visible to its local query row i: a prefix of the sequence's nk keys.
__device__ int64_t n_visible(const Params& p, int b, int64_t i, int64_t nk) {
  if (!p.causal) return nk;
  const int64_t v = p.q_pos[b] + i - p.k_pos[b] + 1;
  return v < 0 ? 0 : (v > nk ? nk : v);
}

// dst[r][0..D) = rows row0 + r (r < rows; zeros after) of a [rows, heads, D] bf16 tensor, head `head`.
template <int D>
__device__ void load_tile(bf16* dst, const bf16* src, int64_t row0, int rows, int heads, int head) {
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < kTile * kVec; i += kThreads) {
    const int r = i / kVec, c = (i % kVec) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) val = *reinterpret_cast<const uint4*>(src + ((row0 + r) * heads + head) * D + c);
    *reinterpret_cast<uint4*>(dst + r * Ld<D>::kH + c) = val;
  }
}

// C[16 rows of this warp][64] = A[16][D] B^T, with B stored [64][D] (rows of keys): scores.
template <int D>
__device__ void rows_times_keys(const bf16* a, const bf16* b, float* c) {
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA fa;
      FragBt fb;
      wmma::load_matrix_sync(fa, a + kk * 16, Ld<D>::kH);
      wmma::load_matrix_sync(fb, b + n * 16 * Ld<D>::kH + kk * 16, Ld<D>::kH);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, Ld<D>::kS, wmma::mem_row_major);
  }
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Params p, const bf16* q, const bf16* k, const bf16* v, float* out, float* lse) {
  using L = Ld<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kTile * L::kH;
  bf16* vs = ks + kTile * L::kH;
  float* ss = reinterpret_cast<float*>(vs + kTile * L::kH);
  bf16* ps = reinterpret_cast<bf16*>(ss + kTile * L::kS);
  float* scales = reinterpret_cast<float*>(ps + kTile * L::kP);  // a 16x16 tile per warp
  float* os = reinterpret_cast<float*>(ks);  // the output after the last key tile (K and V are done)

  const Tile tile = p.tiles[blockIdx.x];
  const int h = blockIdx.y, g = h / (p.n_heads / p.n_kv_heads), b = tile.seq;
  const int64_t q0 = p.cu_q[b] + tile.start, nq = p.cu_q[b + 1] - p.cu_q[b];
  const int64_t k0 = p.cu_k[b], nk = p.cu_k[b + 1] - p.cu_k[b];
  const int rows = static_cast<int>(nq - tile.start < kTile ? nq - tile.start : kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile_vis = n_visible(p, b, tile.start + rows - 1, nk);  // the last row sees the most
  float* wss = ss + warp * 16 * L::kS;  // this warp's 16 rows of scores, probabilities, scales
  bf16* wps = ps + warp * 16 * L::kP;
  float* wscale = scales + warp * 256;

  // The warp's 16 output rows stay in accumulator fragments. A row's rescale by exp(m_old - m_new)
  // multiplies each fragment element by the same element of a fragment loaded from a 16x16 tile whose
  // row r holds row r's factor: both fragments share one layout, whatever it is.
  FragC o_frag[D / 16];
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o_frag[n], 0.0f);
  float m_row[16], l_row[16];  // running max and sum of row warp*16 + i, the same in every lane
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    m_row[i] = -INFINITY;
    l_row[i] = 0.0f;
  }
  load_tile<D>(qs, q, q0, rows, p.n_heads, h);
  for (int64_t kt = 0; kt < tile_vis; kt += kTile) {
    const int krows = static_cast<int>(nk - kt < kTile ? nk - kt : kTile);
    __syncthreads();  // every warp is done with the previous K and V
    load_tile<D>(ks, k, k0 + kt, krows, p.n_kv_heads, g);
    load_tile<D>(vs, v, k0 + kt, krows, p.n_kv_heads, g);
    __syncthreads();
    rows_times_keys<D>(qs + warp * 16 * L::kH, ks, wss);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 16; ++i) {  // one row at a time, columns lane and lane + 32
      const int r = warp * 16 + i;
      const int64_t vis = r < rows ? n_visible(p, b, tile.start + r, nk) : 0;
      const float s0 = kt + lane < vis ? wss[i * L::kS + lane] * p.scale : -INFINITY;
      const float s1 = kt + lane + 32 < vis ? wss[i * L::kS + lane + 32] * p.scale : -INFINITY;
      const float m_new = fmaxf(m_row[i], warp_max(fmaxf(s0, s1)));
      const bool none = m_new == -INFINITY;  // no key seen yet: p = 0, nothing to rescale
      const float p0 = none ? 0.0f : __expf(s0 - m_new), p1 = none ? 0.0f : __expf(s1 - m_new);
      const float alpha = none ? 1.0f : __expf(m_row[i] - m_new);
      wps[i * L::kP + lane] = __float2bfloat16_rn(p0);
      wps[i * L::kP + lane + 32] = __float2bfloat16_rn(p1);
      l_row[i] = l_row[i] * alpha + warp_sum(p0 + p1);
      m_row[i] = m_new;
      if (lane < 16) wscale[i * 16 + lane] = alpha;
    }
    __syncwarp();
    FragC alpha_frag;
    wmma::load_matrix_sync(alpha_frag, wscale, 16, wmma::mem_row_major);
    for (int n = 0; n < D / 16; ++n) {  // O[16 rows][n-th 16 columns] = alpha O + P V
      for (int t = 0; t < alpha_frag.num_elements; ++t) o_frag[n].x[t] *= alpha_frag.x[t];
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, wps + kk * 16, L::kP);
        wmma::load_matrix_sync(fb, vs + kk * 16 * L::kH + n * 16, L::kH);
        wmma::mma_sync(o_frag[n], fa, fb, o_frag[n]);
      }
    }
    __syncwarp();
  }
  __syncthreads();  // os overlays K and V
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(os + warp * 16 * L::kF + n * 16, o_frag[n], L::kF, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = warp * 16 + i;
    if (r >= rows) continue;
    const float inv = l_row[i] > 0.0f ? 1.0f / l_row[i] : 0.0f;
    float* dst = out + ((q0 + r) * p.n_heads + h) * D;
    for (int c = lane; c < D; c += 32) dst[c] = os[r * L::kF + c] * inv;
    if (lane == 0) lse[(q0 + r) * p.n_heads + h] = l_row[i] > 0.0f ? m_row[i] + logf(l_row[i]) : -INFINITY;
  }
}


// delta[w] = dout . out - dlse for each (row, head) w.
__global__ void delta_kernel(int64_t n, int d, const float* out, const bf16* dout, const float* dlse, float* delta) {
  const int64_t w = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (w >= n) return;
  float s = 0.0f;
  for (int c = threadIdx.x % 32; c < d; c += 32) s += out[w * d + c] * __bfloat162float(dout[w * d + c]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) delta[w] = s - (dlse ? dlse[w] : 0.0f);
}

// dst[row0 + r][head] += src[r] for the block's first `rows` rows of a [*, heads, D] fp32 tensor.
template <int D>
__device__ void add_rows(float* dst, const float* src, int64_t row0, int rows, int heads, int head) {
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int row = i / D, c = i % D;
    dst[((row0 + row) * heads + head) * D + c] += src[row * Ld<D>::kF + c];
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(Params p, const bf16* q, const bf16* k, const bf16* v, const float* lse, const bf16* dout,
                    const float* delta, float* dq, float* dk, float* dv) {
  using L = Ld<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kTile * L::kH;
  bf16* qs = vs + kTile * L::kH;
  bf16* dos = qs + kTile * L::kH;
  float* ss = reinterpret_cast<float*>(dos + kTile * L::kH);
  float* dps = ss + kTile * L::kS;
  float* dqs = ss;  // dQ of a query tile reuses S and dP once P and dS are written (2 kS >= kF)
  bf16* ps = reinterpret_cast<bf16*>(dps + kTile * L::kS);
  bf16* dss = ps + kTile * L::kP;
  float* lse_s = reinterpret_cast<float*>(dss + kTile * L::kP);
  float* delta_s = lse_s + kTile;

  const Tile tile = p.tiles[blockIdx.x];
  const int g = blockIdx.y, group = p.n_heads / p.n_kv_heads, b = tile.seq;
  const int64_t qbase = p.cu_q[b], nq = p.cu_q[b + 1] - p.cu_q[b];
  const int64_t k0 = p.cu_k[b] + tile.start, nk = p.cu_k[b + 1] - p.cu_k[b];
  const int krows = static_cast<int>(nk - tile.start < kTile ? nk - tile.start : kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile<D>(ks, k, k0, krows, p.n_kv_heads, g);
  load_tile<D>(vs, v, k0, krows, p.n_kv_heads, g);
  // The warp's 16 key rows of dK and dV stay in accumulator fragments until the end.
  FragC acc_k[D / 16], acc_v[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(acc_k[n], 0.0f);
    wmma::fill_fragment(acc_v[n], 0.0f);
  }
  // Causal: query rows before `first` see none of these keys (the rows seeing a key form a suffix).
  int64_t first = 0;
  if (p.causal) {
    first = p.k_pos[b] + tile.start - p.q_pos[b];
    first = first < 0 ? 0 : first;
  }
  for (int hq = g * group; hq < (g + 1) * group; ++hq) {
    for (int64_t qt = first / kTile * kTile; qt < nq; qt += kTile) {
      const int qrows = static_cast<int>(nq - qt < kTile ? nq - qt : kTile);
      __syncthreads();  // the previous query tile's Q, dO and dQ are no longer read
      load_tile<D>(qs, q, qbase + qt, qrows, p.n_heads, hq);
      load_tile<D>(dos, dout, qbase + qt, qrows, p.n_heads, hq);
      for (int i = threadIdx.x; i < kTile; i += kThreads) {
        lse_s[i] = i < qrows ? lse[(qbase + qt + i) * p.n_heads + hq] : 0.0f;
        delta_s[i] = i < qrows ? delta[(qbase + qt + i) * p.n_heads + hq] : 0.0f;
      }
      __syncthreads();
      rows_times_keys<D>(qs + warp * 16 * L::kH, ks, ss + warp * 16 * L::kS);
      rows_times_keys<D>(dos + warp * 16 * L::kH, vs, dps + warp * 16 * L::kS);
      __syncwarp();

      for (int i = 0; i < 16; ++i) {  // one row at a time, columns lane and lane + 32
        const int row = warp * 16 + i;
        const int64_t vis = row < qrows ? n_visible(p, b, qt + row, nk) : 0;
        for (int col = lane; col < kTile; col += 32) {
          const bool ok = tile.start + col < vis;
          const float pv = ok ? __expf(ss[row * L::kS + col] * p.scale - lse_s[row]) : 0.0f;
          const float ds = pv * (dps[row * L::kS + col] - delta_s[row]) * p.scale;
          ps[row * L::kP + col] = __float2bfloat16_rn(pv);
          dss[row * L::kP + col] = __float2bfloat16_rn(ds);
        }
      }
      __syncthreads();  // dV and dK read every query row's P and dS

      for (int kk = 0; kk < kTile / 16; ++kk) {  // key rows warp*16..: dV += P^T dO, dK += dS^T Q
        FragAt pt, dst;
        wmma::load_matrix_sync(pt, ps + kk * 16 * L::kP + warp * 16, L::kP);
        wmma::load_matrix_sync(dst, dss + kk * 16 * L::kP + warp * 16, L::kP);
#pragma unroll
        for (int n = 0; n < D / 16; ++n) {
          FragB fdo, fq;
          wmma::load_matrix_sync(fdo, dos + kk * 16 * L::kH + n * 16, L::kH);
          wmma::load_matrix_sync(fq, qs + kk * 16 * L::kH + n * 16, L::kH);
          wmma::mma_sync(acc_v[n], pt, fdo, acc_v[n]);
          wmma::mma_sync(acc_k[n], dst, fq, acc_k[n]);
        }
      }
      for (int n = 0; n < D / 16; ++n) {  // query rows warp*16..: dQ = dS K
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < kTile / 16; ++kk) {
          FragA fds;
          FragB fk;
          wmma::load_matrix_sync(fds, dss + warp * 16 * L::kP + kk * 16, L::kP);
          wmma::load_matrix_sync(fk, ks + kk * 16 * L::kH + n * 16, L::kH);
          wmma::mma_sync(acc, fds, fk, acc);
        }
        wmma::store_matrix_sync(dqs + warp * 16 * L::kF + n * 16, acc, L::kF, wmma::mem_row_major);
      }
      __syncwarp();
      for (int i = lane; i < 16 * D; i += 32) {
        const int row = warp * 16 + i / D, c = i % D;
        if (row < qrows) atomicAdd(dq + ((qbase + qt + row) * p.n_heads + hq) * D + c, dqs[row * L::kF + c]);
      }
    }
  }
  // dK, then dV, through shared memory (over K and V, which are done) to global memory.
  float* staged = reinterpret_cast<float*>(ks);
  __syncthreads();
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(staged + warp * 16 * L::kF + n * 16, acc_k[n], L::kF, wmma::mem_row_major);
  __syncthreads();
  add_rows<D>(dk, staged, k0, krows, p.n_kv_heads, g);
  __syncthreads();
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(staged + warp * 16 * L::kF + n * 16, acc_v[n], L::kF, wmma::mem_row_major);
  __syncthreads();
  add_rows<D>(dv, staged, k0, krows, p.n_kv_heads, g);
}

template <int D>
size_t forward_smem() {
  using L = Ld<D>;
  static_assert(2 * L::kH * sizeof(bf16) >= L::kF * sizeof(float), "the output overlays K and V");
  return kTile * (3 * L::kH * sizeof(bf16) + L::kS * sizeof(float) + L::kP * sizeof(bf16)) + kWarps * 256 * sizeof(float);
}

template <int D>
size_t backward_smem() {
  using L = Ld<D>;
  static_assert(2 * L::kS >= L::kF, "dQ reuses the S and dP buffers");
  static_assert(2 * L::kH * sizeof(bf16) >= L::kF * sizeof(float), "dK and dV leave through K and V's buffers");
  return kTile * (4 * L::kH * sizeof(bf16) + 2 * L::kS * sizeof(float) + 2 * L::kP * sizeof(bf16) + 2 * sizeof(float));
}

// The layout's tables on the device, with the tiles of query rows or key rows.
struct DeviceTables {
  DeviceBuffer<int32_t> cu_q, cu_k;
  DeviceBuffer<int64_t> q_pos, k_pos;
  DeviceBuffer<Tile> tiles;
  unsigned n_tiles;
  Params params;

  DeviceTables(const AttentionLayout& l, bool key_tiles) : DeviceTables(l, make_tiles(key_tiles ? l.cu_k : l.cu_q)) {}
  DeviceTables(const AttentionLayout& l, const std::vector<Tile>& host_tiles)
      : cu_q(std::vector<int32_t>(l.cu_q.begin(), l.cu_q.end())),
        cu_k(std::vector<int32_t>(l.cu_k.begin(), l.cu_k.end())),
        q_pos(positions(l.q_pos, l.n_seqs())),
        k_pos(positions(l.k_pos, l.n_seqs())),
        tiles(host_tiles),
        n_tiles(static_cast<unsigned>(host_tiles.size())) {
    params = Params{l.n_heads,   l.n_kv_heads, static_cast<float>(l.scale), l.causal,   cu_q.get(),
                    cu_k.get(),  q_pos.get(),  k_pos.get(),                 tiles.get()};
  }
  static std::vector<int64_t> positions(std::span<const int64_t> pos, int64_t n_seqs) {
    return pos.empty() ? std::vector<int64_t>(static_cast<size_t>(n_seqs), 0) : std::vector<int64_t>(pos.begin(), pos.end());
  }
  static std::vector<Tile> make_tiles(std::span<const int32_t> cu) {
    std::vector<Tile> t;
    for (size_t b = 0; b + 1 < cu.size(); ++b)
      for (int32_t s = 0; s < cu[b + 1] - cu[b]; s += kTile) t.push_back({static_cast<int32_t>(b), s});
    if (t.empty()) t.push_back({0, 0});  // all sequences empty: one tile that sees nothing
    return t;
  }
};

void check_layout(const AttentionLayout& l) {
  if (!flash_attention_supports(l.head_dim))
    throw InvalidArgument("tensor-core attention takes head_dim 64 or 128, got " + std::to_string(l.head_dim));
  if (l.n_kv_heads <= 0 || l.n_heads % l.n_kv_heads != 0)
    throw InvalidArgument("tensor-core attention: n_heads " + std::to_string(l.n_heads) +
                          " is not a multiple of n_kv_heads " + std::to_string(l.n_kv_heads));
}

template <int D>
void launch_forward(const AttentionLayout& l, const bf16* q, const bf16* k, const bf16* v, float* out, float* lse, Stream stream) {
  const DeviceTables t(l, false);
  const size_t smem = forward_smem<D>();
  CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(t.n_tiles, static_cast<unsigned>(l.n_heads));
  forward_kernel<D><<<grid, kThreads, smem, native(stream)>>>(t.params, q, k, v, out, lse);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(native(stream)));  // the tables are freed when `t` goes out of scope
}

template <int D>
void launch_backward(const AttentionLayout& l, const bf16* q, const bf16* k, const bf16* v, const float* lse,
                     const bf16* dout, const float* delta, float* dq, float* dk, float* dv, Stream stream) {
  const DeviceTables t(l, true);
  const size_t smem = backward_smem<D>();
  CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(t.n_tiles, static_cast<unsigned>(l.n_kv_heads));
  backward_kernel<D><<<grid, kThreads, smem, native(stream)>>>(t.params, q, k, v, lse, dout, delta, dq, dk, dv);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(native(stream)));
}

const bf16* as_bf16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }

}  // namespace

bool flash_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void flash_attention_forward(const AttentionLayout& layout, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             float* out, float* lse, Stream stream) {
  if (layout.tq == 0 || layout.n_seqs() <= 0) return;
  check_layout(layout);
  if (layout.head_dim == 64) launch_forward<64>(layout, as_bf16(q), as_bf16(k), as_bf16(v), out, lse, stream);
  else launch_forward<128>(layout, as_bf16(q), as_bf16(k), as_bf16(v), out, lse, stream);
}

void flash_attention_backward(const AttentionLayout& layout, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const float* out, const float* lse, const uint16_t* dout, const float* dlse, float* dq,
                              float* dk, float* dv, Stream stream) {
  if (layout.tq == 0 || layout.tk == 0 || layout.n_seqs() <= 0) return;
  check_layout(layout);
  const int64_t rows = layout.tq * layout.n_heads;
  DeviceBuffer<float> delta(static_cast<size_t>(rows));
  delta_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, native(stream)>>>(rows, layout.head_dim, out,
                                                                                 as_bf16(dout), dlse, delta.get());
  CUDA_CHECK(cudaGetLastError());
  if (layout.head_dim == 64)
    launch_backward<64>(layout, as_bf16(q), as_bf16(k), as_bf16(v), lse, as_bf16(dout), delta.get(), dq, dk, dv, stream);
  else
    launch_backward<128>(layout, as_bf16(q), as_bf16(k), as_bf16(v), lse, as_bf16(dout), delta.get(), dq, dk, dv, stream);
}

}  // namespace hdp::kernels::cuda
