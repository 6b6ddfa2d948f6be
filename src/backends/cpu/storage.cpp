// Conversions between fp32 and bf16 activations (storage.h).
#include "backends/cpu/storage.h"

#include <algorithm>

#include "backends/cpu/simd.h"

namespace strata::cpu {
namespace {

template <typename D, typename S>
void convert(D* dst, const S* src, int64_t n) {
  constexpr int64_t kBlock = 4096;
#pragma omp parallel for schedule(static) if (n > 8 * kBlock)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int64_t i = b;
    for (; i + simd::kFloats <= e; i += simd::kFloats)
      simd::store(dst + i, simd::load_as<simd::VecF>(src + i));
    for (; i < e; ++i) simd::store(dst + i, simd::load_as<float>(src + i));
  }
}

}  // namespace

void widen(float* dst, const bf16* src, int64_t n) { convert(dst, src, n); }
void narrow(bf16* dst, const float* src, int64_t n) { convert(dst, src, n); }

}  // namespace strata::cpu
