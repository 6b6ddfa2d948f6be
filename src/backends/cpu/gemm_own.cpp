// strata's own GEMM under gemm.cpp (gemm_library.h), for a build without
// oneDNN (libdnnl-dev): the few-row kernels of rows_kernel.h over the whole
// matrix, eight rows of op(A) at a time against every row of op(B)^T. The
// operands stored the other way round are transposed into a scratch copy
// first. Correct for every shape and layout, slower than oneDNN on large
// GEMMs (it re-reads op(B) once per eight rows: a training step of the 6L-288
// model took 1.3x as long on one thread); bf16 GEMMs take the emulated path
// (operands rounded to bf16, this fp32 GEMM).
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_library.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/text.h"

namespace strata::cpu {
namespace {

// The rows x cols matrix stored transposed (cols x rows, leading dimension
// ld) as compact rows of `cols`.
void transpose_into(std::vector<float>& dst, const float* src, int64_t rows, int64_t cols,
                    int64_t ld) {
  dst.resize(size_t(rows * cols));
  float* d = dst.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = src[c * ld + r];
}

}  // namespace

namespace library {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // oneDNN checks its arguments; these kernels would read out of bounds.
  STRATA_CHECK(leading_dims_fit(ta, tb, M, N, K, lda, ldb, ldc),
               "fp32 matmul: a leading dimension is too small for M=", M, " N=", N, " K=", K,
               ta ? " A^T" : "", tb ? " B^T" : "", " (lda=", lda, " ldb=", ldb, " ldc=", ldc,
               ") on ", cpu_summary(), " (strata's kernels, no oneDNN in this build)");
  // The kernels take op(A) as M rows of K and op(B) as N rows of K.
  thread_local std::vector<float> a_rows, b_rows;
  if (ta) {
    transpose_into(a_rows, A, M, K, lda);
    A = a_rows.data();
    lda = K;
  }
  if (!tb) {
    transpose_into(b_rows, B, N, K, ldb);
    B = b_rows.data();
    ldb = K;
  }
  few_rows_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool native_bf16() { return false; }

void bf16_matmul(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                 const uint16_t*, int64_t, float, float*, int64_t) {
  fail("bf16 matmul: this build has no oneDNN (libdnnl-dev), so there is no native bf16 path");
}

std::string name() { return "strata's own kernels (this build has no oneDNN: libdnnl-dev)"; }

std::string describe(Path p) {
  const char* isa = cpu_level_name(cpu_level());
  if (p == Path::FP32)
    return cat("strata's few-row kernels over the whole matrix (", isa,
               "; no oneDNN in this build: slower on large GEMMs)");
  return cat(
      "emulated (no oneDNN in this build): operands rounded to bf16, strata's fp32 kernels (", isa,
      "); same numerics, fp32 speed");
}

}  // namespace library
}  // namespace strata::cpu
