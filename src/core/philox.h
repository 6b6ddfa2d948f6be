// Philox-4x32-10 counter-based random numbers (Salmon et al., SC'11).
// A draw is a pure function of (key, counter): the same (seed, step, layer,
// sample) gives the same numbers on every rank, thread and backend, and resuming
// a run needs no generator state beyond the step.
#pragma once

#include <cmath>
#include <cstdint>

namespace strata {

struct Philox4x32 {
  uint32_t v[4];
};

inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(M0) * ctr.v[0];
    const uint64_t p1 = uint64_t(M1) * ctr.v[2];
    ctr = Philox4x32{{uint32_t(p1 >> 32) ^ ctr.v[1] ^ k0, uint32_t(p1),
                      uint32_t(p0 >> 32) ^ ctr.v[3] ^ k1, uint32_t(p0)}};
    k0 += W0;
    k1 += W1;
  }
  return ctr;
}

// Uniform in (0, 1): 24 random bits, never exactly 0 or 1.
inline float uint_to_unit_float(uint32_t x) {
  return (float(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
}
// Uniform in (0, 1) with 53 bits from two words.
inline double uints_to_unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (uint64_t(hi) << 21) ^ uint64_t(lo >> 11);
  return (double(bits & ((uint64_t(1) << 53) - 1)) + 0.5) * (1.0 / 9007199254740992.0);
}

// A stream of draws identified by a 64-bit seed and two 32-bit coordinates
// (e.g. purpose and tensor index); element i of the stream is a pure function
// of (seed, a, b, i).
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint32_t a, uint32_t b)
      : k0_(uint32_t(seed)), k1_(uint32_t(seed >> 32)), a_(a), b_(b) {}

  // Four raw 32-bit words for block `i`.
  Philox4x32 block(uint64_t i) const {
    return philox4x32_10(Philox4x32{{uint32_t(i), uint32_t(i >> 32), a_, b_}}, k0_, k1_);
  }
  // Uniform (0,1) number number i of the stream.
  double uniform(uint64_t i) const {
    const Philox4x32 r = block(i);
    return uints_to_unit_double(r.v[0], r.v[1]);
  }
  // Standard normal number i of the stream (Box-Muller on one block).
  double normal(uint64_t i) const {
    const Philox4x32 r = block(i);
    const double u1 = uints_to_unit_double(r.v[0], r.v[1]);
    const double u2 = uints_to_unit_double(r.v[2], r.v[3]);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint32_t k0_, k1_, a_, b_;
};

}  // namespace strata
