// What the op table does not cover (op_table.h: every op against its
// reference, across backends, and its gradient): the CPU's GEMM library and
// its bf16 paths, the few-row kernels and the vector math under the ops,
// identical bits at every instruction-set level, error messages, and
// properties of single ops beyond a reference (exact definitions, aliasing,
// null gradients, chunking, views that leave the rest untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/microgemm.h"
#include "backends/cpu/vec_math.h"
#include "core/cpu.h"
#include "core/error.h"
#include "ops/backend.h"
#include "reference.h"
#include "testing.h"

namespace strata {
namespace {

using testing::cast_vec;
using testing::expect_close;
using testing::random_tokens;
using testing::random_vec;
namespace ref = reference;

template <typename T>
double tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <typename T>
class OpsTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OpsTest, Types);

// --------------------------------------------------------------------- GEMM
TYPED_TEST(OpsTest, GemmAllTransposesAlphaBetaLeadingDims) {
  using T = TypeParam;
  const int M = 37, N = 29, K = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0, 0.5}) {
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        auto A = random_vec<double>(int64_t(ta ? K : M) * lda, 1);
        auto B = random_vec<double>(int64_t(tb ? N : K) * ldb, 2);
        auto C = random_vec<double>(int64_t(M) * ldc, 3);
        ref::Vec want = C;
        const double alpha = 0.75;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k)
              s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            want[i * ldc + j] = alpha * s + beta * C[i * ldc + j];
          }
        auto a = cast_vec<T>(A), b = cast_vec<T>(B), c = cast_vec<T>(C);
        cpu::gemm<T>(ta, tb, M, N, K, T(alpha), a.data(), lda, b.data(), ldb, T(beta), c.data(),
                     ldc);
        expect_close(c, want, tol<T>(), 0, cat("gemm ta=", ta, " tb=", tb, " beta=", beta));
      }
}

// The few-row fp32 GEMM (decoding, verification): each element's value
// depends only on its row of A and its row of B, so one row alone, the same
// row among 2..8 others, and a slice of the columns give the same bits; and
// every product is close to the double reference (K not a multiple of the
// 16 lanes, beta 0 and not, strided operands).
TEST(Ops, FewRowGemmDoesNotDependOnTheRowCount) {
  for (int K : {5, 16, 53, 768}) {
    const int M = 8, N = 70, lda = K + 3, ldb = K + 1, ldc = N + 4;
    const auto A = cast_vec<float>(random_vec<double>(int64_t(M) * lda, 11));
    const auto B = cast_vec<float>(random_vec<double>(int64_t(N) * ldb, 12));
    const auto C0 = cast_vec<float>(random_vec<double>(int64_t(M) * ldc, 13));
    for (float beta : {0.0f, 0.5f}) {
      std::vector<float> all = C0;
      cpu::gemm<float>(false, true, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, all.data(),
                       ldc);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double want = 0;
          for (int k = 0; k < K; ++k) want += double(A[m * lda + k]) * double(B[n * ldb + k]);
          want = 0.75 * want + beta * double(C0[m * ldc + n]);
          ASSERT_NEAR(all[m * ldc + n], want, 1e-5 * (1 + std::sqrt(double(K))))
              << "K " << K << " m " << m << " n " << n;
        }
      for (int rows = 1; rows < M; ++rows)
        for (int m0 = 0; m0 + rows <= M; m0 += rows) {
          std::vector<float> part = C0;
          cpu::gemm<float>(false, true, rows, N, K, 0.75f, A.data() + m0 * lda, lda, B.data(), ldb,
                           beta, part.data() + m0 * ldc, ldc);
          for (int m = m0; m < m0 + rows; ++m)
            ASSERT_EQ(0,
                      std::memcmp(part.data() + m * ldc, all.data() + m * ldc, sizeof(float) * N))
                << "K " << K << ": row " << m << " of " << rows << " rows from " << m0;
        }
      // Columns 30..69 alone (a tensor-parallel shard of the output).
      std::vector<float> cols = C0;
      cpu::gemm<float>(false, true, M, 40, K, 0.75f, A.data(), lda, B.data() + 30 * ldb, ldb, beta,
                       cols.data() + 30, ldc);
      for (int m = 0; m < M; ++m)
        ASSERT_EQ(0, std::memcmp(cols.data() + m * ldc + 30, all.data() + m * ldc + 30,
                                 sizeof(float) * 40))
            << "K " << K << ": column slice, row " << m;
    }
  }
}

// bf16 matmuls: operands rounded to bfloat16, fp32 accumulation, on every
// path the CPU has (emulated everywhere, native where AVX512-BF16 or AMX is).
// Against the exact product of the bf16-rounded operands the error is fp32
// accumulation error only; against the exact product of the fp32 operands it
// is bf16's precision (8-bit mantissa).
TEST(Ops, GemmBf16IsTheExactProductOfRoundedOperandsOnEveryPath) {
  const int M = 67, N = 45, K = 130;
  auto bf16 = [](double x) {
    const float f = float(x);
    uint16_t h;
    cpu::float_to_bf16(&h, &f, 1);
    return double(cpu::bf16_to_float(h));
  };
  std::vector<std::vector<float>> results;
  for (cpu::Bf16Path path : testing::bf16_paths()) {
    testing::ForceBf16Path force(path);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (double beta : {0.0, 1.0}) {
          const std::string what = cat("bf16 gemm (", testing::bf16_path_name(path), ") ta=", ta,
                                       " tb=", tb, " beta=", beta);
          const int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
          auto A = random_vec<double>(int64_t(ta ? K : M) * lda, 41);
          auto B = random_vec<double>(int64_t(tb ? N : K) * ldb, 42);
          auto C = random_vec<double>(int64_t(M) * ldc, 43);
          ref::Vec want = C, want16 = C, bound(C.size(), 0.0);
          ref::Vec A16(A.size()), B16(B.size());  // the operands rounded once
          for (size_t e = 0; e < A.size(); ++e) A16[e] = bf16(A[e]);
          for (size_t e = 0; e < B.size(); ++e) B16[e] = bf16(B[e]);
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double acc = 0, acc16 = 0, abs16 = 0;
              for (int k = 0; k < K; ++k) {
                const int64_t ia = ta ? k * lda + i : i * lda + k;
                const int64_t ib = tb ? j * ldb + k : k * ldb + j;
                acc += A[ia] * B[ib];
                acc16 += A16[ia] * B16[ib];
                abs16 += std::fabs(A16[ia] * B16[ib]);
              }
              want[i * ldc + j] = 0.5 * acc + beta * C[i * ldc + j];
              want16[i * ldc + j] = 0.5 * acc16 + beta * float(C[i * ldc + j]);
              // fp32 accumulation of K products (and the beta term): K ulps.
              bound[i * ldc + j] = (K + 2) * 5.96e-8 * (abs16 + std::fabs(C[i * ldc + j]));
            }
          auto a = cast_vec<float>(A), b = cast_vec<float>(B), c = cast_vec<float>(C);
          cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
          cpu::gemm<float>(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, float(beta),
                           c.data(), ldc);
          cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
          // K random products of two values each rounded by up to 2^-9: the sum's
          // error is ~sqrt(K) * 2^-8 * |a||b|, about 1% of the result's scale.
          expect_close(c, want, 2e-2, 0, what);
          double worst = 0, diff = 0;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              const int64_t at = int64_t(i) * ldc + j;
              worst = std::max(worst, std::fabs(c[at] - want16[at]) / bound[at]);
              diff = std::max(diff, std::fabs(double(c[at]) - want[at]));
            }
          EXPECT_LE(worst, 1.0) << what << ": not the product of bf16-rounded operands";
          EXPECT_GT(diff, 1e-5) << what << ": exact, so the bf16 path did not run";
          // Padding beyond N in C is untouched.
          for (int i = 0; i < M; ++i)
            for (int j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], float(C[i * ldc + j]));
          results.push_back(c);
        }
  }
  // Where both paths exist they agree to fp32 accumulation order.
  const size_t per_path = 8;
  for (size_t i = per_path; i < results.size(); ++i)
    expect_close(results[i], results[i - per_path], 1e-5, 0, "native vs emulated bf16 gemm");
}

// Decoding in bf16 (weights frozen): few-row matmuls read a bf16 copy of the
// weight made on first use. The result is the product of the bf16-rounded
// operands with fp32 sums, like every bf16 path, independent of the row
// count; the copy is dropped when the weights thaw, so changed weights are
// seen by the next frozen pass.
TEST(Ops, FrozenBf16FewRowGemmReadsAFreshCopyOfTheWeights) {
  const int M = 5, N = 37, K = 70, lda = K + 1, ldb = K + 3, ldc = N;
  auto bf16 = [](double x) {
    const float f = float(x);
    uint16_t h;
    cpu::float_to_bf16(&h, &f, 1);
    return double(cpu::bf16_to_float(h));
  };
  auto A = cast_vec<float>(random_vec<double>(int64_t(M) * lda, 51));
  auto B = cast_vec<float>(random_vec<double>(int64_t(N) * ldb, 52));
  auto check = [&](const std::vector<float>& c, const std::string& what) {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double want = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          want += bf16(A[i * lda + k]) * bf16(B[j * ldb + k]);
          mag += std::fabs(bf16(A[i * lda + k]) * bf16(B[j * ldb + k]));
        }
        ASSERT_NEAR(c[i * ldc + j], want, (K + 2) * 5.96e-8 * mag) << what << " " << i << "," << j;
      }
  };
  cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
  cpu::set_frozen_weights(true);
  std::vector<float> all(size_t(M) * ldc);
  std::vector<float> one(static_cast<size_t>(ldc));
  cpu::gemm<float>(false, true, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, all.data(), ldc);
  check(all, "frozen");
  for (int i = 0; i < M; ++i) {
    cpu::gemm<float>(false, true, 1, N, K, 1.0f, A.data() + i * lda, lda, B.data(), ldb, 0.0f,
                     one.data(), ldc);
    ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * ldc, sizeof(float) * N)) << "row " << i;
  }
  cpu::set_frozen_weights(false);
  for (auto& b : B) b = -2 * b;  // new weights between two generations
  cpu::set_frozen_weights(true);
  cpu::gemm<float>(false, true, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, all.data(), ldc);
  cpu::set_frozen_weights(false);
  cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
  check(all, "after the weights changed");
}

// bf16 operands converted once inside a reuse scope: the results are those
// of converting every time, and a GEMM that writes over an operand makes the
// next GEMM convert the new values.
TEST(Ops, Bf16OperandReuseGivesTheSameResultsAndSeesOverwrites) {
  const int M = 24, N = 20, K = 24;  // K = M: A can be overwritten by c1 c1^T
  for (cpu::Bf16Path path : testing::bf16_paths()) {
    testing::ForceBf16Path force(path);
    const std::string what = testing::bf16_path_name(path);
    auto A = cast_vec<float>(random_vec<double>(int64_t(M) * K, 61));
    const auto B = cast_vec<float>(random_vec<double>(int64_t(K) * N, 62));
    cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
    auto run = [&](bool reuse) {
      std::vector<float> c1(size_t(M) * N), c2(size_t(N) * K), c3(size_t(M) * N);
      auto a = A;
      std::optional<cpu::Bf16OperandReuse> scope;
      if (reuse) scope.emplace();
      cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, B.data(), N, 0.0f, c1.data(), N);
      // A^T-side use of the same operand (as a linear layer's dW GEMM reads dout).
      cpu::gemm<float>(true, false, K, N, M, 1.0f, a.data(), K, c1.data(), N, 0.0f, c2.data(), N);
      // Overwrite a with a GEMM whose operands are both already packed (a := c1 c1^T,
      // so a's copy stays in its slot and only the overlap check can drop it),
      // then read a again.
      cpu::gemm<float>(false, true, M, K, N, 1.0f, c1.data(), N, c1.data(), N, 0.0f, a.data(), K);
      cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, B.data(), N, 0.0f, c3.data(), N);
      return std::vector<std::vector<float>>{c1, c2, c3};
    };
    const auto plain = run(false), reused = run(true);
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_EQ(0, std::memcmp(plain[i].data(), reused[i].data(), plain[i].size() * sizeof(float)))
          << what << ": GEMM " << i + 1;
    cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
  }
}

// A training step's held weights (hold_weights): native bf16 GEMMs read one
// bf16 copy of each weight in the held range, shared by the forward (W as
// B^T) and input-gradient (W as B) GEMMs, with the bits of converting it every
// time; operands outside the range are packed as before; releasing drops the
// copies, so the next hold sees changed weights. (The emulated path keeps no
// copies.)
TEST(Ops, HeldBf16WeightsGiveTheSameBitsAndAreDroppedOnRelease) {
  const int M = 40, OC = 24, IC = 36, ldw = IC + 3;
  for (cpu::Bf16Path path : testing::bf16_paths()) {
    testing::ForceBf16Path force(path);
    const std::string what = testing::bf16_path_name(path);
    const bool native = path == cpu::Bf16Path::Native;
    auto W = cast_vec<float>(random_vec<double>(int64_t(OC) * ldw, 71));
    const auto X = cast_vec<float>(random_vec<double>(int64_t(M) * IC, 72));
    const auto D = cast_vec<float>(random_vec<double>(int64_t(M) * OC, 73));
    cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
    auto run = [&] {  // y = x W^T and dx = dout W
      std::vector<float> y(size_t(M) * OC), dx(size_t(M) * IC);
      cpu::gemm<float>(false, true, M, OC, IC, 1.0f, X.data(), IC, W.data(), ldw, 0.0f, y.data(),
                       OC);
      cpu::gemm<float>(false, false, M, IC, OC, 1.0f, D.data(), OC, W.data(), ldw, 0.0f, dx.data(),
                       IC);
      return std::vector<std::vector<float>>{y, dx};
    };
    auto same = [&](const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b, const std::string& when) {
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
            << what << " " << when << ": GEMM " << i + 1;
    };
    const auto plain = run();
    cpu::set_held_weights(W.data(), int64_t(W.size()));
    const auto held = run();
    EXPECT_EQ(cpu::held_weight_copy_elements(), native ? int64_t(OC) * IC : 0) << what;
    same(plain, held, "held");
    cpu::set_held_weights(nullptr, 0);
    EXPECT_EQ(cpu::held_weight_copy_elements(), 0) << what;
    for (auto& w : W) w = -2 * w;  // the optimizer's step
    const auto changed = run();
    cpu::set_held_weights(W.data(), int64_t(W.size()));
    same(changed, run(), "after the weights changed");
    cpu::set_held_weights(nullptr, 0);
    cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
  }
}

// gemm_act: bf16 operands (activations stored in bf16) are read as stored by
// the native bf16 GEMM, strided or not, transposed or not, and give the
// product of widening them into fp32 first; where GEMMs do not read bf16
// (fp32 precision, the emulated path) a bf16 operand is refused in one line.
TEST(Ops, GemmReadsBf16OperandsAsStored) {
  const int M = 33, N = 26, K = 70;
  auto refused = [&](const std::string& what) {
    std::vector<ops::bf16> a(size_t(M) * K, ops::bf16(1.0f));
    std::vector<float> b(size_t(K) * N, 1.0f), c(size_t(M) * N);
    try {
      cpu::gemm_act(false, false, M, N, K, 1.0f, ops::ActIn<float>(a.data()), K, b.data(), N, 0.0f,
                    c.data(), N);
      ADD_FAILURE() << what << ": a bf16 operand was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("bf16 operand"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  refused("fp32 precision");
  {
    testing::ForceBf16Path force(cpu::Bf16Path::Emulated);
    cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
    refused("emulated bf16");
    cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
  }
  if (!cpu::native_bf16_available())
    GTEST_SKIP() << "no native bf16 GEMM on " << cpu_summary() << ": GEMMs never read bf16 here";
  cpu::set_matmul_precision(cpu::MatmulPrecision::BF16);
  ASSERT_TRUE(cpu::gemm_reads_bf16());
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int which : {1, 2, 3}) {  // A bf16, B bf16, both
        const std::string what = cat("ta=", ta, " tb=", tb, " bf16 operands=", which);
        const int lda = (ta ? M : K) + 5, ldb = (tb ? K : N) + 2, ldc = N + 1;
        auto A = cast_vec<float>(random_vec<double>(int64_t(ta ? K : M) * lda, 81));
        auto B = cast_vec<float>(random_vec<double>(int64_t(tb ? N : K) * ldb, 82));
        std::vector<ops::bf16> a16(A.begin(), A.end()), b16(B.begin(), B.end());
        for (size_t i = 0; i < A.size(); ++i) A[i] = a16[i];  // the values bf16 holds
        for (size_t i = 0; i < B.size(); ++i) B[i] = b16[i];
        const auto C = cast_vec<float>(random_vec<double>(int64_t(M) * ldc, 83));
        auto want = C, got = C;
        cpu::gemm<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, want.data(),
                         ldc);
        const ops::ActIn<float> a = which & 1 ? ops::ActIn<float>(a16.data()) : A.data();
        const ops::ActIn<float> b = which & 2 ? ops::ActIn<float>(b16.data()) : B.data();
        cpu::gemm_act(ta, tb, M, N, K, 0.5f, a, lda, b, ldb, 1.0f, got.data(), ldc);
        // The same bf16 values with fp32 sums; the library may block a strided
        // operand otherwise than a compact copy, so allow its sum order.
        expect_close(got, want, 1e-5, 0, what);
        for (int i = 0; i < M; ++i) ASSERT_EQ(got[i * ldc + N], C[i * ldc + N]) << what;
      }
  cpu::set_matmul_precision(cpu::MatmulPrecision::FP32);
}

// A GEMM the library refuses is one line naming the op, shapes, CPU and
// oneDNN's kernels, not the library's status alone.
TEST(Ops, GemmLibraryFailureNamesShapesAndCpu) {
  std::vector<float> a(64), b(64), c(64);
  const std::string msg = testing::thrown_message([&] {
    cpu::gemm<float>(false, false, 4, 4, 8, 1.0f, a.data(), 2 /* lda < K */, b.data(), 4, 0.0f,
                     c.data(), 4);
  });
  // oneMKL and strata's own kernels (a build without oneDNN) check the
  // dimensions themselves.
  const std::string library = cpu::gemm_library();
  const bool onednn = library.rfind("oneDNN", 0) == 0, mkl = library.rfind("oneMKL", 0) == 0;
  testing::expect_one_line(
      msg, {onednn ? "fp32 matmul: oneDNN sgemm failed" : "fp32 matmul: a leading dimension",
            "M=4 N=4 K=8", "lda=2", cpu_features().model,
            onednn ? "oneDNN kernels for" : (mkl ? "(oneMKL)" : "strata's kernels")});
}

TEST(Ops, MatmulPrecisionNames) {
  const auto be = ops::make_backend<float>();
  ops::MatmulPrecision p;
  ASSERT_TRUE(ops::parse_matmul_precision("fp32", be->native_bf16(), &p));
  EXPECT_EQ(p, ops::MatmulPrecision::FP32);
  ASSERT_TRUE(ops::parse_matmul_precision("bf16", be->native_bf16(), &p));
  EXPECT_EQ(p, ops::MatmulPrecision::BF16);
  ASSERT_TRUE(ops::parse_matmul_precision("auto", be->native_bf16(), &p));
  // auto is bf16 exactly where bf16 matmuls are native.
  EXPECT_EQ(p == ops::MatmulPrecision::BF16, cpu::native_bf16_available());
  EXPECT_EQ(be->native_bf16(), cpu::native_bf16_available());
  EXPECT_FALSE(ops::parse_matmul_precision("fp16", true, &p));
  EXPECT_NE(be->matmul_path(ops::MatmulPrecision::BF16)
                .find(cpu::native_bf16_available() ? "native" : "emulated"),
            std::string::npos);
  if (!cpu::native_bf16_available()) {
    EXPECT_THROW(cpu::set_bf16_path(cpu::Bf16Path::Native), Error);
  }
}

TEST(Ops, Bf16ConversionRoundsToNearestEven) {
  const std::vector<float> x = {1.0f, -2.5f, 1.00390625f /* 1 + 2^-8: tie, to even */,
                                1.01171875f /* 1 + 3*2^-8: tie, up to even */, 3.14159265f};
  std::vector<uint16_t> b(x.size());
  cpu::float_to_bf16(b.data(), x.data(), int64_t(x.size()));
  EXPECT_EQ(cpu::bf16_to_float(b[0]), 1.0f);
  EXPECT_EQ(cpu::bf16_to_float(b[1]), -2.5f);
  EXPECT_EQ(cpu::bf16_to_float(b[2]), 1.0f);
  EXPECT_EQ(cpu::bf16_to_float(b[3]), 1.015625f);
  EXPECT_NEAR(cpu::bf16_to_float(b[4]), 3.14159265f, 3.14159265f / 256);
  // NaNs stay NaN (payloads that would round into infinity or wrap to -0).
  for (uint32_t bits : {0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u}) {
    float nan;
    std::memcpy(&nan, &bits, 4);
    uint16_t h;
    cpu::float_to_bf16(&h, &nan, 1);
    EXPECT_TRUE(std::isnan(cpu::bf16_to_float(h))) << std::hex << bits;
  }
}

TYPED_TEST(OpsTest, SmallGemmMatchesNaiveOnEdgeShapes) {
  using T = TypeParam;
  for (int M : {1, 4, 7, 64})
    for (int N : {1, 16, 33, 48, 64})
      for (int K : {1, 5, 48})
        for (bool acc : {false, true}) {
          const int lda = K + 1, ldb = N + 3, ldc = N + 2, ldat = M + 2;
          auto A = random_vec<double>(int64_t(M) * lda, 4),
               At = random_vec<double>(int64_t(K) * ldat, 5);
          auto B = random_vec<double>(int64_t(K) * ldb, 6),
               C0 = random_vec<double>(int64_t(M) * ldc, 7);
          ref::Vec want = C0, want_t = C0;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double s = 0, st = 0;
              for (int k = 0; k < K; ++k) {
                s += A[i * lda + k] * B[k * ldb + j];
                st += At[k * ldat + i] * B[k * ldb + j];
              }
              want[i * ldc + j] = 0.5 * s + (acc ? C0[i * ldc + j] : 0);
              want_t[i * ldc + j] = 0.5 * st + (acc ? C0[i * ldc + j] : 0);
            }
          auto a = cast_vec<T>(A), at = cast_vec<T>(At), b = cast_vec<T>(B);
          auto c = cast_vec<T>(C0), ct = cast_vec<T>(C0);
          std::vector<T> panel(size_t(cpu::small_gemm_panel_size(K)));
          cpu::small_gemm<T, false>(M, N, K, T(0.5), a.data(), lda, b.data(), ldb, c.data(), ldc,
                                    acc, panel.data());
          cpu::small_gemm<T, true>(M, N, K, T(0.5), at.data(), ldat, b.data(), ldb, ct.data(), ldc,
                                   acc, panel.data());
          // Padding columns beyond N must be untouched.
          for (int i = 0; i < M; ++i)
            for (int j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], T(C0[i * ldc + j]));
          expect_close(c, want, tol<T>(), 0, cat("small_gemm M", M, " N", N, " K", K));
          expect_close(ct, want_t, tol<T>(), 0, cat("small_gemm^T M", M, " N", N, " K", K));
        }
}

TEST(VecMath, ExpApproxWithinFourUlp) {
  double worst = 0;
  for (int i = -870000; i <= 880000; ++i) {
    const float x = float(i) * 1e-4f;
    const double want = std::exp(double(x));
    const double got = cpu::exp_approx(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 4 * 5.96e-8) << "max relative error of exp_approx";
  EXPECT_EQ(cpu::exp_approx(-1000.0f) < 1e-37f, true);  // clamps, no NaN/garbage
  EXPECT_TRUE(std::isfinite(cpu::exp_approx(1000.0f)));
}

// ---------------------------------------------------------------- embedding
TEST(Ops, EmbeddingRejectsOutOfRangeToken) {
  std::vector<float> w(4 * 2), out(2 * 2);
  std::vector<int32_t> tokens = {1, 4};
  try {
    cpu::embedding_forward<float>(out.data(), tokens.data(), w.data(), 2, 2, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 4"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------ linear, bias, axpby
// A linear layer on views: x columns [c0, c0 + IC) of a wider activation, the
// block rows [r0, r0 + OC) x columns [c0, c0 + IC) of a full weight (one
// shard of it), out into columns of a wider output; through the backend, as
// the executor calls it. Equal to the same op on compact copies, and nothing
// outside the views is touched.
TYPED_TEST(OpsTest, LinearOnViewsEqualsLinearOnCompactCopies) {
  using T = TypeParam;
  const auto be = ops::make_backend<T>();
  const int64_t N = 11;
  const int IX = 40, OW = 30, c0 = 7, r0 = 5, IC = 19, OC = 13, OX = 25, o0 = 4;
  auto xf = cast_vec<T>(random_vec<double>(N * IX, 61)),
       wf = cast_vec<T>(random_vec<double>(OW * IX, 62));
  auto b = cast_vec<T>(random_vec<double>(OC, 63));
  std::vector<T> xc(N * IC), wc(OC * IC);
  for (int64_t n = 0; n < N; ++n)
    for (int i = 0; i < IC; ++i) xc[n * IC + i] = xf[n * IX + c0 + i];
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) wc[o * IC + i] = wf[(r0 + o) * IX + c0 + i];
  const ops::LinearLd ld{IX, IX, OX};
  const T* xv = xf.data() + c0;
  const T* wv = wf.data() + int64_t(r0) * IX + c0;
  // Forward.
  std::vector<T> outc(N * OC), outf(N * OX, T(7));
  be->linear_forward(outc.data(), xc.data(), wc.data(), b.data(), N, IC, OC);
  be->linear_forward(outf.data() + o0, xv, wv, b.data(), N, IC, OC, ld);
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < OX; ++j) {
      const T got = outf[n * OX + j];
      if (j < o0 || j >= o0 + OC)
        ASSERT_EQ(got, T(7)) << "output outside the view was written";
      else
        EXPECT_NEAR(double(got), double(outc[n * OC + j - o0]),
                    1e-5 * (1 + std::fabs(double(got))));
    }
  // Backward: dx into the activation view (accumulating), dw into the weight view.
  auto dyc = cast_vec<T>(random_vec<double>(N * OC, 64));
  std::vector<T> dyf(N * OX, T(0));
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < OC; ++j) dyf[n * OX + o0 + j] = dyc[n * OC + j];
  std::vector<T> dxc(N * IC, T(1)), dwc(OC * IC, T(0)), dbc(OC, T(0));
  std::vector<T> dxf(N * IX, T(1)), dwf(OW * IX, T(0)), dbf(OC, T(0));
  be->linear_backward(dxc.data(), dwc.data(), dbc.data(), dyc.data(), xc.data(), wc.data(), N, IC,
                      OC, true);
  be->linear_backward(dxf.data() + c0, dwf.data() + int64_t(r0) * IX + c0, dbf.data(),
                      dyf.data() + o0, xv, wv, N, IC, OC, true, ld);
  auto near = [](T a, T b) {
    return std::fabs(double(a) - double(b)) <= 1e-5 * (1 + std::fabs(double(b)));
  };
  for (int64_t n = 0; n < N; ++n)
    for (int i = 0; i < IX; ++i) {
      const bool in = i >= c0 && i < c0 + IC;
      ASSERT_TRUE(in ? near(dxf[n * IX + i], dxc[n * IC + i - c0]) : dxf[n * IX + i] == T(1))
          << "dx[" << n << "," << i << "]";
    }
  for (int o = 0; o < OW; ++o)
    for (int i = 0; i < IX; ++i) {
      const bool in = o >= r0 && o < r0 + OC && i >= c0 && i < c0 + IC;
      ASSERT_TRUE(in ? near(dwf[o * IX + i], dwc[(o - r0) * IC + i - c0]) : dwf[o * IX + i] == T(0))
          << "dw[" << o << "," << i << "]";
    }
  for (int j = 0; j < OC; ++j) EXPECT_TRUE(near(dbf[j], dbc[j])) << "dbias " << j;
}

// Bias add and axpby through the backend, against the definitions.
TYPED_TEST(OpsTest, BiasAddAndAxpbyMatchTheirDefinitions) {
  using T = TypeParam;
  const auto be = ops::make_backend<T>();
  const int64_t N = 9;
  const int OC = 6, ld = 10;
  auto out = cast_vec<T>(random_vec<double>(N * ld, 71)),
       bias = cast_vec<T>(random_vec<double>(OC, 72));
  const auto before = out;
  be->bias_add_forward(out.data(), bias.data(), N, OC, ld);
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < ld; ++j)
      EXPECT_EQ(out[n * ld + j], j < OC ? T(before[n * ld + j] + bias[j]) : before[n * ld + j]);
  std::vector<T> db(OC, T(1));
  be->bias_add_backward(db.data(), before.data(), N, OC, ld);
  for (int j = 0; j < OC; ++j) {
    double want = 1;
    for (int64_t n = 0; n < N; ++n) want += double(before[n * ld + j]);
    EXPECT_NEAR(double(db[j]), want, 1e-5 * (1 + std::fabs(want)));
  }
  const int64_t n = 37;
  auto x = cast_vec<T>(random_vec<double>(n, 73)), y = cast_vec<T>(random_vec<double>(n, 74));
  std::vector<T> z(n);
  be->axpby_forward(z.data(), x.data(), y.data(), n, 0.25, -1.5);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], T(0.25) * x[i] + T(-1.5) * y[i]);
  std::vector<T> dx(n, T(2)), dy(n, T(3));
  be->axpby_backward(dx.data(), dy.data(), z.data(), n, 0.25, -1.5);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(dx[i], T(2) + T(0.25) * z[i]);
    EXPECT_EQ(dy[i], T(3) + T(-1.5) * z[i]);
  }
  be->axpby_backward(nullptr, dy.data(), z.data(), n, 1.0, 1.0);  // a null gradient is skipped
}

// --------------------------------------------------------------------- rope
TYPED_TEST(OpsTest, RopeMatchesHuggingFaceFormulaAndPreservesNorm) {
  using T = TypeParam;
  const int B = 2, S = 9, H = 3, D = 8, extra = 5, max_pos = 40;
  const int64_t stride = int64_t(H) * D + extra;  // rows carry more than the rotated heads
  for (double theta : {10000.0, 500000.0})
    for (int pos0 : {0, 17}) {
      auto x = random_vec<double>(int64_t(B) * S * stride, 11);
      std::vector<T> cos(max_pos * D / 2), sin(max_pos * D / 2);
      cpu::rope_table<T>(cos.data(), sin.data(), max_pos, D, theta);
      auto xt = cast_vec<T>(x);
      cpu::rope_forward<T>(xt.data(), cos.data(), sin.data(), B, S, H, D, stride, pos0);
      expect_close(xt, ref::rope(x, B, S, H, D, stride, theta, pos0), 5 * tol<T>(), 0,
                   cat("rope theta=", theta, " pos0=", pos0));
      // Rotation: each head keeps its norm; the backward (R^T) undoes it.
      for (int64_t r = 0; r < int64_t(B) * S; ++r)
        for (int h = 0; h < H; ++h) {
          double a = 0, b = 0;
          for (int i = 0; i < D; ++i) {
            a += x[r * stride + h * D + i] * x[r * stride + h * D + i];
            b += double(xt[r * stride + h * D + i]) * double(xt[r * stride + h * D + i]);
          }
          EXPECT_NEAR(a, b, 1e-4 * a);
        }
      cpu::rope_backward<T>(xt.data(), cos.data(), sin.data(), B, S, H, D, stride, pos0);
      expect_close(xt, x, 5 * tol<T>(), 0, "rope backward inverts forward");
    }
}

// ---------------------------------------------------------------- attention
// The AVX-512 kernels give exactly the AVX2 kernels' bits, forward and
// backward (the same sums in the same order at either width), so a run's
// numbers do not depend on which of the two the CPU took. On a CPU without
// AVX-512 this checks the AVX2 kernels are deterministic run to run.
TEST(Ops, AttentionKernelsGiveTheSameBitsAtEveryLevel) {
  struct Case {
    int B, S, Hq, Hkv, D;
  };
  for (const Case& c : {Case{2, 130, 4, 2, 48}, Case{1, 33, 6, 2, 6}, Case{1, 200, 2, 1, 64}}) {
    const int64_t QS = int64_t(c.Hq + 2 * c.Hkv) * c.D, OS = int64_t(c.Hq) * c.D;
    const auto qkv = cast_vec<float>(random_vec<double>(int64_t(c.B) * c.S * QS, 21, 1.5));
    const auto dout = cast_vec<float>(random_vec<double>(int64_t(c.B) * c.S * OS, 22));
    std::vector<std::vector<float>> results;
    std::vector<CpuLevel> levels = testing::cpu_levels();
    levels.push_back(levels.back());  // and once more at the highest level
    for (CpuLevel level : levels) {
      testing::ForceCpuLevel force(level);
      std::vector<float> out(size_t(c.B) * c.S * OS), lse(size_t(c.B) * c.Hq * c.S);
      std::vector<float> dqkv(qkv.size());
      cpu::attention_forward<float>(out.data(), lse.data(), qkv.data(), c.B, c.S, c.Hq, c.Hkv, c.D);
      cpu::attention_backward<float>(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                     c.B, c.S, c.Hq, c.Hkv, c.D);
      out.insert(out.end(), lse.begin(), lse.end());
      out.insert(out.end(), dqkv.begin(), dqkv.end());
      results.push_back(out);
    }
    for (size_t i = 1; i < results.size(); ++i) {
      ASSERT_EQ(results[i].size(), results[0].size());
      EXPECT_EQ(std::memcmp(results[i].data(), results[0].data(), results[0].size() * 4), 0)
          << "attention B" << c.B << " T" << c.S << " D" << c.D << ": " << cpu_level_name(levels[i])
          << " differs from " << cpu_level_name(levels[0]);
    }
  }
}

// The row kernels behind softmax and cross-entropy: vector lanes and the
// scalar tail compute the same exp, and sums match a double reference.
TEST(VecMath, RowKernelsMatchReference) {
  for (int n : {1, 7, 16, 17, 40, 1000}) {
    auto x = cast_vec<float>(random_vec<double>(n, 31, 20.0));
    const float m = cpu::row_max(x.data(), n);
    EXPECT_EQ(m, *std::max_element(x.begin(), x.end())) << n;
    std::vector<float> e(size_t(n), 0.0f), s(size_t(n), 0.0f);
    const float sum = cpu::exp_shift_sum(e.data(), x.data(), n, m);
    EXPECT_EQ(sum, cpu::exp_shift_sum<float>(nullptr, x.data(), n, m)) << n;
    cpu::scaled_exp_shift(s.data(), x.data(), n, m, 0.5f);
    double want = 0;
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(e[j], cpu::exp_approx(x[j] - m)) << "lane and scalar exp differ at " << j;
      EXPECT_EQ(s[j], 0.5f * e[j]) << j;
      want += std::exp(double(x[j]) - m);
    }
    EXPECT_NEAR(sum, want, 1e-6 * want) << n;
  }
  // Extremes clamp instead of overflowing; NaN stays NaN (in lanes and tails).
  const std::vector<float> v = {-1e30f, -100.0f, 0.0f, 100.0f, 1e30f, std::nanf("")};
  std::vector<float> x;
  for (int r = 0; r < 7; ++r) x.insert(x.end(), v.begin(), v.end());
  std::vector<float> e(x.size());
  cpu::scaled_exp_shift(e.data(), x.data(), int(x.size()), 0.0f, 1.0f);
  for (size_t j = 0; j < x.size(); ++j) {
    switch (j % v.size()) {
      case 0:
      case 1:
        EXPECT_LT(e[j], 1e-37f) << j;
        break;
      case 2:
        EXPECT_EQ(e[j], 1.0f) << j;
        break;
      case 3:
      case 4:
        EXPECT_TRUE(std::isfinite(e[j]) && e[j] > 1e37f) << j;
        break;
      default:
        EXPECT_TRUE(std::isnan(e[j])) << j;
    }
  }
}

TEST(Ops, AttentionRejectsIndivisibleHeads) {
  std::vector<float> buf(1000);
  EXPECT_THROW(cpu::attention_forward<float>(buf.data(), buf.data(), buf.data(), 1, 2, 3, 2, 4),
               Error);
}

// ----------------------------------------------------------------- residual
TYPED_TEST(OpsTest, ResidualForwardAndBackward) {
  using T = TypeParam;
  const int64_t n = 101;
  auto a = cast_vec<T>(random_vec<double>(n, 14)), b = cast_vec<T>(random_vec<double>(n, 15));
  auto d = cast_vec<T>(random_vec<double>(n, 16));
  std::vector<T> out(n), da(n, T(1)), db(n, T(2));
  cpu::residual_forward<T>(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  cpu::residual_forward<T>(a.data(), a.data(), b.data(), n);  // in place
  expect_close(a, out, 0, 0, "in-place residual");
  cpu::residual_backward<T>(da.data(), db.data(), d.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(da[i], T(1) + d[i]);
    EXPECT_EQ(db[i], T(2) + d[i]);
  }
}

// ---------------------------------------------------------- head + cross-entropy
// The chunked head must equal the unchunked one (one chunk holding all rows).
TYPED_TEST(OpsTest, HeadCrossEntropyChunkedEqualsUnchunked) {
  using T = TypeParam;
  const int64_t N = 50;
  const int C = 16, V = 37;
  auto x = cast_vec<T>(random_vec<double>(N * C, 21, 2.0));
  auto wn = cast_vec<T>(random_vec<double>(C, 22)),
       wo = cast_vec<T>(random_vec<double>(int64_t(V) * C, 23));
  auto targets = random_tokens(N, V, 24);
  targets[0] = targets[49] = cpu::kIgnoreIndex;
  struct Out {
    double loss = 0;
    std::vector<T> dx, dwn, dwo, lse;
  };
  auto run = [&](int64_t chunk) {
    cpu::set_head_ce_chunk_rows(chunk);
    Out o;
    o.dx.assign(N * C, T(0));
    o.dwn.assign(C, T(0));
    o.dwo.assign(int64_t(V) * C, T(0));
    o.lse.assign(N, T(0));
    std::vector<T> xn(N * C), rstd(N);
    o.loss = cpu::head_ce_forward<T>(xn.data(), rstd.data(), o.lse.data(), nullptr, nullptr,
                                     x.data(), wn.data(), wo.data(), targets.data(), N, C, V, 1e-5);
    cpu::head_ce_backward<T>(o.dx.data(), o.dwn.data(), o.dwo.data(), x.data(), xn.data(),
                             rstd.data(), o.lse.data(), wn.data(), wo.data(), targets.data(), N, C,
                             V, 1.0 / 48);
    return o;
  };
  const Out whole = run(N);
  for (int64_t chunk : {1, 7, 16, 49}) {
    const Out part = run(chunk);
    const std::string name = cat("chunk ", chunk);
    EXPECT_NEAR(part.loss, whole.loss, tol<T>() * whole.loss) << name;
    expect_close(part.lse, whole.lse, tol<T>(), 0, name + " lse");
    expect_close(part.dx, whole.dx, tol<T>(), 0, name + " dx");
    expect_close(part.dwn, whole.dwn, tol<T>(), 0, name + " dwn");
    expect_close(part.dwo, whole.dwo, tol<T>(), 0, name + " dwout");
  }
  cpu::set_head_ce_chunk_rows(0);
}

TYPED_TEST(OpsTest, HeadCrossEntropyFusedEqualsForwardThenBackward) {
  using T = TypeParam;
  const int64_t N = 40;
  const int C = 16, V = 45;
  auto x = cast_vec<T>(random_vec<double>(N * C, 25, 2.0));
  auto wn = cast_vec<T>(random_vec<double>(C, 26)),
       wo = cast_vec<T>(random_vec<double>(int64_t(V) * C, 27));
  auto targets = random_tokens(N, V, 28);
  targets[7] = cpu::kIgnoreIndex;
  for (int64_t chunk : {0, 9}) {
    cpu::set_head_ce_chunk_rows(chunk);
    std::vector<T> xn(N * C), rstd(N), lse(N);
    std::vector<T> dx1(N * C, T(0.25)), dwn1(C, T(0)), dwo1(int64_t(V) * C, T(0));
    std::vector<T> dx2 = dx1, dwn2 = dwn1, dwo2 = dwo1;
    int64_t nv1 = 0, nv2 = 0;
    const double l1 =
        cpu::head_ce_forward<T>(xn.data(), rstd.data(), lse.data(), nullptr, &nv1, x.data(),
                                wn.data(), wo.data(), targets.data(), N, C, V, 1e-5);
    cpu::head_ce_backward<T>(dx1.data(), dwn1.data(), dwo1.data(), x.data(), xn.data(), rstd.data(),
                             lse.data(), wn.data(), wo.data(), targets.data(), N, C, V, 0.5);
    const double l2 = cpu::head_ce_forward_backward<T>(
        dx2.data(), dwn2.data(), dwo2.data(), xn.data(), rstd.data(), &nv2, x.data(), wn.data(),
        wo.data(), targets.data(), N, C, V, 1e-5, 0.5);
    EXPECT_EQ(nv1, nv2);
    EXPECT_NEAR(l1, l2, tol<T>() * l1);
    expect_close(dx2, dx1, tol<T>(), 0, "fused dx");
    expect_close(dwn2, dwn1, tol<T>(), 0, "fused dwn");
    expect_close(dwo2, dwo1, tol<T>(), 0, "fused dwout");
  }
  cpu::set_head_ce_chunk_rows(0);
}

// -------------------------------------------------------------------- adamw
TEST(Ops, AdamWWeightDecayIsDecoupled) {
  // With a zero gradient the moments stay zero and only the decay acts:
  // p <- p (1 - lr wd), independent of the adaptive scaling.
  std::vector<double> p = {1.0, -2.0, 0.5}, g(3, 0.0), m(3, 0.0), v(3, 0.0);
  cpu::AdamWStep s;
  s.lr = 0.1;
  s.weight_decay = 0.5;
  s.step = 1;
  cpu::adamw_update<double>(p.data(), g.data(), m.data(), v.data(), 3, s);
  EXPECT_DOUBLE_EQ(p[0], 0.95);
  EXPECT_DOUBLE_EQ(p[1], -1.9);
  EXPECT_DOUBLE_EQ(p[2], 0.475);
}

// ---------------------------------------------------------------- clipping
TEST(Ops, GlobalNormClipping) {
  std::vector<float> g = {3.0f, 4.0f};
  auto sum_squares = [&] {
    double acc = 0;
    cpu::sum_squares<float>(&acc, g.data(), 2);
    return acc;
  };
  const double norm = std::sqrt(sum_squares());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_DOUBLE_EQ(cpu::clip_coefficient(norm, 10.0), 1.0);  // under the limit: untouched
  const double k = cpu::clip_coefficient(norm, 1.0);
  EXPECT_NEAR(k, 1.0 / (5.0 + 1e-6), 1e-12);
  EXPECT_DOUBLE_EQ(cpu::clip_coefficient(norm, 0.0), 1.0);  // disabled
  // The factor an AdamW step applies: the host's, or from the sums of squares.
  cpu::AdamWStep s;
  double f = 0;
  s.clip = 0.25;
  ASSERT_TRUE(ops::adamw_clip_factor(s, &f));
  EXPECT_EQ(f, 0.25);
  const double squares[2] = {9.0, 16.0};
  s.squares = squares;
  s.max_norm = 1.0;
  ASSERT_TRUE(ops::adamw_clip_factor(s, &f));
  EXPECT_EQ(f, k);
  const double bad[2] = {9.0, std::numeric_limits<double>::quiet_NaN()};
  s.squares = bad;
  EXPECT_FALSE(ops::adamw_clip_factor(s, &f));
  const double inf[2] = {std::numeric_limits<double>::infinity(), 0.0};
  s.squares = inf;
  EXPECT_FALSE(ops::adamw_clip_factor(s, &f));
}

// The backend's scalar accumulators: sums of squares add up on the backend and
// are read once.
TEST(Ops, SumSquaresAccumulatesIntoBackendScalars) {
  auto be = ops::make_backend<float>();
  std::vector<float> a = {3.0f, 4.0f}, b = {1.0f, 2.0f, 2.0f};
  ops::DeviceBuffer<float> da(be.get(), 2), db(be.get(), 3);
  be->from_host(da.data(), a.data(), 2);
  be->from_host(db.data(), b.data(), 3);
  double* acc = be->alloc_scalars(2);
  double host[2] = {-1, -1};
  be->read_scalars(host, acc, 2);
  EXPECT_EQ(host[0], 0.0);  // allocated zeroed
  EXPECT_EQ(host[1], 0.0);
  be->sum_squares(acc, da.data(), 2);
  be->sum_squares(acc, db.data(), 3);
  be->sum_squares(acc + 1, db.data(), 3);
  be->read_scalars(host, acc, 2);
  EXPECT_DOUBLE_EQ(host[0], 25.0 + 9.0);
  EXPECT_DOUBLE_EQ(host[1], 9.0);
  be->zero_scalars(acc, 2);
  be->read_scalars(host, acc, 2);
  EXPECT_EQ(host[0], 0.0);
  be->free_scalars(acc);
}

}  // namespace
}  // namespace strata
