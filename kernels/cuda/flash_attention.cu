/*
 * Tensor-core packed varlen attention with GQA (bf16 in, fp32 accumulate), forward and backward.
 * Layout and masking: kernels/attention_layout.h; the fp32 kernel it is checked against:
 * kernels/cuda/attention.cu.
 *
 * FlashAttention-2's structure on `mma.sync.m16n8k16` (bf16 operands, fp32 accumulators), with the
 * operands read from shared memory by `ldmatrix` and the tiles brought in by `cp.async` one tile
 * ahead of the one in use. The fragment layouts are PTX's (ISA, "Matrix fragments for
 * mma.m16n8k16"): a thread holds accumulator elements (row lane/4 [+8], columns 2(lane%4) [+1]) of
 * each 16x8 tile, which is also where the A operand of the next product wants them, so the
 * probabilities never leave registers.
 *
 * Forward: one block per (128-query tile of one sequence, query head), eight warps, each owning 16
 * of the tile's rows: Q in registers for the whole block, 64-key tiles of K and V streamed through
 * two shared-memory buffers; per key tile S = Q K^T, the online softmax in base 2 (each row's max
 * and sum shared by the four lanes that hold it), O = alpha O + P V with P packed to bf16 in
 * registers. Masks are applied only on the key tiles that need them (the diagonal and the
 * sequence's end).
 *
 * Backward: one block per (128-key tile, query head), eight warps, each owning 16 key rows: dK and
 * dV stay in registers while the block walks every 64-query tile that sees its keys, two buffers
 * ahead. Per query tile it computes S^T = K Q^T and dP^T = V dO^T by key rows, so P^T and dS^T are
 * already the A operands of dV += P^T dO and dK += dS^T Q; dS^T goes through shared memory once,
 * for dQ = dS K, which is added to global memory with vector atomics. With GQA the group's query
 * heads add their dK and dV with atomics at the end (one block per kv head looping over its group
 * left a model with 4 kv heads two waves of 256 long blocks on 132 SMs).
 *
 * Tiles are launched longest first (host-sorted by the keys or queries they see), so the causal
 * diagonal's short tiles fill the end of the grid instead of the long ones starting last.
 */
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"

namespace hdp::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile shapes. Forward: 128 query rows per block (8 warps x 16), 64-key tiles. Backward: 128 key
// rows per block (8 warps x 16), 64-query tiles. Shared-memory rows of D bf16 are padded by 16 bytes
// so the eight rows an ldmatrix reads start in different banks.
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kFwdRows = 16 * kWarps;  // query rows of a forward block
constexpr int kFwdKeys = 64;           // keys per forward step
constexpr int kBwdKeys = 16 * kWarps;  // key rows of a backward block
constexpr int kBwdRows = 64;           // query rows per backward step
constexpr int kDeltaWarps = 4;

template <int D>
constexpr int kLd = D + 8;              // bf16 [rows][D] tiles
constexpr int kLdS = kBwdRows + 8;      // bf16 dS^T [keys][queries]

// A tile: up to `rows` rows of one sequence, starting `start` rows into it.
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

// Keys of sequence b visible to its local query row i: a prefix of the sequence's nk keys.
__host__ __device__ int64_t n_visible(bool causal, int64_t q_pos, int64_t k_pos, int64_t i, int64_t nk) {
  if (!causal) return nk;
  const int64_t v = q_pos + i - k_pos + 1;
  return v < 0 ? 0 : (v > nk ? nk : v);
}

__device__ int64_t n_visible(const Params& p, int b, int64_t i, int64_t nk) {
  return n_visible(p.causal, p.q_pos[b], p.k_pos[b], i, nk);
}

// ---- PTX wrappers -------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// Four 8x8 bf16 matrices; lane l gives the address of row l%8 of matrix l/8 and receives in r[i]
// the elements (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i (of its transpose with .trans).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(ptr)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(ptr)));
}

// c (16x8, fp32) += a (16x16, bf16, row-major) b (16x8, bf16, column-major).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half: the lower column
  return *reinterpret_cast<const uint32_t*>(&v);
}

// dst[0..1] += (a, b), one vector atomic where the architecture has it.
__device__ __forceinline__ void atomic_add2(float* dst, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// 2^x by the special-function unit (relative error ~2^-22; 2^-inf = 0): P is rounded to bf16 anyway.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Rows row0 + r (r < rows; zeros after, up to ROWS) of a [*, heads, D] bf16 tensor, head `head`,
// into dst[r][0..D) (row stride kLd<D>), asynchronously.
template <int D, int ROWS>
__device__ void load_tile_async(bf16* dst, const bf16* src, int64_t row0, int rows, int heads, int head) {
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < ROWS * kVec; i += kThreads) {
    const int r = i / kVec, c = (i % kVec) * 8;
    const bool valid = r < rows;
    cp_async16(dst + r * kLd<D> + c, valid ? src + ((row0 + r) * heads + head) * D + c : src, valid);
  }
}

// The A operand (16 rows x 16 columns at (row0, col0)) of a row-major bf16 tile.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4(a, tile + (row0 + lane % 16) * LD + col0 + (lane / 16) * 8);
}

// B operands of two 16x8 products whose B^T is stored row-major: rows n0..n0+15 (two n tiles),
// columns k0..k0+15. b[0], b[1] are the first n tile's, b[2], b[3] the second's.
template <int LD>
__device__ __forceinline__ void load_bt(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * LD + k0 + ((lane / 8) % 2) * 8);
}

// B operands of two 16x8 products whose B is stored row-major: rows k0..k0+15, columns n0..n0+15.
template <int LD>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4_t(b, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * LD + n0 + (lane / 16) * 8);
}

// The A operand (rows m0..m0+15, columns k0..k0+15) of a matrix stored transposed, row-major [k][m].
template <int LD>
__device__ __forceinline__ void load_at(uint32_t (&a)[4], const bf16* tile, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4_t(a, tile + (k0 + (lane / 16) * 8 + lane % 8) * LD + m0 + ((lane / 8) % 2) * 8);
}

// The A operand of the product with columns 16j..16j+15 of a 16-row accumulator held as 16x8 tiles.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// acc (16 rows x N, as N/8 accumulator tiles) = A B^T: A is rows a_row0.. of a row-major tile (K
// columns), B the first N rows of another (K columns). Scores by rows: S^T = K Q^T, dP^T = V dO^T.
template <int LD, int K, int N>
__device__ __forceinline__ void rows_by_rows(float (&acc)[N / 8][4], const bf16* a_tile, int a_row0, const bf16* b_tile) {
#pragma unroll
  for (int n = 0; n < N / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    load_a<LD>(a, a_tile, a_row0, kk * 16);
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      uint32_t b[4];
      load_bt<LD>(b, b_tile, n * 16, kk * 16);
      mma(acc[2 * n], a, b[0], b[1]);
      mma(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// acc (16 rows x N) += P B: P (16 rows x K) is held as K/8 accumulator tiles (so it never leaves
// registers), B is the first K rows of a row-major tile (N columns). O += P V, dV += P^T dO,
// dK += dS^T Q.
template <int LD, int K, int N>
__device__ __forceinline__ void acc_by_rows(float (&acc)[N / 8][4], const float (&p)[K / 8][4], const bf16* b_tile) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t pa[4];
    acc_to_a(pa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      uint32_t b[4];
      load_b<LD>(b, b_tile, kk * 16, n * 16);
      mma(acc[2 * n], pa, b[0], b[1]);
      mma(acc[2 * n + 1], pa, b[2], b[3]);
    }
  }
}

// ---- forward --------------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(Params p, const bf16* q, const bf16* k, const bf16* v, float* out, float* lse) {
  constexpr int LD = kLd<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kbuf = qs + kFwdRows * LD;          // two [kFwdKeys][LD] buffers
  bf16* vbuf = kbuf + 2 * kFwdKeys * LD;    // two more

  const Tile tile = p.tiles[blockIdx.x];
  const int h = blockIdx.y, g = h / (p.n_heads / p.n_kv_heads), b = tile.seq;
  const int64_t q0 = p.cu_q[b] + tile.start, nq = p.cu_q[b + 1] - p.cu_q[b];
  const int64_t k0 = p.cu_k[b], nk = p.cu_k[b + 1] - p.cu_k[b];
  const int rows = static_cast<int>(nq - tile.start < kFwdRows ? nq - tile.start : kFwdRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile_vis = n_visible(p, b, tile.start + rows - 1, nk);  // the last row sees the most
  const int64_t first_vis = n_visible(p, b, tile.start, nk);            // every row sees at least this
  const int n_steps = static_cast<int>((tile_vis + kFwdKeys - 1) / kFwdKeys);
  // This thread's two rows (lane/4 and lane/4 + 8 of the warp's 16) and how many keys each sees.
  const int r0 = warp * 16 + lane / 4, r1 = r0 + 8;
  const int64_t vis0 = n_visible(p, b, tile.start + r0, nk), vis1 = n_visible(p, b, tile.start + r1, nk);

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of the rows' scores, times scale * log2(e)
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the rows' sums (the quad's add up)
  const float scale2 = p.scale * kLog2e;

  if (n_steps > 0) {
    load_tile_async<D, kFwdRows>(qs, q, q0, rows, p.n_heads, h);
    load_tile_async<D, kFwdKeys>(kbuf, k, k0, static_cast<int>(nk < kFwdKeys ? nk : kFwdKeys), p.n_kv_heads, g);
    load_tile_async<D, kFwdKeys>(vbuf, v, k0, static_cast<int>(nk < kFwdKeys ? nk : kFwdKeys), p.n_kv_heads, g);
    cp_async_commit();
  }
  uint32_t qf[D / 16][4];  // the warp's 16 rows of Q as A operands, loaded once
  for (int step = 0; step < n_steps; ++step) {
    const int64_t kt = int64_t(step) * kFwdKeys;
    if (step + 1 < n_steps) {  // the next tile into the other buffer (last read in step - 1)
      const int64_t nt = kt + kFwdKeys;
      const int nrows = static_cast<int>(nk - nt < kFwdKeys ? nk - nt : kFwdKeys);
      const int buf = (step + 1) % 2;
      load_tile_async<D, kFwdKeys>(kbuf + buf * kFwdKeys * LD, k, k0 + nt, nrows, p.n_kv_heads, g);
      load_tile_async<D, kFwdKeys>(vbuf + buf * kFwdKeys * LD, v, k0 + nt, nrows, p.n_kv_heads, g);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (step == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_a<LD>(qf[kk], qs, warp * 16, kk * 16);
    }
    const bf16* ks = kbuf + (step % 2) * kFwdKeys * LD;
    const bf16* vs = vbuf + (step % 2) * kFwdKeys * LD;

    float s[kFwdKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kFwdKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int n = 0; n < kFwdKeys / 16; ++n) {
        uint32_t bk[4];
        load_bt<LD>(bk, ks, n * 16, kk * 16);
        mma(s[2 * n], qf[kk], bk[0], bk[1]);
        mma(s[2 * n + 1], qf[kk], bk[2], bk[3]);
      }
    }
    // Scores in base-2 units; masked ones -inf (only on tiles some row does not see whole).
    const bool masked = kt + kFwdKeys > first_vis;
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * scale2;
        if (masked) {
          const int64_t col = kt + n * 8 + 2 * (lane % 4) + (e & 1);
          if (col >= (e < 2 ? vis0 : vis1)) x = -INFINITY;
        }
        s[n][e] = x;
      }
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // A row that has seen no key yet keeps max -inf: its p are 0 and nothing is rescaled.
    const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float alpha0 = fast_exp2(m0 - base0), alpha1 = fast_exp2(m1 - base1);  // exp2(-inf) = 0 on the first tile
    m0 = mx0;
    m1 = mx1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < kFwdKeys / 8; ++n) {
      s[n][0] = fast_exp2(s[n][0] - base0);
      s[n][1] = fast_exp2(s[n][1] - base0);
      s[n][2] = fast_exp2(s[n][2] - base1);
      s[n][3] = fast_exp2(s[n][3] - base1);
      sum0 += s[n][0] + s[n][1];
      sum1 += s[n][2] + s[n][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= alpha0;
      o[n][1] *= alpha0;
      o[n][2] *= alpha1;
      o[n][3] *= alpha1;
    }
    acc_by_rows<LD, kFwdKeys, D>(o, s, vs);  // O += P V, P from registers
    __syncthreads();  // every warp is done with this buffer before step + 2's tile goes into it
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const int col = 2 * (lane % 4);
  if (r0 < rows) {
    const float inv = l0 > 0.0f ? 1.0f / l0 : 0.0f;
    float* dst = out + ((q0 + r0) * p.n_heads + h) * D + col;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][0] * inv, o[n][1] * inv);
    if (lane % 4 == 0) lse[(q0 + r0) * p.n_heads + h] = l0 > 0.0f ? (m0 + log2f(l0)) * kLn2 : -INFINITY;
  }
  if (r1 < rows) {
    const float inv = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    float* dst = out + ((q0 + r1) * p.n_heads + h) * D + col;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2] * inv, o[n][3] * inv);
    if (lane % 4 == 0) lse[(q0 + r1) * p.n_heads + h] = l1 > 0.0f ? (m1 + log2f(l1)) * kLn2 : -INFINITY;
  }
}

// ---- backward -------------------------------------------------------------------------------------

// delta[w] = dout . out - dlse for each (row, head) w.
__global__ void delta_kernel(int64_t n, int d, const float* out, const bf16* dout, const float* dlse, float* delta) {
  const int64_t w = blockIdx.x * int64_t(kDeltaWarps) + threadIdx.x / 32;
  if (w >= n) return;
  float s = 0.0f;
  for (int c = threadIdx.x % 32; c < d; c += 32) s += out[w * d + c] * __bfloat162float(dout[w * d + c]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) delta[w] = s - (dlse ? dlse[w] : 0.0f);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    backward_kernel(Params p, const bf16* q, const bf16* k, const bf16* v, const float* lse, const bf16* dout,
                    const float* delta, float* dq, float* dk, float* dv) {
  constexpr int LD = kLd<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kBwdKeys * LD;
  bf16* qbuf = vs + kBwdKeys * LD;           // two [kBwdRows][LD] buffers
  bf16* dobuf = qbuf + 2 * kBwdRows * LD;    // two more
  bf16* dst_s = dobuf + 2 * kBwdRows * LD;   // dS^T [kBwdKeys][kLdS]
  float* lse_s = reinterpret_cast<float*>(dst_s + kBwdKeys * kLdS);  // two [kBwdRows]: lse * log2(e)
  float* delta_s = lse_s + 2 * kBwdRows;                              // two [kBwdRows]

  const Tile tile = p.tiles[blockIdx.x];
  const int hq = blockIdx.y, group = p.n_heads / p.n_kv_heads, g = hq / group, b = tile.seq;
  const int64_t qbase = p.cu_q[b], nq = p.cu_q[b + 1] - p.cu_q[b];
  const int64_t k0 = p.cu_k[b] + tile.start, nk = p.cu_k[b + 1] - p.cu_k[b];
  const int krows = static_cast<int>(nk - tile.start < kBwdKeys ? nk - tile.start : kBwdKeys);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Key j of the sequence is visible to its query i iff j - i <= diag (causal), so query rows before
  // `first` see none of these keys and the rows that see one form a suffix.
  const int64_t diag = p.q_pos[b] - p.k_pos[b];
  int64_t first = 0;
  if (p.causal) first = tile.start - diag < 0 ? 0 : tile.start - diag;
  if (first >= nq) return;  // no query sees these keys: dK and dV get nothing
  const int64_t qt_first = first / kBwdRows * kBwdRows;
  const int n_qt = static_cast<int>((nq - qt_first + kBwdRows - 1) / kBwdRows);
  const int n_iter = n_qt;
  const float scale2 = p.scale * kLog2e;

  // Query tile `it` (rows qt_first + it * kBwdRows) into buffer it%2.
  auto prefetch = [&](int it) {
    const int buf = it % 2;
    const int64_t qt = qt_first + int64_t(it) * kBwdRows;
    const int qrows = static_cast<int>(nq - qt < kBwdRows ? nq - qt : kBwdRows);
    load_tile_async<D, kBwdRows>(qbuf + buf * kBwdRows * LD, q, qbase + qt, qrows, p.n_heads, hq);
    load_tile_async<D, kBwdRows>(dobuf + buf * kBwdRows * LD, dout, qbase + qt, qrows, p.n_heads, hq);
    for (int i = threadIdx.x; i < kBwdRows; i += kThreads) {
      // Rows past the sequence (and rows that see no key at all, lse -inf) get p = 0.
      const float l = i < qrows ? lse[(qbase + qt + i) * p.n_heads + hq] : -INFINITY;
      lse_s[buf * kBwdRows + i] = l == -INFINITY ? INFINITY : l * kLog2e;
      delta_s[buf * kBwdRows + i] = i < qrows ? delta[(qbase + qt + i) * p.n_heads + hq] : 0.0f;
    }
  };

  load_tile_async<D, kBwdKeys>(ks, k, k0, krows, p.n_kv_heads, g);
  load_tile_async<D, kBwdKeys>(vs, v, k0, krows, p.n_kv_heads, g);
  prefetch(0);
  cp_async_commit();

  float acc_dk[D / 8][4], acc_dv[D / 8][4];  // the warp's 16 key rows
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[n][e] = acc_dv[n][e] = 0.0f;
  const int kr0 = warp * 16 + lane / 4;  // this thread's key rows kr0 and kr0 + 8 of the block

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it % 2;
    const int64_t qt = qt_first + int64_t(it) * kBwdRows;
    const int qrows = static_cast<int>(nq - qt < kBwdRows ? nq - qt : kBwdRows);
    if (it + 1 < n_iter) {
      prefetch(it + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* qs = qbuf + buf * kBwdRows * LD;
    const bf16* dos = dobuf + buf * kBwdRows * LD;
    const float* lse2 = lse_s + buf * kBwdRows;
    const float* dl = delta_s + buf * kBwdRows;
    // Some (key, query) pair of this tile is masked: a key past the sequence, or one after a query.
    const bool masked = krows < kBwdKeys || (p.causal && tile.start + krows - 1 - qt > diag);

    // S^T = K Q^T for the warp's 16 keys and the tile's queries, then P^T in place.
    float st[kBwdRows / 8][4];
    rows_by_rows<LD, D, kBwdRows>(st, ks, warp * 16, qs);
#pragma unroll
    for (int n = 0; n < kBwdRows / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = n * 8 + 2 * (lane % 4) + (e & 1), kr = kr0 + (e < 2 ? 0 : 8);
        float pv = fast_exp2(st[n][e] * scale2 - lse2[qc]);
        if (masked && (kr >= krows || (p.causal && tile.start + kr - (qt + qc) > diag))) pv = 0.0f;
        st[n][e] = pv;
      }
    }
    acc_by_rows<LD, kBwdRows, D>(acc_dv, st, dos);  // dV += P^T dO
    // dP^T = V dO^T, then dS^T = P^T (dP^T - delta) scale, in place.
    float dpt[kBwdRows / 8][4];
    rows_by_rows<LD, D, kBwdRows>(dpt, vs, warp * 16, dos);
#pragma unroll
    for (int n = 0; n < kBwdRows / 8; ++n) {
      const int qc = n * 8 + 2 * (lane % 4);
      const float d0 = dl[qc], d1 = dl[qc + 1];
      dpt[n][0] = st[n][0] * (dpt[n][0] - d0) * p.scale;
      dpt[n][1] = st[n][1] * (dpt[n][1] - d1) * p.scale;
      dpt[n][2] = st[n][2] * (dpt[n][2] - d0) * p.scale;
      dpt[n][3] = st[n][3] * (dpt[n][3] - d1) * p.scale;
      // dS^T to shared memory for dQ: rows kr0, kr0 + 8, columns qc, qc + 1.
      *reinterpret_cast<uint32_t*>(dst_s + kr0 * kLdS + qc) = pack_bf16(dpt[n][0], dpt[n][1]);
      *reinterpret_cast<uint32_t*>(dst_s + (kr0 + 8) * kLdS + qc) = pack_bf16(dpt[n][2], dpt[n][3]);
    }
    acc_by_rows<LD, kBwdRows, D>(acc_dk, dpt, qs);  // dK += dS^T Q
    __syncthreads();  // every warp's dS^T is in shared memory
    // dQ = dS K: warp w takes query rows (w % 4) * 16.. and head-dim columns (w / 4) * D/2...
    {
      constexpr int kCols = D / 2;
      const int m0 = (warp % 4) * 16, c0 = (warp / 4) * kCols;
      float acc[kCols / 8][4];
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kBwdKeys / 16; ++kk) {
        uint32_t a[4];
        load_at<kLdS>(a, dst_s, m0, kk * 16);
#pragma unroll
        for (int n = 0; n < kCols / 16; ++n) {
          uint32_t bk[4];
          load_b<LD>(bk, ks, kk * 16, c0 + n * 16);
          mma(acc[2 * n], a, bk[0], bk[1]);
          mma(acc[2 * n + 1], a, bk[2], bk[3]);
        }
      }
      const int qr = m0 + lane / 4, col = c0 + 2 * (lane % 4);
      float* row0 = dq + ((qbase + qt + qr) * p.n_heads + hq) * D + col;
      float* row1 = dq + ((qbase + qt + qr + 8) * p.n_heads + hq) * D + col;
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) {
        if (qr < qrows) atomic_add2(row0 + n * 8, acc[n][0], acc[n][1]);
        if (qr + 8 < qrows) atomic_add2(row1 + n * 8, acc[n][2], acc[n][3]);
      }
    }
    __syncthreads();  // buffers `buf` and dS^T are free for the tile after next
  }
  // Without GQA this block alone owns these key rows of dK and dV: plain adds, the same sums on every
  // run. With GQA the group's query heads add theirs with vector atomics.
  const int col = 2 * (lane % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int kr = kr0 + half * 8;
    if (kr >= krows) continue;
    float* dkr = dk + ((k0 + kr) * p.n_kv_heads + g) * D + col;
    float* dvr = dv + ((k0 + kr) * p.n_kv_heads + g) * D + col;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      if (group > 1) {
        atomic_add2(dkr + n * 8, acc_dk[n][2 * half], acc_dk[n][2 * half + 1]);
        atomic_add2(dvr + n * 8, acc_dv[n][2 * half], acc_dv[n][2 * half + 1]);
        continue;
      }
      float2 a = *reinterpret_cast<float2*>(dkr + n * 8), c = *reinterpret_cast<float2*>(dvr + n * 8);
      a.x += acc_dk[n][2 * half];
      a.y += acc_dk[n][2 * half + 1];
      c.x += acc_dv[n][2 * half];
      c.y += acc_dv[n][2 * half + 1];
      *reinterpret_cast<float2*>(dkr + n * 8) = a;
      *reinterpret_cast<float2*>(dvr + n * 8) = c;
    }
  }
}

template <int D>
constexpr size_t forward_smem() {
  return size_t(kFwdRows + 4 * kFwdKeys) * kLd<D> * sizeof(bf16);
}

template <int D>
constexpr size_t backward_smem() {
  return size_t(2 * kBwdKeys + 4 * kBwdRows) * kLd<D> * sizeof(bf16) + size_t(kBwdKeys) * kLdS * sizeof(bf16) +
         4 * kBwdRows * sizeof(float);
}

// The layout's tables on the device, with the tiles of query rows (forward) or key rows (backward),
// longest first: a tile's work is the keys its last query row sees (forward) or the query rows that see
// its first key (backward).
struct DeviceTables {
  DeviceBuffer<unsigned char> blob;  // q_pos, k_pos, cu_q, cu_k, tiles: one allocation, one copy
  unsigned n_tiles;
  Params params;

  DeviceTables(const AttentionLayout& l, bool key_tiles, Stream stream)
      : DeviceTables(l, make_tiles(l, key_tiles), stream) {}
  DeviceTables(const AttentionLayout& l, const std::vector<Tile>& tiles, Stream stream)
      : blob(bytes(l, tiles.size())), n_tiles(static_cast<unsigned>(tiles.size())) {
    const size_t n = static_cast<size_t>(l.n_seqs());
    std::vector<unsigned char> host(bytes(l, tiles.size()));
    size_t at = 0;
    const auto put = [&](const void* src, size_t size) {
      if (size > 0) std::memcpy(host.data() + at, src, size);
      const size_t offset = at;
      at += (size + 7) / 8 * 8;
      return offset;
    };
    const std::vector<int64_t> zeros(n, 0);
    const size_t q_pos = put(l.q_pos.empty() ? zeros.data() : l.q_pos.data(), n * sizeof(int64_t));
    const size_t k_pos = put(l.k_pos.empty() ? zeros.data() : l.k_pos.data(), n * sizeof(int64_t));
    const size_t cu_q = put(l.cu_q.data(), (n + 1) * sizeof(int32_t));
    const size_t cu_k = put(l.cu_k.data(), (n + 1) * sizeof(int32_t));
    const size_t tile_at = put(tiles.data(), tiles.size() * sizeof(Tile));
    copy_host_to_device(blob.get(), host.data(), host.size(), stream);
    unsigned char* d = blob.get();
    params = Params{l.n_heads,
                    l.n_kv_heads,
                    static_cast<float>(l.scale),
                    l.causal,
                    reinterpret_cast<const int32_t*>(d + cu_q),
                    reinterpret_cast<const int32_t*>(d + cu_k),
                    reinterpret_cast<const int64_t*>(d + q_pos),
                    reinterpret_cast<const int64_t*>(d + k_pos),
                    reinterpret_cast<const Tile*>(d + tile_at)};
  }
  static size_t bytes(const AttentionLayout& l, size_t n_tiles) {
    const size_t n = static_cast<size_t>(l.n_seqs());
    const auto rounded = [](size_t b) { return (b + 7) / 8 * 8; };
    return 2 * rounded(n * sizeof(int64_t)) + 2 * rounded((n + 1) * sizeof(int32_t)) + rounded(n_tiles * sizeof(Tile));
  }
  static std::vector<Tile> make_tiles(const AttentionLayout& l, bool key_tiles) {
    const std::span<const int32_t> cu = key_tiles ? l.cu_k : l.cu_q;
    const int rows = key_tiles ? kBwdKeys : kFwdRows;
    std::vector<Tile> t;
    std::vector<int64_t> work;
    for (size_t b = 0; b + 1 < cu.size(); ++b) {
      const int64_t nq = l.cu_q[b + 1] - l.cu_q[b], nk = l.cu_k[b + 1] - l.cu_k[b];
      const int64_t qp = l.q_pos.empty() ? 0 : l.q_pos[b], kp = l.k_pos.empty() ? 0 : l.k_pos[b];
      for (int32_t s = 0; s < cu[b + 1] - cu[b]; s += rows) {
        t.push_back({static_cast<int32_t>(b), s});
        if (key_tiles) {  // query rows from the first that sees key s
          const int64_t first = l.causal ? std::clamp<int64_t>(s - (qp - kp), 0, nq) : 0;
          work.push_back(nq - first);
        } else {  // keys the tile's last row sees
          work.push_back(n_visible(l.causal, qp, kp, std::min<int64_t>(s + rows, nq) - 1, nk));
        }
      }
    }
    if (t.empty()) return {{0, 0}};  // all sequences empty: one tile that sees nothing
    std::vector<size_t> order(t.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] > work[b]; });
    std::vector<Tile> sorted;
    sorted.reserve(t.size());
    for (size_t i : order) sorted.push_back(t[i]);
    return sorted;
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
  const DeviceTables t(l, false, stream);
  const size_t smem = forward_smem<D>();
  CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(t.n_tiles, static_cast<unsigned>(l.n_heads));
  forward_kernel<D><<<grid, kThreads, smem, native(stream)>>>(t.params, q, k, v, out, lse);
  CUDA_CHECK(cudaGetLastError());
  // No wait here: `t` is freed on the legacy stream, which orders itself after the kernel (memory.h).
}

template <int D>
void launch_backward(const AttentionLayout& l, const bf16* q, const bf16* k, const bf16* v, const float* lse,
                     const bf16* dout, const float* delta, float* dq, float* dk, float* dv, Stream stream) {
  const DeviceTables t(l, true, stream);
  const size_t smem = backward_smem<D>();
  CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(t.n_tiles, static_cast<unsigned>(l.n_heads));
  backward_kernel<D><<<grid, kThreads, smem, native(stream)>>>(t.params, q, k, v, lse, dout, delta, dq, dk, dv);
  CUDA_CHECK(cudaGetLastError());
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
  delta_kernel<<<static_cast<unsigned>((rows + kDeltaWarps - 1) / kDeltaWarps), 32 * kDeltaWarps, 0, native(stream)>>>(rows, layout.head_dim, out,
                                                                                 as_bf16(dout), dlse, delta.get());
  CUDA_CHECK(cudaGetLastError());
  if (layout.head_dim == 64)
    launch_backward<64>(layout, as_bf16(q), as_bf16(k), as_bf16(v), lse, as_bf16(dout), delta.get(), dq, dk, dv, stream);
  else
    launch_backward<128>(layout, as_bf16(q), as_bf16(k), as_bf16(v), lse, as_bf16(dout), delta.get(), dq, dk, dv, stream);
}

}  // namespace hdp::kernels::cuda
