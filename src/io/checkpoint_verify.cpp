// The values of a tensor read from a checkpoint (checkpoint_verify.h).
#include "io/checkpoint_verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/text.h"
#include "core/crc32c.h"

namespace strata {
namespace {

// Values are checksummed and checked for finiteness in blocks that stay in
// the L1 cache between the two passes.
constexpr int64_t kBlock = 4096;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Whether the block holds only finite floats (exponent bits not all ones):
// written so that the compiler vectorises it.
bool all_finite(const float* v, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, v + i, 4);
    bad |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

// Weights and moments are finite in any checkpoint strata writes: a NaN or
// inf would turn every output into garbage without an error. A flipped bit
// is caught by the checksum even where the value stays finite.
void verify_values(const float* v, int64_t n, bool checked, uint32_t stored,
                   const std::string& file, const std::string& what) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int parts = 1;
#ifdef _OPENMP
  constexpr int64_t kParallelFrom = int64_t(1) << 20;
  if (n >= kParallelFrom && !omp_in_parallel())
    parts = int(std::min<int64_t>(omp_get_max_threads(), blocks));
#endif
  std::vector<uint32_t> crcs(size_t(parts), 0);
  std::vector<int64_t> bad(size_t(parts), -1);
#pragma omp parallel for num_threads(parts) schedule(static, 1) if (parts > 1)
  for (int p = 0; p < parts; ++p) {
    uint32_t crc = 0;
    int64_t first = -1;
    for (int64_t b = blocks * p / parts; b < blocks * (p + 1) / parts; ++b) {
      const int64_t i = b * kBlock, m = std::min(kBlock, n - i);
      if (checked) crc = crc32c(crc, v + i, size_t(m) * sizeof(float));
      if (first < 0 && !all_finite(v + i, m)) [[unlikely]]
        for (int64_t j = i; j < i + m && first < 0; ++j)
          if (!std::isfinite(v[j])) first = j;
    }
    crcs[size_t(p)] = crc;
    bad[size_t(p)] = first;
  }
  uint32_t crc = crcs[0];
  for (int p = 1; p < parts; ++p) {
    const int64_t begin = blocks * p / parts * kBlock;
    const int64_t end = std::min(n, blocks * (p + 1) / parts * kBlock);
    crc = crc32c_combine(crc, crcs[size_t(p)], size_t(end - begin) * sizeof(float));
  }
  int64_t first_bad = -1;
  for (int p = 0; p < parts && first_bad < 0; ++p) first_bad = bad[size_t(p)];
  if (checked && crc != stored) [[unlikely]]
    fail_one_line("checkpoint ", file, ": ", what,
                  " fails its checksum (the file is corrupt: CRC-32C of the values ",
                  hex32(crc), ", stored ", hex32(stored), ")");
  if (first_bad >= 0) [[unlikely]]
    fail_one_line("checkpoint ", file, ": ", what, " holds a non-finite value (", v[first_bad],
                  " at index ", first_bad, ")");
}

}  // namespace strata
