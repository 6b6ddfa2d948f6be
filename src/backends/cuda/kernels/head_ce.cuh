// Fused final RMSNorm + LM head + cross-entropy, chunked over rows as the
// CPU backend (backends/cpu/head_ce.cpp): per chunk one logits GEMM, the row
// softmax kernel (a 256-thread block per row: one pass for the log-sum-exp,
// one for the gradient in place) and two GEMMs for dxn and dwout; with bf16
// matmuls the head weight is converted once per call (PinnedOperand), not
// per chunk; the vocabulary-parallel head in phases over the same chunks.
// The logits chunk is stored as the activations are: in bf16 storage the
// logits GEMM writes bf16, the softmax reads it and writes the bf16 gradient
// in place, and the two backward GEMMs read that as it is (half the bytes of
// the head's largest buffer, and no conversion of it per GEMM); the
// log-sum-exp, the losses and the softmax arithmetic stay in T.
// Kernels on top, launchers below.
#pragma once

#include <algorithm>

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"
#include "backends/cuda/kernels/rmsnorm.cuh"
#include "ops/types.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// Cross-entropy rows of a logits chunk [rows, V] (this rank's V columns,
// global ids v0 ..). mode 0: lse, nll only; mode 1: also the gradient in place,
// (softmax - onehot) * dloss; mode 2: gradient only, from a given lse. Ignored
// targets get nll 0 and a zero gradient row. With `local` (vocab shards), mode
// 0 writes the local lse and the owned target logit instead of nll.
// L: the logits' storage; T = compute_t<L> everything else.
template <typename L>
STRATA_GLOBAL void k_ce_rows(L* logits, int64_t rows, int V, const int32_t* targets,
                             compute_t<L>* lse, compute_t<L>* nll, compute_t<L>* target_logit,
                             int mode, compute_t<L> dloss, int64_t v0, int ignore) {
  using T = compute_t<L>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    L* l = logits + r * V;
    const int32_t y = targets[r];
    const bool valid = y != ignore;
    const int64_t yl = int64_t(y) - v0;
    const bool owned = valid && yl >= 0 && yl < V;
    T lr;
    if (mode == 2) {
      lr = lse[r];
    } else {
      // One pass for the log-sum-exp: each thread keeps its running max and
      // its sum scaled to it (online softmax), then the block combines them.
      T m = g_neg_inf<T>(), s = 0;
      for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) {
        const T x = act_load(l[j]);
        if (x > m) {
          s = s * g_exp(m - x) + T(1);
          m = x;
        } else if (!(x == g_neg_inf<T>())) {  // -inf adds 0 (and -inf - -inf is NaN); NaN spreads
          s += g_exp(x - m);
        }
      }
      const T mb = block_max(m);
      s = block_sum(m == g_neg_inf<T>() ? T(0) : s * g_exp(m - mb));
      lr = mb + g_log(s);
      const T ly = owned ? T(act_load(l[yl])) : T(0);
      __syncthreads();  // every thread has read l[yl] before the gradient overwrites it
      if (threadIdx.x == 0) {
        lse[r] = lr;
        if (target_logit) target_logit[r] = ly;
        if (nll) nll[r] = valid ? lr - ly : T(0);
      }
      if (mode == 0) continue;
    }
    for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) {
      T g = valid ? g_exp(T(act_load(l[j])) - lr) * dloss : T(0);
      if (owned && j == yl) g -= dloss;
      l[j] = act_store<L>(g);
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

// ------------------------------------------------------------------ launchers

// A logits chunk of `elements` in storage st (scratch kLogits).
template <typename T>
ops::Act<T> logits_chunk(KernelContext<T>& k, int64_t elements, ops::Dtype st) {
  return ops::Act<T>(k.scratch(kLogits, size_t(elements) * ops::dtype_size(st)), st);
}

// k_ce_rows over `rows` rows of a chunk, in the chunk's storage.
template <typename T>
void ce_rows(KernelContext<T>& k, ops::Act<T> logits, int64_t rows, int V, const int32_t* targets,
             T* lse, T* nll, T* target_logit, int mode, double dloss, int64_t v0) {
  ops::with_storage<T>(
      [&](auto s) {
        using L = decltype(s);
        STRATA_LAUNCH(k_ce_rows<L>, blocks_for(rows, 1, 8192), 256, 0, k.stream(),
                      logits.template as<L>(), rows, V, targets, lse, nll, target_logit, mode,
                      T(dloss), v0, int(ops::kIgnoreIndex));
      },
      logits);
}

enum class HeadMode { Forward, Backward, ForwardBackward };

// Rows per chunk: 64 Mi logits (256 MiB in fp32), but at least 2048 rows,
// because the chunk is the K of the dW GEMM (V x C += logits^T x), which a
// few hundred rows leave far from the tensor cores' rate while it rewrites
// all of dW per chunk (1 GiB at V 128256, C 2048), and at most 8192; at V
// 128256 that is 1 GiB of logits. `forced` (KernelBackend::set_head_chunk_rows,
// tests) overrides it.
inline int64_t head_chunk_rows(int64_t N, int V, int64_t forced = 0) {
  if (forced > 0) return std::min(forced, N);
  const int64_t R = std::clamp<int64_t>((int64_t(1) << 26) / std::max(V, 1), 2048, 8192) / 16 * 16;
  return std::min(R, N);
}

// x, xn, dx and the normed input's gradient are activations, stored as x is
// (T or bf16): the norm kernels and the GEMM engine read and write both
// storages, so nothing is staged; the logits chunk and the statistics are T.
template <typename T>
double head_ce(KernelContext<T>& k, HeadMode mode, ops::Act<T> dx, T* dwn, T* dwout, ops::Act<T> xn,
               T* rstd, T* lse, T* token_nll, int64_t* n_valid, ops::ActIn<T> x, const T* wn,
               const T* wout, const int32_t* targets, int64_t N, int C, int V, double eps,
               double dloss) {
  if (N == 0) {
    if (n_valid) *n_valid = 0;
    return 0.0;
  }
  const int64_t R = head_chunk_rows(N, V, k.head_chunk_rows());
  const ops::Dtype st = x.dtype();
  const ops::Act<T> logits = logits_chunk(k, R * V, st);
  const PinnedOperand<T> pin(k.gemm(), wout);  // bf16: wout converted once, not per chunk
  const bool grad = mode != HeadMode::Forward;
  const ops::Act<T> dxn =
      grad && (dx || dwn) ? ops::Act<T>(k.scratch(kDxn, size_t(N) * C * ops::dtype_size(st)), st)
                          : ops::Act<T>();
  T* lse_buf = lse ? lse : static_cast<T*>(k.scratch(kLse, size_t(N) * sizeof(T)));
  T* nll_buf = token_nll ? token_nll : static_cast<T*>(k.scratch(kNll, size_t(N) * sizeof(T)));
  const int32_t* dt = k.upload_ints(kTargets, targets, N);
  if (mode != HeadMode::Backward) rmsnorm_forward<T>(k, xn, rstd, x, wn, N, C, eps);
  const int m = mode == HeadMode::Forward ? 0 : mode == HeadMode::Backward ? 2 : 1;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    const ops::ActIn<T> xr = xn + r0 * C;
    k.gemm().gemm(false, true, rows, V, C, T(1), xr, C, wout, C, T(0), logits, V);
    ce_rows(k, logits, rows, V, dt + r0, lse_buf + r0,
            mode == HeadMode::Backward ? static_cast<T*>(nullptr) : nll_buf + r0,
            static_cast<T*>(nullptr), m, dloss, 0);
    if (!grad) continue;
    if (dxn)
      k.gemm().gemm(false, false, rows, C, V, T(1), logits, V, wout, C, T(0), dxn + r0 * C, C);
    if (dwout) k.gemm().gemm(true, false, V, C, rows, T(1), logits, V, xr, C, T(1), dwout, C);
  }
  if (dxn) rmsnorm_backward<T>(k, dx, dwn, dxn, x, wn, rstd, N, C);
  if (mode == HeadMode::Backward) return 0.0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += targets[n] != ops::kIgnoreIndex;
  if (n_valid) *n_valid = count;
  return device_sum(k, nll_buf, static_cast<const T*>(nullptr), N, 2);
}

template <typename T>
double head_ce_forward(KernelContext<T>& k, ops::Act<T> xn, T* rstd, T* lse, T* token_nll,
                       int64_t* n_valid, ops::ActIn<T> x, const T* wn, const T* wout,
                       const int32_t* targets, int64_t N, int C, int V, double eps) {
  return head_ce<T>(k, HeadMode::Forward, nullptr, nullptr, nullptr, xn, rstd, lse, token_nll,
                    n_valid, x, wn, wout, targets, N, C, V, eps, 0.0);
}

template <typename T>
void head_ce_backward(KernelContext<T>& k, ops::Act<T> dx, T* dwn, T* dwout, ops::ActIn<T> x,
                      ops::ActIn<T> xn, const T* rstd, const T* lse, const T* wn, const T* wout,
                      const int32_t* targets, int64_t N, int C, int V, double dloss) {
  // (Backward reads xn and the statistics only.)
  const ops::Act<T> xn_read(const_cast<void*>(xn.raw()), xn.dtype());
  head_ce<T>(k, HeadMode::Backward, dx, dwn, dwout, xn_read, const_cast<T*>(rstd),
             const_cast<T*>(lse), nullptr, nullptr, x, wn, wout, targets, N, C, V, 0.0, dloss);
}

template <typename T>
double head_ce_forward_backward(KernelContext<T>& k, ops::Act<T> dx, T* dwn, T* dwout,
                                ops::Act<T> xn, T* rstd, int64_t* n_valid, ops::ActIn<T> x,
                                const T* wn, const T* wout, const int32_t* targets, int64_t N,
                                int C, int V, double eps, double dloss) {
  return head_ce<T>(k, HeadMode::ForwardBackward, dx, dwn, dwout, xn, rstd, nullptr, nullptr,
                    n_valid, x, wn, wout, targets, N, C, V, eps, dloss);
}

// The vocabulary-parallel head (ops/ops.def): this rank's V columns, global
// ids v0 ..; its caller combines the statistics across ranks between phases.
template <typename T>
void head_ce_shard_stats(KernelContext<T>& k, ops::Act<T> xn, T* rstd, T* lse, T* target_logit,
                         ops::ActIn<T> x, const T* wn, const T* wout, const int32_t* targets,
                         int64_t N, int C, int V, int64_t v0, double eps) {
  if (N == 0) return;
  const int64_t R = head_chunk_rows(N, V, k.head_chunk_rows());
  const ops::Act<T> logits = logits_chunk(k, R * V, x.dtype());
  const PinnedOperand<T> pin(k.gemm(), wout);
  const int32_t* dt = k.upload_ints(kTargets, targets, N);
  rmsnorm_forward<T>(k, xn, rstd, x, wn, N, C, eps);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    k.gemm().gemm(false, true, rows, V, C, T(1), xn + r0 * C, C, wout, C, T(0), logits, V);
    ce_rows(k, logits, rows, V, dt + r0, lse + r0, static_cast<T*>(nullptr), target_logit + r0, 0,
            0.0, v0);
  }
}

template <typename T>
double head_ce_shard_loss(KernelContext<T>& k, T* token_nll, int64_t* n_valid, const T* lse,
                          const T* target_logit, const int32_t* targets, int64_t N) {
  if (N == 0) {
    if (n_valid) *n_valid = 0;
    return 0.0;
  }
  T* nll = token_nll ? token_nll : static_cast<T*>(k.scratch(kNll, size_t(N) * sizeof(T)));
  const int32_t* dt = k.upload_ints(kTargets, targets, N);
  STRATA_LAUNCH(k_ce_nll<T>, blocks_for(N, 256), 256, 0, k.stream(), nll, lse, target_logit, dt, N,
                int(ops::kIgnoreIndex));
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += targets[n] != ops::kIgnoreIndex;
  if (n_valid) *n_valid = count;
  return device_sum(k, static_cast<const T*>(nll), static_cast<const T*>(nullptr), N, 2);
}

template <typename T>
void head_ce_shard_backward(KernelContext<T>& k, ops::Act<T> dxn, T* dwout, ops::ActIn<T> xn,
                            const T* lse, const T* wout, const int32_t* targets, int64_t N, int C,
                            int V, int64_t v0, double dloss) {
  if (N == 0) return;
  const int64_t R = head_chunk_rows(N, V, k.head_chunk_rows());
  const ops::Act<T> logits = logits_chunk(k, R * V, xn.dtype());
  const PinnedOperand<T> pin(k.gemm(), wout);
  const int32_t* dt = k.upload_ints(kTargets, targets, N);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    const ops::ActIn<T> xr = xn + r0 * C;
    k.gemm().gemm(false, true, rows, V, C, T(1), xr, C, wout, C, T(0), logits, V);
    ce_rows(k, logits, rows, V, dt + r0, const_cast<T*>(lse) + r0, static_cast<T*>(nullptr),
            static_cast<T*>(nullptr), 2, dloss, v0);
    if (dxn)
      k.gemm().gemm(false, false, rows, C, V, T(1), logits, V, wout, C, T(0), dxn + r0 * C, C);
    if (dwout) k.gemm().gemm(true, false, V, C, rows, T(1), logits, V, xr, C, T(1), dwout, C);
  }
}

template <typename T>
void head_logits(KernelContext<T>& k, T* logits, ops::Act<T> xn_scratch, ops::ActIn<T> x,
                 const T* wn, const T* wout, int64_t N, int C, int V, double eps) {
  if (N == 0) return;
  T* rstd = static_cast<T*>(k.scratch(kRstd, size_t(N) * sizeof(T)));
  rmsnorm_forward<T>(k, xn_scratch, rstd, x, wn, N, C, eps);
  k.gemm().gemm(false, true, N, V, C, T(1), xn_scratch, C, wout, C, T(0), logits, V);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
