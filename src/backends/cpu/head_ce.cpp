// Fused final RMSNorm + LM head + cross-entropy, chunked over tokens so the
// [N, V] logits never exist: each chunk of rows gets its logits from one GEMM
// into scratch, is reduced to (lse, loss) and, when a gradient is wanted,
// turned in place into dlogits = (softmax - onehot) * dloss, which two more
// GEMMs push into dxn and dwout before the next chunk overwrites the scratch.
// The vocabulary-parallel head runs the same chunks in phases, so that its
// caller can combine the ranks' statistics in between.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {
namespace {

int64_t g_chunk_override = 0;
struct Tag {};  // the head's workspaces, shared by all its entry points

// Rows per chunk: about 64 MiB of float logits, and at least 256 rows: the
// logits GEMM loses a third of its speed below ~512 rows (measured with
// V = 32000, C = 288), while the softmax passes are cheap either way.
int64_t chunk_rows(int64_t N, int V) {
  if (g_chunk_override > 0) return std::min(g_chunk_override, N);

  int64_t r = (int64_t(1) << 24) / std::max(V, 1);
  r = std::clamp<int64_t>(r, 256, 4096) / 16 * 16;
  return std::min(r, N);
}

enum class Mode { Forward, Backward, ForwardBackward };

// In bf16 storage the logits are bf16, as on the kernel backends
// (cuda/kernels/head_ce.cuh): each row is rounded to bf16 after the logits
// GEMM and again once it holds the gradient, while it is in cache.
template <typename T>
void round_row(T* l, int V, bool bf16) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) round_to_bf16_serial(l, l, V);
}

// Processes `rows` rows of logits in place. Forward: writes lse and nll.
// Backward (lse given) and ForwardBackward: leaves dlogits in `logits`.
template <typename T>
void chunk_softmax(Mode mode, T* logits, int64_t rows, int V, const int32_t* targets, T* lse,
                   T* nll, double dloss, bool bf16) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* l = logits + r * V;
    const int32_t y = targets[r];
    const bool valid = y != kIgnoreIndex;
    round_row(l, V, bf16);
    if (mode == Mode::Backward) {
      if (!valid) {
        std::memset(l, 0, sizeof(T) * V);
        continue;
      }
      const T k = T(dloss);
      scaled_exp_shift(l, l, V, lse[r], k);
      l[y] -= k;
      round_row(l, V, bf16);
      continue;
    }
    const T m = row_max(l, V);
    const T ly = valid ? l[y] : T(0);
    // ForwardBackward keeps exp(l - m) so the gradient needs no second exp.
    const T sum = exp_shift_sum(mode == Mode::Forward ? nullptr : l, l, V, m);
    const T lr = m + std::log(sum);
    lse[r] = lr;
    nll[r] = valid ? lr - ly : T(0);
    if (mode == Mode::Forward) continue;
    if (!valid) {
      std::memset(l, 0, sizeof(T) * V);
      continue;
    }
    const T k = T(dloss) / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) l[j] *= k;
    l[y] -= T(dloss);
    round_row(l, V, bf16);
  }
}

template <typename T>
double run(Mode mode, T* dx, T* dwn, T* dwout, T* xn, T* rstd, T* lse, T* token_nll,
           int64_t* n_valid, const T* x, const T* wn, const T* wout, const int32_t* targets,
           int64_t N, int C, int V, double eps, double dloss, bool bf16) {
  if (N == 0) {
    if (n_valid) *n_valid = 0;
    return 0.0;
  }
  const int64_t R = chunk_rows(N, V);
  T* logits = workspace<T, 0, Tag>(size_t(R) * V);
  const bool grad = mode != Mode::Forward;
  T* dxn = grad && (dx || dwn) ? workspace<T, 1, Tag>(size_t(N) * C) : nullptr;
  T* lse_buf = lse ? lse : workspace<T, 2, Tag>(size_t(N));
  T* nll_buf = token_nll ? token_nll : workspace<T, 3, Tag>(size_t(N));

  if (mode != Mode::Backward) rmsnorm_forward<T>(xn, rstd, x, wn, N, C, eps);

  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    const T* xr = xn + r0 * C;
    gemm<T>(false, true, rows, V, C, T(1), xr, C, wout, C, T(0), logits, V);
    chunk_softmax<T>(mode, logits, rows, V, targets + r0, lse_buf + r0, nll_buf + r0, dloss, bf16);
    if (!grad) continue;
    const Bf16OperandReuse reuse;  // bf16: the gradient chunk is converted once for both GEMMs
    if (dxn) gemm<T>(false, false, rows, C, V, T(1), logits, V, wout, C, T(0), dxn + r0 * C, C);
    if (dwout) gemm<T>(true, false, V, C, rows, T(1), logits, V, xr, C, T(1), dwout, C);
  }
  if (dxn) rmsnorm_backward<T>(dx, dwn, dxn, x, wn, rstd, N, C);
  if (mode == Mode::Backward) return 0.0;
  // Fixed-order sum: the loss is bit-identical run to run.
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] != kIgnoreIndex) {
      total += double(nll_buf[n]);
      ++count;
    }
  if (n_valid) *n_valid = count;
  return total;
}

}  // namespace

void set_head_ce_chunk_rows(int64_t rows) { g_chunk_override = rows > 0 ? rows : 0; }

namespace {

template <typename T>
double ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, const T* x, const T* wn,
                  const T* wout, const int32_t* targets, int64_t N, int C, int V, double eps,
                  bool bf16) {
  return run<T>(Mode::Forward, nullptr, nullptr, nullptr, xn, rstd, lse, token_nll, n_valid, x, wn,
                wout, targets, N, C, V, eps, 0.0, bf16);
}

template <typename T>
void ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd, const T* lse,
                 const T* wn, const T* wout, const int32_t* targets, int64_t N, int C, int V,
                 double dloss, bool bf16) {
  run<T>(Mode::Backward, dx, dwn, dwout, const_cast<T*>(xn), const_cast<T*>(rstd),
         const_cast<T*>(lse), nullptr, nullptr, x, wn, wout, targets, N, C, V, 0.0, dloss, bf16);
}

template <typename T>
double ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd, int64_t* n_valid, const T* x,
                           const T* wn, const T* wout, const int32_t* targets, int64_t N, int C,
                           int V, double eps, double dloss, bool bf16) {
  return run<T>(Mode::ForwardBackward, dx, dwn, dwout, xn, rstd, nullptr, nullptr, n_valid, x, wn,
                wout, targets, N, C, V, eps, dloss, bf16);
}

// The vocabulary-parallel head (ops/ops.def): this rank's V columns, global
// ids v0 ... The caller combines the statistics across ranks between the
// phases.
template <typename T>
void shard_stats(T* xn, T* rstd, T* lse, T* target_logit, const T* x, const T* wn, const T* wout,
                 const int32_t* targets, int64_t N, int C, int V, int64_t v0, double eps,
                 bool bf16) {
  if (N == 0) return;
  const int64_t R = chunk_rows(N, V);
  T* logits = workspace<T, 0, Tag>(size_t(R) * V);
  rmsnorm_forward<T>(xn, rstd, x, wn, N, C, eps);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    gemm<T>(false, true, rows, V, C, T(1), xn + r0 * C, C, wout, C, T(0), logits, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T* l = logits + r * V;
      round_row(l, V, bf16);
      const int32_t y = targets[r0 + r];
      const T m = row_max(l, V);
      lse[r0 + r] = m + std::log(exp_shift_sum<T>(nullptr, l, V, m));
      const bool owned = y != kIgnoreIndex && y >= v0 && y < v0 + V;
      target_logit[r0 + r] = owned ? l[y - v0] : T(0);
    }
  }
}

template <typename T>
void shard_backward(T* dxn, T* dwout, const T* xn, const T* lse, const T* wout,
                    const int32_t* targets, int64_t N, int C, int V, int64_t v0, double dloss,
                    bool bf16) {
  if (N == 0) return;
  const int64_t R = chunk_rows(N, V);
  T* logits = workspace<T, 0, Tag>(size_t(R) * V);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    const T* xr = xn + r0 * C;
    gemm<T>(false, true, rows, V, C, T(1), xr, C, wout, C, T(0), logits, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T* l = logits + r * V;
      const int32_t y = targets[r0 + r];
      if (y == kIgnoreIndex) {
        std::memset(l, 0, sizeof(T) * V);
        continue;
      }
      round_row(l, V, bf16);
      const T k = T(dloss);
      scaled_exp_shift(l, l, V, lse[r0 + r], k);
      if (y >= v0 && y < v0 + V) l[y - v0] -= k;
      round_row(l, V, bf16);
    }
    const Bf16OperandReuse reuse;  // bf16: the gradient chunk is converted once for both GEMMs
    if (dxn) gemm<T>(false, false, rows, C, V, T(1), logits, V, wout, C, T(0), dxn + r0 * C, C);
    if (dwout) gemm<T>(true, false, V, C, rows, T(1), logits, V, xr, C, T(1), dwout, C);
  }
}

template <typename T>
void logits_of(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout, int64_t N, int C,
               int V, double eps) {
  struct LogitsTag {};
  T* rstd = workspace<T, 0, LogitsTag>(size_t(N));
  rmsnorm_forward<T>(xn_scratch, rstd, x, wn, N, C, eps);
  gemm<T>(false, true, N, V, C, T(1), xn_scratch, C, wout, C, T(0), logits, V);
}

}  // namespace

// bf16 storage runs the fp32 code above on fp32 copies (Staged, storage.h).
namespace {
struct StageTag {};
}  // namespace

template <typename T>
double head_ce_forward(Act<T> xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, ActIn<T> x,
                       const T* wn, const T* wout, const int32_t* targets, int64_t N, int C, int V,
                       double eps) {
  const StagedIn<T, 0, StageTag> xs(x, N * C);
  const Staged<T, 1, StageTag> xns(xn, N * C, false);
  return ce_forward(xns.get(), rstd, lse, token_nll, n_valid, xs.get(), wn, wout, targets, N, C, V,
                    eps, x.dtype() == ops::Dtype::BF16);
}

template <typename T>
void head_ce_backward(Act<T> dx, T* dwn, T* dwout, ActIn<T> x, ActIn<T> xn, const T* rstd,
                      const T* lse, const T* wn, const T* wout, const int32_t* targets, int64_t N,
                      int C, int V, double dloss) {
  const StagedIn<T, 0, StageTag> xs(x, N * C);
  const StagedIn<T, 1, StageTag> xns(xn, N * C);
  const Staged<T, 2, StageTag> dxs(dx, N * C);  // dx +=: read in, rounded back
  ce_backward(dxs.get(), dwn, dwout, xs.get(), xns.get(), rstd, lse, wn, wout, targets, N, C, V,
              dloss, x.dtype() == ops::Dtype::BF16);
}

template <typename T>
double head_ce_forward_backward(Act<T> dx, T* dwn, T* dwout, Act<T> xn, T* rstd, int64_t* n_valid,
                                ActIn<T> x, const T* wn, const T* wout, const int32_t* targets,
                                int64_t N, int C, int V, double eps, double dloss) {
  const StagedIn<T, 0, StageTag> xs(x, N * C);
  const Staged<T, 1, StageTag> xns(xn, N * C, false);
  const Staged<T, 2, StageTag> dxs(dx, N * C);
  return ce_forward_backward(dxs.get(), dwn, dwout, xns.get(), rstd, n_valid, xs.get(), wn, wout,
                             targets, N, C, V, eps, dloss, x.dtype() == ops::Dtype::BF16);
}

template <typename T>
void head_ce_shard_stats(Act<T> xn, T* rstd, T* lse, T* target_logit, ActIn<T> x, const T* wn,
                         const T* wout, const int32_t* targets, int64_t N, int C, int V, int64_t v0,
                         double eps) {
  const StagedIn<T, 0, StageTag> xs(x, N * C);
  const Staged<T, 1, StageTag> xns(xn, N * C, false);
  shard_stats(xns.get(), rstd, lse, target_logit, xs.get(), wn, wout, targets, N, C, V, v0, eps,
              x.dtype() == ops::Dtype::BF16);
}

template <typename T>
void head_ce_shard_backward(Act<T> dxn, T* dwout, ActIn<T> xn, const T* lse, const T* wout,
                            const int32_t* targets, int64_t N, int C, int V, int64_t v0,
                            double dloss) {
  const StagedIn<T, 1, StageTag> xns(xn, N * C);
  const Staged<T, 2, StageTag> dxns(dxn, N * C, false);
  shard_backward(dxns.get(), dwout, xns.get(), lse, wout, targets, N, C, V, v0, dloss,
                 xn.dtype() == ops::Dtype::BF16);
}

template <typename T>
void head_logits(T* logits, Act<T> xn_scratch, ActIn<T> x, const T* wn, const T* wout, int64_t N,
                 int C, int V, double eps) {
  const StagedIn<T, 0, StageTag> xs(x, N * C);
  const Staged<T, 1, StageTag> xns(xn_scratch, N * C, false);
  logits_of(logits, xns.get(), xs.get(), wn, wout, N, C, V, eps);
}

template <typename T>
double head_ce_shard_loss(T* token_nll, int64_t* n_valid, const T* lse, const T* target_logit,
                          const int32_t* targets, int64_t N) {
  // Fixed-order sum: the loss is bit-identical run to run.
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    const bool valid = targets[n] != kIgnoreIndex;
    const T nll = valid ? lse[n] - target_logit[n] : T(0);
    if (token_nll) token_nll[n] = nll;
    if (!valid) continue;
    total += double(nll);
    ++count;
  }
  if (n_valid) *n_valid = count;
  return total;
}

STRATA_CPU_INSTANTIATE(head_ce_forward)
STRATA_CPU_INSTANTIATE(head_ce_backward)
STRATA_CPU_INSTANTIATE(head_ce_forward_backward)
STRATA_CPU_INSTANTIATE(head_ce_shard_stats)
STRATA_CPU_INSTANTIATE(head_ce_shard_loss)
STRATA_CPU_INSTANTIATE(head_ce_shard_backward)
STRATA_CPU_INSTANTIATE(head_logits)

}  // namespace strata::cpu
