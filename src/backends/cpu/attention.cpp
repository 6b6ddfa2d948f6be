// Causal grouped-query attention: shape checks, scratch memory and the choice
// of kernel instruction set (attention_kernel.h). Memory-efficient: scores
// are computed in tiles of query rows and never stored; only the per-row
// log-sum-exp is kept for backward, which recomputes the probabilities tile
// by tile. The kernels give the same bits at either width (tests/ops_test.cpp
// checks it where AVX-512 exists).
#include <omp.h>

#include "backends/cpu/attention_kernel.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"
#include "core/cpu.h"
#include "core/error.h"

namespace strata::cpu {
namespace {

void check_shape(int Hq, int Hkv, int D) {
  STRATA_CHECK(Hq > 0 && Hkv > 0 && Hq % Hkv == 0, "attention: ", Hq,
               " query heads must be a multiple of ", Hkv, " key/value heads");
  STRATA_CHECK(D > 0, "attention: head dimension must be positive");
}

}  // namespace

// bf16 storage runs the fp32 kernels on fp32 copies (Staged, storage.h).
template <typename T>
void attention_forward(Act<T> out_, T* lse, ActIn<T> qkv_, int B, int T_, int Hq, int Hkv, int D) {
  check_shape(Hq, Hkv, D);
  struct Tag {};
  const int64_t N = int64_t(B) * T_;
  const StagedIn<T, 2, Tag> qkv(qkv_, N * (Hq + 2 * Hkv) * D);
  const Staged<T, 3, Tag> out(out_, N * Hq * D, false);
  T* keys = workspace<T, 1, Tag>(size_t(attention::forward_keys(B, T_, Hkv, D)));
  const int64_t per_thread = attention::forward_per_thread(T_, D);
  T* scratch = workspace<T, 0, Tag>(size_t(omp_get_max_threads() * per_thread));
#ifdef STRATA_AVX512_VARIANT  // the portable build: AVX-512 kernels where the CPU has them
  if (cpu_level() == CpuLevel::Avx512)
    return avx512::attention_forward_kernel(out.get(), lse, qkv.get(), B, T_, Hq, Hkv, D, keys,
                                            scratch, per_thread);
#endif
  attention_forward_kernel(out.get(), lse, qkv.get(), B, T_, Hq, Hkv, D, keys, scratch, per_thread);
}

template <typename T>
void attention_backward(Act<T> dqkv_, ActIn<T> dout_, ActIn<T> qkv_, ActIn<T> out_, const T* lse,
                        int B, int T_, int Hq, int Hkv, int D) {
  check_shape(Hq, Hkv, D);
  struct Tag {};
  const int64_t N = int64_t(B) * T_, QKV = int64_t(Hq + 2 * Hkv) * D, Q = int64_t(Hq) * D;
  const StagedIn<T, 1, Tag> dout(dout_, N * Q);
  const StagedIn<T, 2, Tag> qkv(qkv_, N * QKV);
  const StagedIn<T, 3, Tag> out(out_, N * Q);
  const Staged<T, 4, Tag> dqkv(dqkv_, N * QKV, false);
  const int64_t per_thread = attention::backward_per_thread(T_, D);
  T* scratch = workspace<T, 0, Tag>(size_t(omp_get_max_threads() * per_thread));
#ifdef STRATA_AVX512_VARIANT  // the portable build: AVX-512 kernels where the CPU has them
  if (cpu_level() == CpuLevel::Avx512)
    return avx512::attention_backward_kernel(dqkv.get(), dout.get(), qkv.get(), out.get(), lse, B,
                                             T_, Hq, Hkv, D, scratch, per_thread);
#endif
  attention_backward_kernel(dqkv.get(), dout.get(), qkv.get(), out.get(), lse, B, T_, Hq, Hkv, D,
                            scratch, per_thread);
}

STRATA_CPU_INSTANTIATE(attention_forward)
STRATA_CPU_INSTANTIATE(attention_backward)

}  // namespace strata::cpu
