// Kernels of the GEMM engines (cuda_backend.cu's cuBLASLt engine, the SIMT
// build's CPU GEMM stand-in): bf16 rounding of operands, packing a strided
// block, C *= beta for a GEMM with K = 0, and strata's own tiled GEMM, which
// both engines run for the operands cuBLASLt is not given (gemm_engine.h).
// Templates, like every kernel here, so a header can define them in several
// units.
#pragma once

#include "backends/cuda/kernels/common.cuh"
#include "ops/dtype.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// dst[i] = bfloat16 bits of src[i] (cuBLASLt's bf16 operands).
template <typename F = float>
STRATA_GLOBAL void k_to_bf16(uint16_t* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) dst[i] = bf16_bits(src[i]);
}

// dst[i] = the float value of bfloat16 bits src[i] (exact).
template <typename F = float>
STRATA_GLOBAL void k_from_bf16(F* dst, const uint16_t* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const uint32_t bits = uint32_t(src[i]) << 16;
    memcpy(dst + i, &bits, 4);
  }
}

// dst[i] = src[i] rounded to bfloat16, kept as float (SIMT GEMM stand-in).
template <typename F = float>
STRATA_GLOBAL void k_round_bf16(F* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const uint32_t bits = uint32_t(bf16_bits(src[i])) << 16;
    memcpy(dst + i, &bits, 4);
  }
}

// x rounded to bfloat16 (the fallback GEMM's bf16 operands); double is never
// rounded (bf16 GEMMs are float only).
STRATA_DEVICE float gemm_round_bf16(float x) {
  const uint32_t bits = uint32_t(bf16_bits(x)) << 16;
  float r;
  memcpy(&r, &bits, 4);
  return r;
}
STRATA_DEVICE double gemm_round_bf16(double x) { return x; }

// A rows x cols block of a matrix with leading dimension ld, copied compact.
template <typename T>
STRATA_GLOBAL void k_pack(T* dst, const T* src, int64_t rows, int64_t cols, int64_t ld) {
  STRATA_GRID_LOOP(i, rows * cols) dst[i] = src[(i / cols) * ld + i % cols];
}

// C[r, c] *= beta over an M x N block with leading dimension ld (a GEMM with
// K = 0); beta 0 writes zeros (no NaN from uninitialised memory).
template <typename T>
STRATA_GLOBAL void k_scale_matrix(T* C, int64_t M, int64_t N, int64_t ld, T beta) {
  STRATA_GRID_LOOP(i, M * N) {
    T* c = C + (i / N) * ld + i % N;
    *c = beta == T(0) ? T(0) : *c * beta;
  }
}

// The fallback GEMM, C = alpha * op(A) op(B) + beta * C (gemm_engine.h's
// convention, any transposes, leading dimensions and alignment): a 16 x 16
// block computes a 16 x 16 tile of C, staging 16-wide slices of op(A) and
// op(B) in shared memory (each loaded along its stored rows, so the global
// reads are coalesced for either transpose; rows padded by one against bank
// conflicts). One thread per element of C accumulates in T, over k in order:
// fp32 accumulation for float (bf16: operands rounded to bfloat16 as they are
// staged, cuBLASLt's bf16 numerics), double for double. beta 0 never reads C,
// as in cuBLAS. The grid's y dimension strides over row tiles past 65535.
constexpr int kGemmTile = 16;
constexpr int kGemmThreads = kGemmTile * kGemmTile;
STRATA_LAUNCH_BOUNDS(k_gemm_tiled, kGemmThreads);
template <typename T>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_gemm_tiled) void k_gemm_tiled(bool ta, bool tb, int64_t M,
                                                               int64_t N, int64_t K, T alpha,
                                                               const T* A, int64_t lda, const T* B,
                                                               int64_t ldb, T beta, T* C,
                                                               int64_t ldc, bool bf16) {
  __shared__ T as[kGemmTile][kGemmTile + 1];  // as[r][k] = op(A)[row0 + r][k0 + k]
  __shared__ T bs[kGemmTile][kGemmTile + 1];  // bs[k][c] = op(B)[k0 + k][col0 + c]
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t col0 = int64_t(blockIdx.x) * kGemmTile;
  for (int64_t row0 = int64_t(blockIdx.y) * kGemmTile; row0 < M;
       row0 += int64_t(gridDim.y) * kGemmTile) {  // uniform over the block
    T acc = 0;
    for (int64_t k0 = 0; k0 < K; k0 += kGemmTile) {
      // Thread (tx, ty) loads stored element [.. + ty][.. + tx] of each operand.
      T a = 0, b = 0;
      if (ta) {  // A is K x M: stored row k0 + ty, column row0 + tx
        if (k0 + ty < K && row0 + tx < M) a = A[(k0 + ty) * lda + row0 + tx];
      } else if (row0 + ty < M && k0 + tx < K) {
        a = A[(row0 + ty) * lda + k0 + tx];
      }
      if (tb) {  // B is N x K: stored row col0 + ty, column k0 + tx
        if (col0 + ty < N && k0 + tx < K) b = B[(col0 + ty) * ldb + k0 + tx];
      } else if (k0 + ty < K && col0 + tx < N) {
        b = B[(k0 + ty) * ldb + col0 + tx];
      }
      if (bf16) {
        a = gemm_round_bf16(a);
        b = gemm_round_bf16(b);
      }
      (ta ? as[tx][ty] : as[ty][tx]) = a;
      (tb ? bs[tx][ty] : bs[ty][tx]) = b;
      __syncthreads();
      const int kn = K - k0 < kGemmTile ? int(K - k0) : kGemmTile;
      for (int k = 0; k < kn; ++k) acc += as[ty][k] * bs[k][tx];
      __syncthreads();  // the tiles are read before the next slice overwrites them
    }
    const int64_t r = row0 + ty, c = col0 + tx;
    if (r < M && c < N) {
      T* out = C + r * ldc + c;
      *out = beta == T(0) ? alpha * acc : alpha * acc + beta * *out;
    }
  }
}

// Runs k_gemm_tiled on `stream` (bf16: round the operands, float only).
template <typename T>
void gemm_tiled(void* stream, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc,
                bool bf16) {
  if (M == 0 || N == 0) return;
  const int64_t tiles_n = (N + kGemmTile - 1) / kGemmTile,
                tiles_m = (M + kGemmTile - 1) / kGemmTile;
  const dim3 grid(unsigned(tiles_n), unsigned(tiles_m < 65535 ? tiles_m : 65535));
  STRATA_LAUNCH(k_gemm_tiled<T>, grid, dim3(kGemmTile, kGemmTile), 0, stream, ta, tb, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc, bf16);
}

// Elements of a rows x cols operand stored ld apart (what a copy must span).
inline int64_t operand_span(int64_t rows, int64_t cols, int64_t ld) {
  return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

// A GEMM on fp32 copies of its bf16 activations, for the engines' paths that
// read fp32 only (an fp32-precision GEMM, strata's tiled kernel, the SIMT
// stand-in): A and B widened (exact) into scratch(0, n) and scratch(1, n), C
// into scratch(2, n) (read in when beta is not 0 or C is a strided view), then
// run(a, b, c) on fp32 pointers, and C rounded back to nearest even. An
// operand stored in T is passed as it is. `scratch(slot, n)`: n floats of the
// engine's, on `stream`'s order.
template <typename T, typename Scratch, typename Run>
void gemm_on_fp32_copies(void* stream, Scratch&& scratch, bool ta, bool tb, int64_t M, int64_t N,
                         int64_t K, ops::ActIn<T> A, int64_t lda, ops::ActIn<T> B, int64_t ldb,
                         T beta, ops::Act<T> C, int64_t ldc, Run&& run) {
  if constexpr (std::is_same_v<T, float>) {
    auto widened = [&](int slot, ops::ActIn<float> x, int64_t n) -> const float* {
      if (!x.is_bf16()) return x;
      float* f = scratch(slot, n);
      if (n)
        STRATA_LAUNCH(k_from_bf16<float>, blocks_for(n, 256), 256, 0, stream, f,
                      static_cast<const uint16_t*>(x.raw()), n);
      return f;
    };
    const float* a = widened(0, A, operand_span(ta ? K : M, ta ? M : K, lda));
    const float* b = widened(1, B, operand_span(tb ? N : K, tb ? K : N, ldb));
    const int64_t nc = operand_span(M, N, ldc);
    if (!C.is_bf16()) return run(a, b, static_cast<float*>(C));
    // (The columns of a strided view past N round back to themselves.)
    float* c = beta != 0 || ldc != N ? const_cast<float*>(widened(2, C, nc)) : scratch(2, nc);
    run(a, b, c);
    if (nc)
      STRATA_LAUNCH(k_to_bf16<float>, blocks_for(nc, 256), 256, 0, stream,
                    static_cast<uint16_t*>(C.raw()), c, nc);
  } else {
    (void)stream, (void)scratch, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)lda,
        (void)ldb, (void)beta, (void)ldc;
    run(static_cast<const T*>(A), static_cast<const T*>(B), static_cast<T*>(C));
  }
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
