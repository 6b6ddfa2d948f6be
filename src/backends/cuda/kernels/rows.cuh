// Row kernels: RMSNorm forward and backward, RoPE, the embedding lookup and
// its deterministic scatter-add, and the cross-entropy's per-row softmax.
// One block per row (grid-stride over rows), block size a multiple of 32.
#pragma once

#include "backends/cuda/kernels/common.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
STRATA_GLOBAL void k_rmsnorm(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, T eps) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T ss = 0;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) ss += xr[c] * xr[c];
    ss = block_sum(ss);
    const T r = T(1) / g_sqrt(ss / T(C) + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    T* o = out + n * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) o[c] = xr[c] * r * w[c];
  }
}

// dx += rstd g w - rstd^3 mean(g w x) x  with g = dout.
template <typename T>
STRATA_GLOBAL void k_rmsnorm_backward_dx(T* dx, const T* dout, const T* x, const T* w,
                                         const T* rstd, int64_t N, int C) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T *xr = x + n * C, *g = dout + n * C;
    T dot = 0;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) dot += g[c] * w[c] * xr[c];
    dot = block_sum(dot);
    const T r = rstd[n];
    const T k = r * r * r * dot / T(C);
    T* d = dx + n * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) d[c] += r * g[c] * w[c] - k * xr[c];
  }
}

// dw[c] += sum_n dout * x * rstd: a thread per column, rows in order.
template <typename T>
STRATA_GLOBAL void k_rmsnorm_backward_dw(T* dw, const T* dout, const T* x, const T* rstd, int64_t N,
                                         int C) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  T s = 0;
  for (int64_t n = 0; n < N; ++n) s += dout[n * C + c] * x[n * C + c] * rstd[n];
  dw[c] += s;
}

// cos/sin[p, i] of angle p * inv_freq[i], computed in double.
template <typename T>
STRATA_GLOBAL void k_rope_table(T* cos_t, T* sin_t, int max_pos, int half, const double* inv_freq) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(max_pos) * half;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double a = double(i / half) * inv_freq[i % half];
    cos_t[i] = T(cos(a));
    sin_t[i] = T(sin(a));
  }
}

// In place on the first H heads of B*T rows `row_stride` apart; sign -1 is
// the transpose (backward).
template <typename T>
STRATA_GLOBAL void k_rope(T* x, const T* cos_t, const T* sin_t, int B, int T_, int H, int D,
                          int64_t row_stride, int pos0, T sign) {
  const int half = D / 2;
  const int64_t total = int64_t(B) * T_ * H * half;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(e % half);
    const int h = int((e / half) % H);
    const int64_t bt = e / (int64_t(half) * H);
    const int t = int(bt % T_);
    T* lo = x + bt * row_stride + int64_t(h) * D + i;
    T* hi = lo + half;
    const T c = cos_t[int64_t(pos0 + t) * half + i], s = sign * sin_t[int64_t(pos0 + t) * half + i];
    const T a = *lo, b = *hi;
    *lo = a * c - b * s;
    *hi = b * c + a * s;
  }
}

// out[n] = wte[tokens[n] - v0] (zero when another shard owns the token).
template <typename T>
STRATA_GLOBAL void k_embedding(T* out, const int32_t* tokens, const T* wte, int64_t N, int C,
                               int64_t v0, int V_local) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t row = int64_t(tokens[n]) - v0;
    const bool mine = row >= 0 && row < V_local;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))
      out[n * C + c] = mine ? wte[row * C + c] : T(0);
  }
}

// dwte[rows[u]] += sum of dout[pos[k]] for k in [start[u], start[u + 1]):
// the tokens grouped by row on the host, so there are no atomics and the
// order of the additions is fixed.
template <typename T>
STRATA_GLOBAL void k_embedding_backward(T* dwte, const int32_t* rows, const int32_t* start,
                                        const int32_t* pos, const T* dout, int unique, int C) {
  for (int u = int(blockIdx.x); u < unique; u += int(gridDim.x)) {
    T* d = dwte + int64_t(rows[u]) * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) {
      T s = d[c];
      for (int k = start[u]; k < start[u + 1]; ++k) s += dout[int64_t(pos[k]) * C + c];
      d[c] = s;
    }
  }
}

// Cross-entropy rows of a logits chunk [rows, V] (this rank's V columns,
// global ids v0 ..). mode 0: lse, nll only; mode 1: also the gradient in place,
// (softmax - onehot) * dloss; mode 2: gradient only, from a given lse. Ignored
// targets get nll 0 and a zero gradient row. With `local` (vocab shards), mode
// 0 writes the local lse and the owned target logit instead of nll.
template <typename T>
STRATA_GLOBAL void k_ce_rows(T* logits, int64_t rows, int V, const int32_t* targets, T* lse, T* nll,
                             T* target_logit, int mode, T dloss, int64_t v0, int ignore) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* l = logits + r * V;
    const int32_t y = targets[r];
    const bool valid = y != ignore;
    const int64_t yl = int64_t(y) - v0;
    const bool owned = valid && yl >= 0 && yl < V;
    T lr;
    if (mode == 2) {
      lr = lse[r];
    } else {
      T m = g_neg_inf<T>();
      for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) m = g_max(m, l[j]);
      m = block_max(m);
      T s = 0;
      for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) s += g_exp(l[j] - m);
      s = block_sum(s);
      lr = m + g_log(s);
      const T ly = owned ? l[yl] : T(0);
      __syncthreads();  // every thread has read l[yl] before the gradient overwrites it
      if (threadIdx.x == 0) {
        lse[r] = lr;
        if (target_logit) target_logit[r] = ly;
        if (nll) nll[r] = valid ? lr - ly : T(0);
      }
      if (mode == 0) continue;
    }
    for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) {
      T g = valid ? g_exp(l[j] - lr) * dloss : T(0);
      if (owned && j == yl) g -= dloss;
      l[j] = g;
    }
  }
}

// nll[r] = lse[r] - target_logit[r] (after a vocab-shard combine).
template <typename T>
STRATA_GLOBAL void k_ce_nll(T* nll, const T* lse, const T* target_logit, const int32_t* targets,
                            int64_t rows, int ignore) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x)
    nll[r] = targets[r] != ignore ? lse[r] - target_logit[r] : T(0);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
