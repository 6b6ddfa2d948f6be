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

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv, int D) {
  check_shape(Hq, Hkv, D);
  struct Tag {};
  T* keys = workspace<T, 1, Tag>(size_t(attention::forward_keys(B, T_, Hkv, D)));
  const int64_t per_thread = attention::forward_per_thread(T_, D);
  T* scratch = workspace<T, 0, Tag>(size_t(omp_get_max_threads() * per_thread));
#ifdef STRATA_AVX512_VARIANT  // the portable build: AVX-512 kernels where the CPU has them
  if (cpu_level() == CpuLevel::Avx512)
    return avx512::attention_forward_kernel(out, lse, qkv, B, T_, Hq, Hkv, D, keys, scratch,
                                            per_thread);
#endif
  attention_forward_kernel(out, lse, qkv, B, T_, Hq, Hkv, D, keys, scratch, per_thread);
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int Hq, int Hkv, int D) {
  check_shape(Hq, Hkv, D);
  struct Tag {};
  const int64_t per_thread = attention::backward_per_thread(T_, D);
  T* scratch = workspace<T, 0, Tag>(size_t(omp_get_max_threads() * per_thread));
#ifdef STRATA_AVX512_VARIANT  // the portable build: AVX-512 kernels where the CPU has them
  if (cpu_level() == CpuLevel::Avx512)
    return avx512::attention_backward_kernel(dqkv, dout, qkv, out, lse, B, T_, Hq, Hkv, D, scratch,
                                             per_thread);
#endif
  attention_backward_kernel(dqkv, dout, qkv, out, lse, B, T_, Hq, Hkv, D, scratch, per_thread);
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int, int, int, int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         const double*, int, int, int, int, int);

}  // namespace strata::cpu
