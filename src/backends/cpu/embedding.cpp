// Token embedding: forward gathers rows of wte, backward scatter-adds into dwte.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "core/error.h"

namespace strata::cpu {

template <typename T>
void embedding_forward(Act<T> out_, const int32_t* tokens, const T* wte, int64_t N, int C, int V,
                       int64_t v0, int V_local) {
  if (V_local < 0) V_local = V;
  for (int64_t n = 0; n < N; ++n)
    STRATA_CHECK(tokens[n] >= 0 && tokens[n] < V, "token id ", tokens[n], " at position ", n,
                 " is outside the vocabulary [0, ", V, ")");
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        S* out = out_.template as<S>();
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t row = int64_t(tokens[n]) - v0;
          S* o = out + n * C;
          if (row < 0 || row >= V_local)
            std::fill(o, o + C, S(T(0)));
          else if constexpr (std::is_same_v<S, T>)
            std::memcpy(o, wte + row * C, sizeof(T) * C);
          else
            std::copy(wte + row * C, wte + (row + 1) * C, o);  // rounded to bf16
        }
      },
      out_);
}

namespace {

// Deterministic: each thread owns a contiguous channel range of every row: no
// races, and the summation order over tokens is fixed.
template <typename T, typename S>
void scatter_add(T* dwte, const int32_t* tokens, const S* dout, int64_t N, int C, int64_t v0,
                 int V_local) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int c0 = int(int64_t(C) * t / nt), c1 = int(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(tokens[n]) - v0;
      if (V_local >= 0 && (row < 0 || row >= V_local)) continue;  // another rank's token
      T* d = dwte + row * C;
      const S* g = dout + n * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) d[c] += T(g[c]);
    }
  }
}

}  // namespace

template <typename T>
void embedding_backward(T* dwte, const int32_t* tokens, ActIn<T> dout, int64_t N, int C, int64_t v0,
                        int V_local) {
  with_storage<T>(
      [&](auto s) {
        scatter_add(dwte, tokens, dout.template as<const decltype(s)>(), N, C, v0, V_local);
      },
      dout);
}

STRATA_CPU_INSTANTIATE(embedding_forward)
STRATA_CPU_INSTANTIATE(embedding_backward)

}  // namespace strata::cpu
