#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/parallel.h"

namespace hdp::kernels::cpu {
namespace {

// Tile sizes: 256 query rows x 256 keys. Every tile product is an OpenBLAS call that packs both
// operands anew, so packing costs about (1/kBq + 1/kBk) per multiply-add: at 64 x 128 it took a
// fifth of the forward's time (perf). At 256 x 256 a score tile is 256 KiB and stays in L2 with the
// output accumulator (128 KiB at head_dim 128); bench/ops measured 256 x 256 best among 64 x 128 ..
// 512 x 512 (forward 0.41 -> 0.56 of sgemm at 4K tokens). The tile GEMMs run on the calling OpenMP
// worker (blas.h).
constexpr int64_t kBq = kAttentionQueryTile;
constexpr int64_t kBk = kAttentionKeyTile;

// One (sequence, head, tile) unit of work; threads take them dynamically (causal tiles differ in cost).
struct Task {
  int64_t seq;
  int head;
  int64_t start;
};

// Shared geometry of forward and backward.
template <typename T>
struct Geometry {
  const AttentionLayout& l;
  int64_t ldq() const { return int64_t(l.n_heads) * l.head_dim; }
  int64_t ldk() const { return int64_t(l.n_kv_heads) * l.head_dim; }
  int64_t q_len(int64_t b) const { return l.cu_q[b + 1] - l.cu_q[b]; }
  int64_t k_len(int64_t b) const { return l.cu_k[b + 1] - l.cu_k[b]; }
  // Number of leading keys of sequence b that local query row i sees.
  int64_t visible(int64_t b, int64_t i) const {
    if (!l.causal) return k_len(b);
    return std::clamp<int64_t>(l.q_pos[b] + i - l.k_pos[b] + 1, 0, k_len(b));
  }
  // S = scale * Q[i0:i0+m] K[j0:j0+n]^T for query head h, into s with leading dimension kBk.
  void scores(const T* q, const T* k, int64_t b, int h, int64_t i0, int64_t m, int64_t j0, int64_t n,
              T* s) const {
    const int g = h / l.group();
    gemm<T>(false, true, m, n, l.head_dim, T(l.scale), q + ((l.cu_q[b] + i0) * l.n_heads + h) * l.head_dim,
            ldq(), k + ((l.cu_k[b] + j0) * l.n_kv_heads + g) * l.head_dim, ldk(), T(0), s, kBk);
  }
  // Calls fn(r0, rows, cols) for the row blocks of a tile of m query rows from i0 against n keys
  // from j0: cols is how many of the keys the block's last row sees. A tile every row of which
  // sees all n keys is one block; a tile the causal mask cuts (the diagonal) is split into blocks
  // of kRowBlock rows, so its products skip most of the masked part (about 40% of the diagonal
  // tile's work at 256 x 256).
  template <typename Fn>
  void for_visible_blocks(int64_t b, int64_t i0, int64_t m, int64_t j0, int64_t n, Fn&& fn) const {
    constexpr int64_t kRowBlock = 64;
    if (visible(b, i0) - j0 >= n) return fn(int64_t(0), m, n);
    for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, m - r0);
      const int64_t cols = std::clamp<int64_t>(visible(b, i0 + r0 + rows - 1) - j0, 0, n);
      if (cols > 0) fn(r0, rows, cols);
    }
  }
  // Calls fn(m, j0, n) for each key tile [j0, j0 + n) that the query tile at i0 of sequence b
  // (m rows) sees at least partly.
  template <typename Fn>
  void for_key_tiles(int64_t b, int64_t i0, Fn&& fn) const {
    const int64_t m = std::min(kBq, q_len(b) - i0);
    const int64_t k_end = visible(b, i0 + m - 1);
    for (int64_t j0 = 0; j0 < k_end; j0 += kBk) fn(m, j0, std::min(kBk, k_end - j0));
  }
  std::vector<Task> tasks(int heads, bool over_queries) const {
    std::vector<Task> out;
    const int64_t tile = over_queries ? kBq : kBk;
    for (int64_t b = 0; b < l.n_seqs(); ++b) {
      const int64_t len = over_queries ? q_len(b) : k_len(b);
      for (int h = 0; h < heads; ++h)
        for (int64_t s = 0; s < len; s += tile) out.push_back({b, h, s});
    }
    return out;
  }
};

// The size of a task list for the parallel-or-not decision, each task counted as one full tile
// pair (an upper bound for tile tasks; a one-pass backward task, a whole kv head, does more).
int64_t tile_work(size_t tasks, const AttentionLayout& l) {
  return static_cast<int64_t>(tasks) * kBq * kBk * l.head_dim;
}

// Runs fn(task, p, ds) over `tasks` on the OpenMP threads (dynamic schedule: tiles differ in
// cost), each thread with its own P and dS tile buffers.
template <typename T, typename Fn>
void run_backward_tasks(const std::vector<Task>& tasks, const AttentionLayout& l, Fn&& fn) {
#pragma omp parallel if (worth_parallel(tile_work(tasks.size(), l)))
  {
    std::vector<T> p(kBq * kBk), ds(kBq * kBk);
#pragma omp for schedule(dynamic)
    for (size_t i = 0; i < tasks.size(); ++i) fn(tasks[i], p.data(), ds.data());
  }
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <typename T>
void forward_tile(const Geometry<T>& geo, const Task& t, const T* q, const T* k, const T* v, T* out, T* lse,
                  std::vector<T>& s, std::vector<T>& acc) {
  const AttentionLayout& l = geo.l;
  const int64_t d = l.head_dim, b = t.seq, i0 = t.start;
  const int64_t m = std::min(kBq, geo.q_len(b) - i0);
  const int g = t.head / l.group();
  T row_max[kBq], row_sum[kBq];
  std::fill_n(row_max, m, T(kNegInf));
  std::fill_n(row_sum, m, T(0));
  std::fill_n(acc.data(), m * d, T(0));
  const int64_t k_end = geo.visible(b, i0 + m - 1);
  for (int64_t j0 = 0; j0 < k_end; j0 += kBk) {
    const int64_t n = std::min(kBk, k_end - j0);
    // Score entries a row does not see are left unwritten: the row loop reads only its first
    // `lim` entries and zeroes the rest.
    geo.for_visible_blocks(b, i0, m, j0, n, [&](int64_t r0, int64_t rows, int64_t cols) {
      geo.scores(q, k, b, t.head, i0 + r0, rows, j0, cols, s.data() + r0 * kBk);
    });
    for (int64_t r = 0; r < m; ++r) {
      T* sr = s.data() + r * kBk;
      const int64_t lim = std::clamp<int64_t>(geo.visible(b, i0 + r) - j0, 0, n);
      T mx = row_max[r];
#pragma omp simd reduction(max : mx)
      for (int64_t c = 0; c < lim; ++c) mx = sr[c] > mx ? sr[c] : mx;
      if (mx == T(kNegInf)) {  // nothing visible yet: the row contributes nothing
        std::fill_n(sr, n, T(0));
        continue;
      }
      const T alpha = std::exp(row_max[r] - mx);  // rescales what earlier tiles accumulated
      const T sum = exp_shift_sum(sr, lim, mx);
      std::fill(sr + lim, sr + n, T(0));
      row_sum[r] = row_sum[r] * alpha + sum;
      row_max[r] = mx;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) acc[r * d + c] *= alpha;
    }
    geo.for_visible_blocks(b, i0, m, j0, n, [&](int64_t r0, int64_t rows, int64_t cols) {
      gemm<T>(false, false, rows, d, cols, T(1), s.data() + r0 * kBk, kBk,
              v + ((l.cu_k[b] + j0) * l.n_kv_heads + g) * d, geo.ldk(), T(1), acc.data() + r0 * d, d);
    });
  }
  for (int64_t r = 0; r < m; ++r) {
    const int64_t row = (l.cu_q[b] + i0 + r) * l.n_heads + t.head;
    T* o = out + row * d;
    if (row_sum[r] == T(0)) {
      std::fill_n(o, d, T(0));
      lse[row] = T(kNegInf);
      continue;
    }
    for (int64_t c = 0; c < d; ++c) o[c] = acc[r * d + c] / row_sum[r];
    lse[row] = row_max[r] + std::log(row_sum[r]);
  }
}

// Backward state: the recomputed probabilities P and score gradients dS of one (q tile, k tile) pair.
template <typename T>
struct Backward {
  const Geometry<T>& geo;
  const T *q, *k, *v, *lse, *dout, *delta;  // delta[row] = dout . out - dlse

  // Fills p (probabilities) and ds = P * (dout V^T - delta) for query head h.
  void tile(int64_t b, int h, int64_t i0, int64_t m, int64_t j0, int64_t n, T* p, T* ds) const {
    const AttentionLayout& l = geo.l;
    const int64_t d = l.head_dim;
    // As in the forward, entries a row does not see are not computed; they are zeroed below.
    geo.for_visible_blocks(b, i0, m, j0, n, [&](int64_t r0, int64_t rows, int64_t cols) {
      geo.scores(q, k, b, h, i0 + r0, rows, j0, cols, p + r0 * kBk);
      gemm<T>(false, true, rows, cols, d, T(1), dout + ((l.cu_q[b] + i0 + r0) * l.n_heads + h) * d, geo.ldq(),
              v + ((l.cu_k[b] + j0) * l.n_kv_heads + h / l.group()) * d, geo.ldk(), T(0), ds + r0 * kBk, kBk);
    });
    for (int64_t r = 0; r < m; ++r) {
      const int64_t row = (l.cu_q[b] + i0 + r) * l.n_heads + h;
      const int64_t lim = std::clamp<int64_t>(geo.visible(b, i0 + r) - j0, 0, n);
      T* pr = p + r * kBk;
      T* dsr = ds + r * kBk;
      exp_shift_sum(pr, lim, lse[row]);
      for (int64_t c = 0; c < lim; ++c) dsr[c] = pr[c] * (dsr[c] - delta[row]);
      std::fill(pr + lim, pr + n, T(0));
      std::fill(dsr + lim, dsr + n, T(0));
    }
  }
};

}  // namespace

template <typename T>
void attention_forward(const AttentionLayout& layout, const T* q, const T* k, const T* v, T* out, T* lse) {
  const Geometry<T> geo{layout};
  const std::vector<Task> tasks = geo.tasks(layout.n_heads, true);
#pragma omp parallel if (worth_parallel(tile_work(tasks.size(), layout)))
  {
    std::vector<T> s(kBq * kBk), acc(kBq * layout.head_dim);
#pragma omp for schedule(dynamic)
    for (size_t i = 0; i < tasks.size(); ++i) forward_tile(geo, tasks[i], q, k, v, out, lse, s, acc);
  }
}

template <typename T>
void attention_backward(const AttentionLayout& layout, const T* q, const T* k, const T* v, const T* out,
                        const T* lse, const T* dout, const T* dlse, T* dq, T* dk, T* dv) {
  const Geometry<T> geo{layout};
  const AttentionLayout& l = layout;
  const int64_t d = l.head_dim, rows = l.tq * l.n_heads;
  std::vector<T> delta(rows);
#pragma omp parallel for schedule(static) if (worth_parallel(rows * d))
  for (int64_t r = 0; r < rows; ++r) {
    T dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += dout[r * d + c] * out[r * d + c];
    delta[r] = dot - (dlse ? dlse[r] : T(0));
  }
  const Backward<T> bw{geo, q, k, v, lse, dout, delta.data()};
  // The gradient products of one (query tile, key tile) pair whose P and dS bw.tile() computed.
  auto add_dq = [&](int64_t b, int h, int64_t i0, int64_t m, int64_t j0, int64_t n, const T* ds) {
    geo.for_visible_blocks(b, i0, m, j0, n, [&](int64_t r0, int64_t rows, int64_t cols) {
      gemm<T>(false, false, rows, d, cols, T(l.scale), ds + r0 * kBk, kBk,
              k + ((l.cu_k[b] + j0) * l.n_kv_heads + h / l.group()) * d, geo.ldk(), T(1),
              dq + ((l.cu_q[b] + i0 + r0) * l.n_heads + h) * d, geo.ldq());
    });
  };
  auto add_dk_dv = [&](int64_t b, int h, int64_t i0, int64_t m, int64_t j0, int64_t n, const T* p, const T* ds) {
    const int g = h / l.group();
    T* dk_tile = dk + ((l.cu_k[b] + j0) * l.n_kv_heads + g) * d;
    T* dv_tile = dv + ((l.cu_k[b] + j0) * l.n_kv_heads + g) * d;
    const T* q_rows = q + ((l.cu_q[b] + i0) * l.n_heads + h) * d;
    const T* do_rows = dout + ((l.cu_q[b] + i0) * l.n_heads + h) * d;
    // Each row block adds into the dk/dv rows of the keys it sees.
    geo.for_visible_blocks(b, i0, m, j0, n, [&](int64_t r0, int64_t rows, int64_t cols) {
      gemm<T>(true, false, cols, d, rows, T(1), p + r0 * kBk, kBk, do_rows + r0 * geo.ldq(), geo.ldq(), T(1), dv_tile,
              geo.ldk());
      gemm<T>(true, false, cols, d, rows, T(l.scale), ds + r0 * kBk, kBk, q_rows + r0 * geo.ldq(), geo.ldq(), T(1),
              dk_tile, geo.ldk());
    });
  };

  // One pass when there are enough (sequence, kv head) pairs to keep every thread busy: such a
  // task owns the dq rows of its query heads and the dk/dv rows of its kv head, so each tile's P
  // and dS are computed once and feed all three gradients (5 tile products instead of 7).
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (l.n_seqs() * l.n_kv_heads >= 2 * int64_t(threads)) {
    std::vector<Task> tasks;
    for (int64_t b = 0; b < l.n_seqs(); ++b)
      for (int g = 0; g < l.n_kv_heads; ++g) tasks.push_back({b, g, 0});
    // Longest sequences first, so that the dynamic schedule ends evenly.
    std::stable_sort(tasks.begin(), tasks.end(),
                     [&](const Task& x, const Task& y) { return geo.q_len(x.seq) > geo.q_len(y.seq); });
    run_backward_tasks<T>(tasks, l, [&](const Task& t, T* p, T* ds) {
      const int64_t b = t.seq;
      for (int h = t.head * l.group(); h < (t.head + 1) * l.group(); ++h) {
        for (int64_t i0 = 0; i0 < geo.q_len(b); i0 += kBq) {
          geo.for_key_tiles(b, i0, [&](int64_t m, int64_t j0, int64_t n) {
            bw.tile(b, h, i0, m, j0, n, p, ds);
            add_dq(b, h, i0, m, j0, n, ds);
            add_dk_dv(b, h, i0, m, j0, n, p, ds);
          });
        }
      }
    });
    return;
  }

  // Otherwise two passes that parallelise over tiles. Pass 1: each task owns the dq rows of one
  // query tile and head.
  run_backward_tasks<T>(geo.tasks(l.n_heads, true), l, [&](const Task& t, T* p, T* ds) {
    geo.for_key_tiles(t.seq, t.start, [&](int64_t m, int64_t j0, int64_t n) {
      bw.tile(t.seq, t.head, t.start, m, j0, n, p, ds);
      add_dq(t.seq, t.head, t.start, m, j0, n, ds);
    });
  });

  // Pass 2: each task owns the dk/dv rows of one key tile and kv head, summed over its query heads.
  run_backward_tasks<T>(geo.tasks(l.n_kv_heads, false), l, [&](const Task& t, T* p, T* ds) {
    const int64_t b = t.seq, j0 = t.start, n = std::min(kBk, geo.k_len(b) - j0);
    for (int h = t.head * l.group(); h < (t.head + 1) * l.group(); ++h) {
      for (int64_t i0 = 0; i0 < geo.q_len(b); i0 += kBq) {
        const int64_t m = std::min(kBq, geo.q_len(b) - i0);
        if (geo.visible(b, i0 + m - 1) <= j0) continue;  // this query tile sees none of these keys
        bw.tile(b, h, i0, m, j0, n, p, ds);
        add_dk_dv(b, h, i0, m, j0, n, p, ds);
      }
    }
  });
}

template void attention_forward<float>(const AttentionLayout&, const float*, const float*, const float*, float*,
                                       float*);
template void attention_forward<double>(const AttentionLayout&, const double*, const double*, const double*,
                                        double*, double*);
template void attention_backward<float>(const AttentionLayout&, const float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*, float*, float*,
                                        float*);
template void attention_backward<double>(const AttentionLayout&, const double*, const double*, const double*,
                                         const double*, const double*, const double*, const double*, double*,
                                         double*, double*);

}  // namespace hdp::kernels::cpu
