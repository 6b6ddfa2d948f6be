// The oneMKL binding under gemm.cpp (gemm_library.h), for a build configured
// with STRATA_GEMM_LIBRARY=mkl: cblas_sgemm for fp32 and
// cblas_gemm_bf16bf16f32 where the CPU multiplies bf16 natively (AVX512-BF16
// or AMX-BF16; gemm.cpp asks the CPU first). oneMKL comes from its PyPI
// wheels into .deps/mkl (cmake/fetch_gemm_libraries.sh), linked with its GNU
// OpenMP layer so it threads on strata's pool; each call runs on as many
// threads as strata's parallel regions (omp_get_max_threads).
#include <mkl.h>
#include <omp.h>

#include <climits>
#include <string>

#include "backends/cpu/gemm_library.h"
#include "core/cpu.h"
#include "core/error.h"

namespace strata::cpu {
namespace {

// The processors oneMKL's dispatcher chose kernels for, as it names them
// ("Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors";
// on AMD CPUs "Intel(R) Architecture processors", its generic path).
std::string mkl_kernels() {
  MKLVersion v;
  mkl_get_version(&v);
  return v.Processor;
}

// lp64 oneMKL takes int dimensions; strata's are int64_t.
void check_dims(const char* op, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                int64_t ldb, int64_t ldc) {
  STRATA_CHECK(library::leading_dims_fit(ta, tb, M, N, K, lda, ldb, ldc), op,
               ": a leading dimension is too small for M=", M, " N=", N, " K=", K, ta ? " A^T" : "",
               tb ? " B^T" : "", " (lda=", lda, " ldb=", ldb, " ldc=", ldc, ") on ", cpu_summary(),
               " (oneMKL)");
  for (int64_t d : {M, N, K, lda, ldb, ldc})
    STRATA_CHECK(d <= INT_MAX, op, ": a dimension (", d,
                 ") exceeds oneMKL's 32-bit integers (lp64); build with oneDNN instead");
}

}  // namespace

namespace library {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_dims("fp32 matmul", ta, tb, M, N, K, lda, ldb, ldc);
  mkl_set_num_threads_local(omp_get_max_threads());
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M),
              int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// oneMKL's bf16 GEMM runs native kernels wherever the CPU has a bf16 dot
// product, which gemm.cpp checks before asking.
bool native_bf16() { return true; }

void bf16_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                 int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_dims("bf16 matmul", ta, tb, M, N, K, lda, ldb, ldc);
  mkl_set_num_threads_local(omp_get_max_threads());
  cblas_gemm_bf16bf16f32(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                         tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, A, int(lda),
                         B, int(ldb), beta, C, int(ldc));
}

std::string name() {
  MKLVersion v;
  mkl_get_version(&v);
  // Intel numbers its releases year.update (2026.2); MinorVersion is 0.
  return cat("oneMKL ", v.MajorVersion, ".", v.UpdateVersion);
}

std::string describe(Path p) {
  const std::string isa = mkl_kernels();
  if (p == Path::FP32) return cat("oneMKL sgemm, kernels for ", isa);
  if (p == Path::BF16Native) return cat("native: oneMKL gemm_bf16bf16f32, kernels for ", isa);
  return cat("emulated (no AVX512-BF16 or AMX-BF16): operands rounded to bf16, oneMKL sgemm (", isa,
             "); same numerics, fp32 speed");
}

}  // namespace library
}  // namespace strata::cpu
