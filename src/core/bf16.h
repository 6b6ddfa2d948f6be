// bfloat16 bits: rounding an fp32 value to nearest even (NaN kept quiet,
// infinities and signed zeros kept) and widening, which is exact. One rule
// for every layer: ops::bf16 (ops/dtype.h) stores these bits, the
// communicators sum them (parallel/comm.h).
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

inline uint16_t bf16_round_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);  // NaN
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_widen_bits(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

}  // namespace strata
