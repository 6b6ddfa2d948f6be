// Token embedding: the lookup, and its deterministic scatter-add (the tokens
// grouped by row on the host, so there are no atomics and the order of the
// additions is fixed). Kernels on top, launchers below.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "backends/cuda/kernels/context.cuh"
#include "core/error.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out[n] = wte[tokens[n] - v0] (zero when another shard owns the token).
template <typename S>
STRATA_GLOBAL void k_embedding(S* out, const int32_t* tokens, const compute_t<S>* wte, int64_t N,
                               int C, int64_t v0, int V_local) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t row = int64_t(tokens[n]) - v0;
    const bool mine = row >= 0 && row < V_local;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))
      out[n * C + c] = act_store<S>(mine ? wte[row * C + c] : compute_t<S>(0));
  }
}

// dwte[rows[u]] += sum of dout[pos[k]] for k in [start[u], start[u + 1]).
template <typename S>
STRATA_GLOBAL void k_embedding_backward(compute_t<S>* dwte, const int32_t* rows,
                                        const int32_t* start, const int32_t* pos, const S* dout,
                                        int unique, int C) {
  for (int u = int(blockIdx.x); u < unique; u += int(gridDim.x)) {
    compute_t<S>* d = dwte + int64_t(rows[u]) * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) {
      compute_t<S> s = d[c];
      for (int k = start[u]; k < start[u + 1]; ++k) s += act_load(dout[int64_t(pos[k]) * C + c]);
      d[c] = s;
    }
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void embedding_forward(KernelContext<T>& k, ops::Act<T> out, const int32_t* tokens, const T* wte,
                       int64_t N, int C, int V, int64_t v0, int V_local) {
  for (int64_t n = 0; n < N; ++n)
    STRATA_CHECK(tokens[n] >= 0 && tokens[n] < V, "token id ", tokens[n], " at position ", n,
                 " is outside the vocabulary [0, ", V, ")");
  if (N == 0) return;
  const int32_t* dt = k.upload_ints(kTokens, tokens, N);
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_embedding<S>, blocks_for(N, 1, 8192), row_threads(C), 0, k.stream(),
                      out.template as<S>(), dt, wte, N, C, v0, V_local < 0 ? V : V_local);
      },
      out);
}

template <typename T>
void embedding_backward(KernelContext<T>& k, T* dwte, const int32_t* tokens, ops::ActIn<T> dout,
                        int64_t N, int C, int64_t v0, int V_local) {
  // Group the positions by row on the host (stable: positions ascending).
  std::vector<std::pair<int64_t, int32_t>> rp;
  rp.reserve(size_t(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = int64_t(tokens[n]) - v0;
    if (V_local >= 0 && (row < 0 || row >= V_local)) continue;
    rp.emplace_back(row, int32_t(n));
  }
  if (rp.empty()) return;
  std::stable_sort(rp.begin(), rp.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int32_t> host;  // rows | start (unique + 1) | positions
  std::vector<int32_t> start;
  for (size_t i = 0; i < rp.size(); ++i)
    if (i == 0 || rp[i].first != rp[i - 1].first) {
      host.push_back(int32_t(rp[i].first));
      start.push_back(int32_t(i));
    }
  const int unique = int(host.size());
  start.push_back(int32_t(rp.size()));
  host.insert(host.end(), start.begin(), start.end());
  for (const auto& e : rp) host.push_back(e.second);
  // upload_ints copies `host` into pinned staging the backend owns before the
  // async copy: the copy never reads this local vector, which dies here.
  const int32_t* d = k.upload_ints(kTokens, host.data(), int64_t(host.size()));
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_embedding_backward<S>, blocks_for(unique, 1, 8192), row_threads(C), 0,
                      k.stream(), dwte, d, d + unique, d + 2 * unique + 1,
                      dout.template as<const S>(), unique, C);
      },
      dout);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
