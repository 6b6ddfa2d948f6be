// CRC-32C (crc32c.h). The register below is the raw, reflected CRC state
// (no initial or final inversion); crc32c() adds the inversions.
#include "core/crc32c.h"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#define STRATA_CRC32C_HW 1
#elif defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define STRATA_CRC32C_HW 1
#endif

namespace strata {
namespace {

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

#if !defined(STRATA_CRC32C_HW)
constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

// Slicing-by-8 tables: t[k][b] is the register after byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};

const Tables& tables() {
  static const Tables tab;
  return tab;
}
#endif

inline uint32_t step_byte(uint32_t r, unsigned char b) {
#if defined(__SSE4_2__)
  return _mm_crc32_u8(r, b);
#elif defined(__ARM_FEATURE_CRC32)
  return __crc32cb(r, b);
#else
  return (r >> 8) ^ tables().t[0][(r ^ b) & 0xff];
#endif
}

inline uint32_t step_word(uint32_t r, uint64_t w) {
#if defined(__SSE4_2__)
  return uint32_t(_mm_crc32_u64(r, w));
#elif defined(__ARM_FEATURE_CRC32)
  return __crc32cd(r, w);
#else
  const auto& t = tables().t;
  w ^= r;
  return t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
         t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
         t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
#endif
}

// One stream: the register after `n` bytes from state r.
uint32_t run(uint32_t r, const unsigned char* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) r = step_word(r, load64(p));
  for (; n > 0; --n, ++p) r = step_byte(r, *p);
  return r;
}

#if defined(STRATA_CRC32C_HW)
// Three streams over blocks of 3 x kStream bytes. The register is linear in
// its starting state once the data's own part is split off: run(s, A B) =
// shift_|B|(run(s, A)) ^ run(0, B), where shift_n(x) = run(x, n zero bytes)
// is a linear map of x, applied here with four 256-entry tables.
constexpr size_t kStream = 8192;

struct Shift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  explicit Shift(size_t zeros) {
    static const unsigned char kZeros[kStream] = {};
    uint32_t basis[32];
    for (int j = 0; j < 32; ++j) {
      uint32_t r = 1u << j;
      for (size_t left = zeros; left > 0; left -= std::min(left, kStream))
        r = run(r, kZeros, std::min(left, kStream));
      basis[j] = r;
    }
    for (int i = 0; i < 4; ++i)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int k = 0; k < 8; ++k)
          if (b & (1u << k)) v ^= basis[8 * i + k];
        t[size_t(i)][b] = v;
      }
  }
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 0xff] ^ t[1][(x >> 8) & 0xff] ^ t[2][(x >> 16) & 0xff] ^ t[3][x >> 24];
  }
};

uint32_t run_blocks(uint32_t r, const unsigned char* p, size_t blocks) {
  static const Shift one(kStream), two(2 * kStream);
  for (; blocks > 0; --blocks, p += 3 * kStream) {
    uint32_t a = r, b = 0, c = 0;
    const unsigned char* q = p;
    for (size_t i = 0; i < kStream; i += 8, q += 8) {
      a = step_word(a, load64(q));
      b = step_word(b, load64(q + kStream));
      c = step_word(c, load64(q + 2 * kStream));
    }
    r = two(a) ^ one(b) ^ c;
  }
  return r;
}
#endif

// GF(2) 32 x 32 matrices for crc32c_combine, as the images of the 32 bits.
using Matrix = std::array<uint32_t, 32>;

uint32_t apply(const Matrix& m, uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; v != 0; ++i, v >>= 1)
    if (v & 1) r ^= m[size_t(i)];
  return r;
}

Matrix square(const Matrix& m) {
  Matrix r{};
  for (size_t i = 0; i < 32; ++i) r[i] = apply(m, m[i]);
  return r;
}

}  // namespace

// crc(a b) = shift_|b|(crc(a)) ^ crc(b): the inversions at both ends cancel
// (shift is linear), leaving a's CRC moved past |b| zero bytes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
  Matrix bit{};  // one zero bit into the reflected register
  bit[0] = 0x82F63B78u;
  for (size_t i = 1; i < 32; ++i) bit[i] = 1u << (i - 1);
  Matrix power = square(square(square(bit)));  // one zero byte
  for (size_t n = len_b; n != 0; n >>= 1) {
    if (n & 1) crc_a = apply(power, crc_a);
    if (n > 1) power = square(power);
  }
  return crc_a ^ crc_b;
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t r = ~crc;
#if defined(STRATA_CRC32C_HW)
  const size_t blocks = n / (3 * kStream);
  r = run_blocks(r, p, blocks);
  p += blocks * 3 * kStream;
  n -= blocks * 3 * kStream;
#endif
  return ~run(r, p, n);
}

}  // namespace strata
