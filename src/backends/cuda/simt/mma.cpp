// The warp-level matrix instructions of the tensor-core kernels, emulated
// (simt.h: mma_m16n8k16_bf16, ldmatrix_x4). Each gathers the 32 lanes'
// fragments into whole matrices by the PTX ISA's layouts, computes, and
// scatters the result back by the same layouts, so a kernel that puts an
// element in the wrong lane's register computes the wrong numbers here as it
// would on a GPU.
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cuda/simt/simt.h"

namespace strata::simt {
namespace {

float bf16_value(uint16_t h) {
  const uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t half_of(uint32_t reg, int h) { return uint16_t(reg >> (16 * h)); }
uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

struct MmaOperands {
  float d[4];
  uint32_t a[4];
  uint32_t b[2];
};
static_assert(sizeof(MmaOperands) <= kWarpMatrixBytes);

void mma_all_lanes(const unsigned char* in, unsigned char* out) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    MmaOperands o;
    std::memcpy(&o, in + l * kWarpMatrixBytes, sizeof o);
    const int g = l / 4, t = l % 4;
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        A[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + h] = bf16_value(half_of(o.a[r], h));
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) B[2 * t + 8 * r + h][g] = bf16_value(half_of(o.b[r], h));
    for (int i = 0; i < 4; ++i) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = o.d[i];
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    float d[4];
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float s = C[row][col];
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      d[i] = s;
    }
    std::memcpy(out + l * kWarpMatrixBytes, d, sizeof d);
  }
}

template <bool kTrans>
void ldmatrix_all_lanes(const unsigned char* in, unsigned char* out) {
  uint16_t M[4][8][8];
  for (int l = 0; l < 32; ++l) {
    const void* row;
    std::memcpy(&row, in + l * kWarpMatrixBytes, sizeof row);
    std::memcpy(M[l / 8][l % 8], row, 16);
  }
  for (int l = 0; l < 32; ++l) {
    uint32_t r[4];
    for (int i = 0; i < 4; ++i) {
      const int a = l / 4, b = 2 * (l % 4);
      r[i] = kTrans ? pack(M[i][b][a], M[i][b + 1][a]) : pack(M[i][a][b], M[i][a][b + 1]);
    }
    std::memcpy(out + l * kWarpMatrixBytes, r, sizeof r);
  }
}

}  // namespace

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  MmaOperands o;
  std::memcpy(o.d, d, sizeof o.d);
  std::memcpy(o.a, a, sizeof o.a);
  std::memcpy(o.b, b, sizeof o.b);
  warp_matrix("mma.sync.m16n8k16.bf16", &o, sizeof o, d, 4 * sizeof(float), mma_all_lanes);
}

void ldmatrix_x4(uint32_t r[4], const void* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    thread_fail("ldmatrix: lane " + std::to_string(lane_id()) +
                " gives a row address that is not 16-byte aligned");
  const char* op = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
  warp_matrix(op, &row, sizeof row, r, 4 * sizeof(uint32_t),
              trans ? ldmatrix_all_lanes<true> : ldmatrix_all_lanes<false>);
}

}  // namespace strata::simt
