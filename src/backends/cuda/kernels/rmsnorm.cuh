// RMSNorm forward and backward: a block per row (grid-stride over rows, block
// size a multiple of 32) for out and dx, chunked column sums for dw. Kernels
// on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). S: the activations'
// storage (common.cuh); w and rstd are T = compute_t<S>. `packs`: every row
// is read and written in 16-byte packs (the launcher checks that C is a
// multiple of a pack and the rows aligned), else element by element.
template <typename S>
STRATA_GLOBAL void k_rmsnorm(S* out, compute_t<S>* rstd, const S* x, const compute_t<S>* w,
                             int64_t N, int C, compute_t<S> eps, bool packs) {
  using T = compute_t<S>;
  constexpr int P = kPack<S>;
  const int first = int(threadIdx.x) * (packs ? P : 1), stride = int(blockDim.x) * (packs ? P : 1);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const S* xr = x + n * C;
    T ss = 0;
    for (int c = first; c < C; c += stride) {
      if (packs) {
        const Pack<S> p = load_pack(xr + c);
        for (int e = 0; e < P; ++e) ss += act_load(p.v[e]) * act_load(p.v[e]);
      } else {
        const T v = act_load(xr[c]);
        ss += v * v;
      }
    }
    ss = block_sum(ss);
    const T r = T(1) / g_sqrt(ss / T(C) + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    S* o = out + n * C;
    for (int c = first; c < C; c += stride) {
      if (packs) {
        const Pack<S> p = load_pack(xr + c);
        Pack<S> q;
        for (int e = 0; e < P; ++e) q.v[e] = act_store<S>(act_load(p.v[e]) * r * w[c + e]);
        store_pack(o + c, q);
      } else {
        o[c] = act_store<S>(act_load(xr[c]) * r * w[c]);
      }
    }
  }
}

// dx += rstd g w - rstd^3 mean(g w x) x  with g = dout (packs as the forward).
template <typename S>
STRATA_GLOBAL void k_rmsnorm_backward_dx(S* dx, const S* dout, const S* x, const compute_t<S>* w,
                                         const compute_t<S>* rstd, int64_t N, int C, bool packs) {
  using T = compute_t<S>;
  constexpr int P = kPack<S>;
  const int first = int(threadIdx.x) * (packs ? P : 1), stride = int(blockDim.x) * (packs ? P : 1);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const S *xr = x + n * C, *g = dout + n * C;
    T dot = 0;
    for (int c = first; c < C; c += stride) {
      if (packs) {
        const Pack<S> gp = load_pack(g + c), xp = load_pack(xr + c);
        for (int e = 0; e < P; ++e) dot += act_load(gp.v[e]) * w[c + e] * act_load(xp.v[e]);
      } else {
        dot += act_load(g[c]) * w[c] * act_load(xr[c]);
      }
    }
    dot = block_sum(dot);
    const T r = rstd[n];
    const T k = r * r * r * dot / T(C);
    S* d = dx + n * C;
    for (int c = first; c < C; c += stride) {
      if (packs) {
        const Pack<S> gp = load_pack(g + c), xp = load_pack(xr + c);
        Pack<S> dp = load_pack(d + c);
        for (int e = 0; e < P; ++e)
          dp.v[e] = act_store<S>(act_load(dp.v[e]) +
                                 (r * act_load(gp.v[e]) * w[c + e] - k * act_load(xp.v[e])));
        store_pack(d + c, dp);
      } else {
        d[c] = act_store<S>(act_load(d[c]) + (r * act_load(g[c]) * w[c] - k * act_load(xr[c])));
      }
    }
  }
}

// dw[c] += sum_n dout * x * rstd, as reduce.cuh's column sums: this kernel
// writes each chunk of rows' partial sums (blockIdx.y: the chunk).
template <typename S>
STRATA_GLOBAL void k_rmsnorm_dw_partials(compute_t<S>* partial, const S* dout, const S* x,
                                         const compute_t<S>* rstd, int64_t N, int C,
                                         int64_t chunk) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  const int64_t n0 = int64_t(blockIdx.y) * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
  compute_t<S> s = 0;
  for (int64_t n = n0; n < n1; ++n)
    s += act_load(dout[n * C + c]) * act_load(x[n * C + c]) * rstd[n];
  partial[int64_t(blockIdx.y) * C + c] = s;
}

// ------------------------------------------------------------------ launchers

// Rows of C elements of S at these bases go in 16-byte packs: C a multiple of
// a pack and every base 16-byte aligned (so is every row then).
template <typename S, typename... P>
bool rows_in_packs(int C, const P*... base) {
  return C % kPack<S> == 0 && ((reinterpret_cast<uintptr_t>(base) % 16 == 0) && ...);
}

template <typename T>
void rmsnorm_forward(KernelContext<T>& k, ops::Act<T> out, T* rstd, ops::ActIn<T> x, const T* w,
                     int64_t N, int C, double eps) {
  if (N == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const bool packs = rows_in_packs<S>(C, out.raw(), x.raw());
        STRATA_LAUNCH(k_rmsnorm<S>, blocks_for(N, 1, 8192), row_threads(packs ? C / kPack<S> : C),
                      0, k.stream(), out.template as<S>(), rstd, x.template as<const S>(), w, N, C,
                      T(eps), packs);
      },
      out, x);
}

template <typename T>
void rmsnorm_backward(KernelContext<T>& k, ops::Act<T> dx, T* dw, ops::ActIn<T> dout,
                      ops::ActIn<T> x, const T* w, const T* rstd, int64_t N, int C) {
  if (N == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        if (dx) {
          const bool packs = rows_in_packs<S>(C, dx.raw(), dout.raw(), x.raw());
          STRATA_LAUNCH(k_rmsnorm_backward_dx<S>, blocks_for(N, 1, 8192),
                        row_threads(packs ? C / kPack<S> : C), 0, k.stream(), dx.template as<S>(),
                        dout.template as<const S>(), x.template as<const S>(), w, rstd, N, C,
                        packs);
        }
        if (dw) {
          int64_t chunk;
          int chunks;
          T* partial = column_partials(k, N, C, &chunk, &chunks);
          STRATA_LAUNCH(k_rmsnorm_dw_partials<S>, dim3(blocks_for(C, 128), unsigned(chunks)), 128,
                        0, k.stream(), partial, dout.template as<const S>(),
                        x.template as<const S>(), rstd, N, C, chunk);
          STRATA_LAUNCH(k_finish_columns<T>, blocks_for(C, 128), 128, 0, k.stream(), dw,
                        static_cast<const T*>(partial), chunks, C);
        }
      },
      dx, dout, x);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
