// Bias add over rows, and its backward: column sums of dout (reduce.cuh's
// chunked scheme: coalesced across a warp, chunks of rows in order, so
// deterministic). Kernels on top, launchers below. S: the activations'
// storage (common.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out[r * ld + j] += bias[j]; with `packs` (OC and ld whole packs, out and
// bias aligned) a thread adds a 16-byte pack of a row.
template <typename S>
STRATA_GLOBAL void k_bias_add(S* out, const compute_t<S>* bias, int64_t N, int OC, int64_t ld,
                              bool packs) {
  constexpr int P = kPack<S>;
  if (packs) {
    const int runs = OC / P;
    STRATA_GRID_LOOP(i, N * runs) {
      const int64_t r = i / runs;
      const int j = int(i % runs) * P;
      compute_t<S> o[P], b[P];
      load_run(o, out + r * ld + j);
      load_run(b, bias + j);
      for (int q = 0; q < P; ++q) o[q] += b[q];
      store_run(out + r * ld + j, o);
    }
    return;
  }
  STRATA_GRID_LOOP(i, N * OC) {
    const int64_t r = i / OC;
    const int j = int(i % OC);
    out[r * ld + j] = act_store<S>(act_load(out[r * ld + j]) + bias[j]);
  }
}

// partial[chunk][j] = sum over the chunk's rows r of src[r * ld + j]
// (blockIdx.y: the chunk; k_finish_columns adds the chunks).
template <typename S>
STRATA_GLOBAL void k_column_partials(compute_t<S>* partial, const S* src, int64_t N, int OC,
                                     int64_t ld, int64_t chunk) {
  const int j = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= OC) return;
  const int64_t r0 = int64_t(blockIdx.y) * chunk, r1 = r0 + chunk < N ? r0 + chunk : N;
  compute_t<S> s = 0;
  for (int64_t r = r0; r < r1; ++r) s += act_load(src[r * ld + j]);
  partial[int64_t(blockIdx.y) * OC + j] = s;
}

// ------------------------------------------------------------------ launchers

template <typename T>
void bias_add_forward(KernelContext<T>& k, ops::Act<T> out, const T* bias, int64_t N, int OC,
                      int64_t ld) {
  if (N == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        constexpr int P = kPack<S>;
        const int64_t L = ld ? ld : OC;
        const bool packs = OC % P == 0 && L % P == 0 && packs_aligned(out.template as<S>(), bias);
        STRATA_LAUNCH(k_bias_add<S>, blocks_for(packs ? N * OC / P : N * OC, 256), 256, 0,
                      k.stream(), out.template as<S>(), bias, N, OC, L, packs);
      },
      out);
}

template <typename T>
void bias_add_backward(KernelContext<T>& k, T* dbias, ops::ActIn<T> dout, int64_t N, int OC,
                       int64_t ld) {
  if (N == 0 || OC == 0) return;
  int64_t chunk;
  int chunks;
  T* partial = column_partials(k, N, OC, &chunk, &chunks);
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_column_partials<S>, dim3(blocks_for(OC, 128), unsigned(chunks)), 128, 0,
                      k.stream(), partial, dout.template as<const S>(), N, OC, ld ? ld : OC, chunk);
      },
      dout);
  STRATA_LAUNCH(k_finish_columns<T>, blocks_for(OC, 128), 128, 0, k.stream(), dbias,
                static_cast<const T*>(partial), chunks, OC);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
