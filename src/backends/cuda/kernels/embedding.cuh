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

// Both kernels move W consecutive columns a thread: W = kPack<S> (16-byte
// loads and stores) when the launcher found C whole packs and the arrays
// aligned (embedding_packs), else 1.
template <typename S, typename T>
bool embedding_packs(int C, const void* acts, const T* weights) {
  return C % kPack<S> == 0 && C % kPack<T> == 0 && packs_aligned(acts, weights);
}

// out[n] = wte[tokens[n] - v0] (zero when another shard owns the token).
template <typename S, int W>
STRATA_DEVICE void embedding_rows(S* out, const int32_t* tokens, const compute_t<S>* wte, int64_t N,
                                  int C, int64_t v0, int V_local) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t row = int64_t(tokens[n]) - v0;
    const bool mine = row >= 0 && row < V_local;
    for (int c = int(threadIdx.x) * W; c < C; c += int(blockDim.x) * W) {
      compute_t<S> v[W] = {};
      if constexpr (W > 1) {
        if (mine) load_run(v, wte + row * C + c);
        store_run(out + n * C + c, v);
      } else {
        out[n * C + c] = act_store<S>(mine ? wte[row * C + c] : compute_t<S>(0));
      }
    }
  }
}
template <typename S>
STRATA_GLOBAL void k_embedding(S* out, const int32_t* tokens, const compute_t<S>* wte, int64_t N,
                               int C, int64_t v0, int V_local, bool packs) {
  if (packs)
    embedding_rows<S, kPack<S>>(out, tokens, wte, N, C, v0, V_local);
  else
    embedding_rows<S, 1>(out, tokens, wte, N, C, v0, V_local);
}

// dwte[rows[u]] += sum of dout[pos[k]] for k in [start[u], start[u + 1]),
// added in that order.
template <typename S, int W>
STRATA_DEVICE void embedding_grad_rows(compute_t<S>* dwte, const int32_t* rows,
                                       const int32_t* start, const int32_t* pos, const S* dout,
                                       int unique, int C) {
  for (int u = int(blockIdx.x); u < unique; u += int(gridDim.x)) {
    compute_t<S>* d = dwte + int64_t(rows[u]) * C;
    for (int c = int(threadIdx.x) * W; c < C; c += int(blockDim.x) * W) {
      compute_t<S> s[W], x[W];
      if constexpr (W > 1) {
        load_run(s, d + c);
      } else {
        s[0] = d[c];
      }
      for (int k = start[u]; k < start[u + 1]; ++k) {
        const S* g = dout + int64_t(pos[k]) * C + c;
        if constexpr (W > 1) {
          load_run(x, g);
        } else {
          x[0] = act_load(*g);
        }
        for (int j = 0; j < W; ++j) s[j] += x[j];
      }
      if constexpr (W > 1) {
        store_run(d + c, s);
      } else {
        d[c] = s[0];
      }
    }
  }
}
template <typename S>
STRATA_GLOBAL void k_embedding_backward(compute_t<S>* dwte, const int32_t* rows,
                                        const int32_t* start, const int32_t* pos, const S* dout,
                                        int unique, int C, bool packs) {
  if (packs)
    embedding_grad_rows<S, kPack<S>>(dwte, rows, start, pos, dout, unique, C);
  else
    embedding_grad_rows<S, 1>(dwte, rows, start, pos, dout, unique, C);
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
        const bool packs = embedding_packs<S>(C, out.raw(), wte);
        STRATA_LAUNCH(k_embedding<S>, blocks_for(N, 1, 8192), row_threads(packs ? C / kPack<S> : C),
                      0, k.stream(), out.template as<S>(), dt, wte, N, C, v0,
                      V_local < 0 ? V : V_local, packs);
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
        const bool packs = embedding_packs<S>(C, dout.raw(), dwte);
        STRATA_LAUNCH(k_embedding_backward<S>, blocks_for(unique, 1, 8192),
                      row_threads(packs ? C / kPack<S> : C), 0, k.stream(), dwte, d, d + unique,
                      d + 2 * unique + 1, dout.template as<const S>(), unique, C, packs);
      },
      dout);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
