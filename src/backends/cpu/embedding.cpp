// Token embedding: forward gathers rows of wte, backward scatter-adds into dwte.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "core/error.h"

namespace strata::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C, int V,
                       int64_t v0, int V_local) {
  if (V_local < 0) V_local = V;
  for (int64_t n = 0; n < N; ++n)
    STRATA_CHECK(tokens[n] >= 0 && tokens[n] < V, "token id ", tokens[n], " at position ", n,
                 " is outside the vocabulary [0, ", V, ")");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = int64_t(tokens[n]) - v0;
    if (row >= 0 && row < V_local)
      std::memcpy(out + n * C, wte + row * C, sizeof(T) * C);
    else
      std::memset(out + n * C, 0, sizeof(T) * C);
  }
}

// Deterministic: threads own disjoint channel ranges.
template <typename T>
void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C, int64_t v0,
                        int V_local) {
  // Each thread owns a contiguous channel range of every row: no races, and the
  // summation order over tokens is fixed, so the result is deterministic.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int c0 = int(int64_t(C) * t / nt), c1 = int(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(tokens[n]) - v0;
      if (V_local >= 0 && (row < 0 || row >= V_local)) continue;  // another rank's token
      T* d = dwte + row * C;
      const T* g = dout + n * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int, int,
                                       int64_t, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int, int,
                                        int64_t, int);
template void embedding_backward<float>(float*, const int32_t*, const float*, int64_t, int, int64_t,
                                        int);
template void embedding_backward<double>(double*, const int32_t*, const double*, int64_t, int,
                                         int64_t, int);

}  // namespace strata::cpu
