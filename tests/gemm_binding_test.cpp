// One GEMM library binding (src/backends/cpu/gemm_library.h) on its own: this
// file is compiled once per binding the machine has (tests/CMakeLists.txt:
// test_gemm_binding_onednn, _onednn3, _mkl), each binary linking that binding
// and core/ only, so every library strata can be configured with is checked
// here whichever one the main build uses. The whole suite then runs on the
// build's own choice.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/gemm_library.h"
#include "core/cpu.h"
#include "core/error.h"

namespace strata::cpu {
namespace {

uint16_t to_bf16(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t x = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &x, 4);
  return f;
}

// A deterministic matrix of values in [-1, 1).
std::vector<float> matrix(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(s >> 8) / float(1u << 23) - 1.0f;
  }
  return v;
}

// C = alpha op(A) op(B) + beta C in double, row-major like the binding.
std::vector<double> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                              const std::vector<float>& A, int64_t lda, const std::vector<float>& B,
                              int64_t ldb, double beta, const std::vector<float>& C, int64_t ldc) {
  std::vector<double> out(size_t(M * ldc));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
             double(tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
      out[size_t(i * ldc + j)] = alpha * s + beta * double(C[size_t(i * ldc + j)]);
    }
  return out;
}

// Largest error against the reference, relative to the sum of |terms| (the
// fp32 accumulation bound scales with it): below 1e-5 for K <= 300.
double worst(const std::vector<float>& got, const std::vector<double>& want, int64_t M, int64_t N,
             int64_t ldc, int64_t K) {
  double w = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      w = std::max(
          w, std::abs(double(got[size_t(i * ldc + j)]) - want[size_t(i * ldc + j)]) / double(K));
  return w;
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
};
const Case kCases[] = {{false, false, 37, 53, 71}, {false, true, 64, 48, 96},
                       {true, false, 19, 130, 33}, {true, true, 8, 8, 300},
                       {false, true, 1, 257, 64},  {false, false, 130, 1, 17}};

TEST(GemmBinding, NamesItselfAndItsKernels) {
  const std::string name = library::name();
  EXPECT_TRUE(name.rfind("oneDNN ", 0) == 0 || name.rfind("oneMKL ", 0) == 0) << name;
  EXPECT_NE(name.find('.'), std::string::npos) << "no version in " << name;
  EXPECT_NE(library::describe(library::Path::FP32).find("kernels for"), std::string::npos);
  EXPECT_EQ(library::describe(library::Path::BF16Native).rfind("native: ", 0), 0u);
  EXPECT_EQ(library::describe(library::Path::BF16Emulated).rfind("emulated ", 0), 0u);
}

TEST(GemmBinding, Fp32MatchesTheReferenceForEveryLayoutAlphaBetaAndPadding) {
  for (const Case& c : kCases)
    for (int64_t pad : {0, 3})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, {-2.0f, 0.25f}}) {
        const int64_t lda = (c.ta ? c.M : c.K) + pad, ldb = (c.tb ? c.K : c.N) + pad,
                      ldc = c.N + pad;
        const auto A = matrix((c.ta ? c.K : c.M) * lda, 1), B = matrix((c.tb ? c.N : c.K) * ldb, 2);
        auto C = matrix(c.M * ldc, 3);
        const auto want = reference(c.ta, c.tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
        library::sgemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta,
                       C.data(), ldc);
        EXPECT_LT(worst(C, want, c.M, c.N, ldc, c.K), 1e-6)
            << library::name() << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N
            << " K=" << c.K << " pad=" << pad << " alpha=" << alpha << " beta=" << beta;
        // Padding columns of C are never written.
        for (int64_t i = 0; pad && i < c.M; ++i)
          EXPECT_EQ(C[size_t(i * ldc + c.N)], matrix(c.M * ldc, 3)[size_t(i * ldc + c.N)]);
      }
}

TEST(GemmBinding, Fp32GivesTheSameResultOnOneThreadAndOnAll) {
  const int64_t M = 96, N = 80, K = 200;
  const auto A = matrix(M * K, 4), B = matrix(N * K, 5);
  std::vector<float> one(size_t(M * N)), all(size_t(M * N));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  library::sgemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, one.data(), N);
  omp_set_num_threads(threads);
  library::sgemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, all.data(), N);
  const auto want = reference(false, true, M, N, K, 1.0, A, K, B, K, 0.0, one, N);
  EXPECT_LT(worst(one, want, M, N, N, K), 1e-6);
  EXPECT_LT(worst(all, want, M, N, N, K), 1e-6);
}

TEST(GemmBinding, RefusesLeadingDimensionsTooSmallInOneLine) {
  const auto A = matrix(64, 1), B = matrix(64, 2);
  std::vector<float> C(64);
  try {
    library::sgemm(false, false, 8, 8, 8, 1.0f, A.data(), 4, B.data(), 8, 0.0f, C.data(), 8);
    FAIL() << "lda=4 < K=8 was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fp32 matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("M=8 N=8 K=8"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The bf16 kernels, where the library runs them on this CPU (oneDNN: only
// on AVX512-BF16 or AMX-BF16, and only with a CPU engine, which the PyPI
// oneDNN 3, a SYCL build, cannot create without an OpenCL CPU runtime:
// native_bf16() says so without throwing; oneMKL: on every CPU).
// bf16 x bf16 products are exact in fp32, so the result is the double
// reference of the rounded operands up to fp32 accumulation.
TEST(GemmBinding, Bf16MatchesTheReferenceOfTheRoundedOperands) {
  const bool oneMKL = library::name().rfind("oneMKL", 0) == 0;
  const bool native = cpu_features().native_bf16() && library::native_bf16();
  if (!native && !oneMKL)
    GTEST_SKIP() << library::name() << " has no bf16 kernel it can run on " << cpu_summary()
                 << " (oneDNN: AVX512-BF16 or AMX-BF16 and a CPU engine); its fp32 path is "
                    "checked above";
  for (const Case& c : kCases) {
    const auto A = matrix(c.M * c.K, 6), B = matrix(c.K * c.N, 7);
    std::vector<uint16_t> a16(A.size()), b16(B.size());
    std::vector<float> ar(A.size()), br(B.size());
    for (size_t i = 0; i < A.size(); ++i) ar[i] = from_bf16(a16[i] = to_bf16(A[i]));
    for (size_t i = 0; i < B.size(); ++i) br[i] = from_bf16(b16[i] = to_bf16(B[i]));
    auto C = matrix(c.M * c.N, 8);
    const auto want = reference(c.ta, c.tb, c.M, c.N, c.K, 0.5, ar, c.ta ? c.M : c.K, br,
                                c.tb ? c.K : c.N, 1.0, C, c.N);
    library::bf16_matmul(c.ta, c.tb, c.M, c.N, c.K, 0.5f, a16.data(), c.ta ? c.M : c.K, b16.data(),
                         c.tb ? c.K : c.N, 1.0f, C.data(), c.N);
    EXPECT_LT(worst(C, want, c.M, c.N, c.N, c.K), 1e-6)
        << library::name() << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N
        << " K=" << c.K;
  }
}

}  // namespace
}  // namespace strata::cpu
