// CPU GEMM binding. Row-major throughout:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// op(A) = A stored M x K (lda) or, when trans_a, A stored K x M (lda); same for B.
//
// float runs on oneDNN's dnnl_sgemm (chosen by measurement, see README and
// bench/gemm_libraries.cpp; a build without oneDNN runs strata's own kernels,
// gemm_library.h): its JIT kernels detect the CPU (AVX-512, AMX), on strata's
// OpenMP pool. double (used by gradient checks) runs on a plain loop.
#pragma once

#include <cstdint>
#include <string>

#include "ops/dtype.h"
#include "ops/types.h"

namespace strata::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// Precision of float GEMMs (double GEMMs are always exact), like PyTorch's
// autocast for matmuls: FP32, or BF16, where A and B are rounded to bfloat16
// (round to nearest even) and multiplied with fp32 accumulation and an fp32
// result. Everything that is not a GEMM stays fp32.
using MatmulPrecision = ops::MatmulPrecision;
void set_matmul_precision(MatmulPrecision p);
// While weights are frozen (generation), bf16 matmuls on at most 8 rows read
// a bf16 copy of B made on first use (B is the weight in a linear layer's
// forward x W^T), so decoding reads half the bytes. Switching either way
// drops the copies. Process-wide, like the precision.
void set_frozen_weights(bool frozen);

// Within this scope, bf16 GEMMs (training's bf16 precision) keep the bf16
// copies of their operands, so a later GEMM on the same operand (same
// pointer, shape and leading dimension) reads the copy instead of converting
// it again. The caller promises that nothing but these GEMMs writes to the
// operands inside the scope; a GEMM's own output drops any copy it overlaps.
// Scopes nest; the copies are forgotten when the outermost one ends.
class Bf16OperandReuse {
 public:
  Bf16OperandReuse();
  ~Bf16OperandReuse();
  Bf16OperandReuse(const Bf16OperandReuse&) = delete;
  Bf16OperandReuse& operator=(const Bf16OperandReuse&) = delete;
};
MatmulPrecision matmul_precision();

// A training step's weights (ops::Backend::hold_weights): while [base, base +
// n) cannot change, native bf16 GEMMs read one bf16 copy of each weight
// operand in it, made on its first use in the hold, instead of converting it
// in every forward, input-gradient and recomputation GEMM. Released (base
// null), no copy is read again before it is refilled; the buffers stay for
// the next hold of the same range (2 bytes a parameter, as the memory
// estimate counts) and go when another range is held. Process-wide, like the
// precision.
void set_held_weights(const float* base, int64_t n);
// Elements converted into held copies in the current hold (tests).
int64_t held_weight_copy_elements();

// C = alpha op(A) op(B) + beta C with operands in either storage (gemm<T>
// above for fp32 ones). Where gemm_reads_bf16(), a bf16 operand (an activation
// stored in bf16) is read as it is stored by the native bf16 GEMM: the same
// product as widening it and rounding it again, without the two passes.
// Elsewhere bf16 operands are refused: the caller stages them (storage.h).
void gemm_act(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              ops::ActIn<float> A, int64_t lda, ops::ActIn<float> B, int64_t ldb, float beta,
              float* C, int64_t ldc);
void gemm_act(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, ops::ActIn<double> A,
              int64_t lda, ops::ActIn<double> B, int64_t ldb, double beta, double* C, int64_t ldc);
// Whether GEMMs read bf16 operands themselves now: bf16 precision on the
// native path (set_bf16_path can force the emulated one).
bool gemm_reads_bf16();

// How BF16 GEMMs run on this CPU:
//   Native:   oneDNN's bf16 matmul (primitives created once per shape), where
//             the CPU has AVX512-BF16 or AMX-BF16 and oneDNN uses it;
//   Emulated: operands rounded to bf16 into fp32 buffers, then the fp32 GEMM.
//             bf16 x bf16 products are exact in fp32, so the numerics are the
//             same (operands in bf16, fp32 accumulation); the speed is fp32's,
//             a little less for the rounding pass.
// Decided on first use; set_bf16_path forces one (tests; Native only where
// available, else it throws).
enum class Bf16Path { Native, Emulated };
Bf16Path bf16_path();
void set_bf16_path(Bf16Path p);
bool native_bf16_available();

// The GEMM library and its version, e.g. "oneDNN 3.0.0".
std::string gemm_library();

// One line on how GEMMs of this precision run here, e.g. "oneDNN sgemm
// (avx512_core)" or "emulated: operands rounded to bf16, oneDNN sgemm".
std::string matmul_path(MatmulPrecision p);

// Round-to-nearest-even bfloat16 bits of a float; NaN stays NaN (quiet)
// instead of carrying into infinity or -0.
inline uint16_t bf16_bits(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  const uint16_t rounded = uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
  return (x & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t((x >> 16) | 0x0040u) : rounded;
}

// Round-to-nearest-even conversion of n floats to bfloat16 bit patterns
// (parallel; float_to_bf16_serial is the single-threaded loop).
void float_to_bf16(uint16_t* dst, const float* src, int64_t n);
inline void float_to_bf16_serial(uint16_t* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
}
// The same rounding, kept as floats (the low 16 bits zero).
inline void round_to_bf16_serial(float* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(bf16_bits(src[i])) << 16;
    __builtin_memcpy(dst + i, &bits, 4);
  }
}
float bf16_to_float(uint16_t x);

}  // namespace strata::cpu
