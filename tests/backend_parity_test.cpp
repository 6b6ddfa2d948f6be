// The op table (op_table.h, op_table.cpp) on every backend this build has:
// each row's forward against its reference, and every backend against the
// CPU backend, forward and backward; a coverage test over the ops of
// ops/ops.def; and what only the kernel backends have (the SIMT executor's
// launches, bf16 operand rounding, the GEMM fallback). The gradient checks of the same table
// are tests/grad_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/storage.h"
#include "backends/cuda/kernel_backend.h"
#include "backends/cuda/simt/simt.h"
#include "core/error.h"
#include "op_table.h"
#include "ops/backend.h"
#include "reference.h"

using namespace strata;
using optable::Case;
using optable::Host;
using optable::Result;

namespace {

// Parity: max |a - b| <= tol * max(1, max |b|), element by element.
void expect_close(const Host& a, const Host& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 1;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= tol * scale)) {
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i] << " (scale "
                    << scale << ")";
      return;
    }
}

// bf16 storage against fp32 storage from the same values: each element
// within one rounding to bf16 of itself (half a unit in the last of 8
// significant bits: 2^-8 of its magnitude) and one of the largest, for rows
// that store an intermediate activation and read it back (a linear output
// its bias is added to; a gradient computed into a buffer, then added).
void expect_bf16_roundings(const Host& got, const Host& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= std::ldexp(std::abs(want[i]) + scale, -8))) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " in bf16 storage, " << want[i]
                    << " in fp32 (largest " << scale << ")";
      return;
    }
}

// Reference: |got - want| <= tol * max |want|, and exactly 0 where the
// reference is 0 (ignored tokens, rows of another shard, outside views).
void expect_reference(const Host& got, const Host& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= (want[i] == 0 ? 0 : tol * scale))) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << ", reference " << want[i]
                    << " (tolerance " << tol * scale << ")";
      return;
    }
}

template <typename T>
double reference_tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

// Every row's forward on every backend against its reference, computed from
// the inputs as the backend got them (rounded to T).
template <typename T>
void check_references() {
  const auto cases = optable::op_table<T>();
  for (const Case<T>& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.ref) << "a row without a reference";
    const std::vector<Host> in = optable::inputs_of(c);
    std::vector<Host> rounded = in;
    for (Host& h : rounded)
      for (double& x : h) x = double(T(x));
    const optable::Expected want = c.ref(rounded);
    const double tol = reference_tolerance<T>() * c.ref_tol;
    for (const std::string& name : optable::backends()) {
      SCOPED_TRACE(name);
      auto be = optable::make<T>(name);
      const Result got = optable::run<T>(c, *be, in, nullptr, 0, nullptr);
      ASSERT_LE(want.out.size(), got.out.size());
      for (size_t k = 0; k < want.out.size(); ++k)
        if (!want.out[k].empty())
          expect_reference(got.out[k], want.out[k], tol, "output " + std::to_string(k));
      ASSERT_LE(want.scalars.size(), got.scalars.size());
      for (size_t k = 0; k < want.scalars.size(); ++k)
        expect_reference({got.scalars[k]}, {want.scalars[k]}, tol, "scalar " + std::to_string(k));
    }
  }
}

// Every backend's outputs, scalars and gradients equal the CPU backend's,
// from the same output gradients into the same non-zero gradient buffers.
template <typename T>
void check_parity() {
  const auto cases = optable::op_table<T>();
  ASSERT_GE(cases.size(), 30u);
  for (const Case<T>& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<Host> in = optable::inputs_of(c);
    std::vector<Host> dout, base;
    for (size_t k = 0; k < c.out.size(); ++k)
      dout.push_back(optable::random_host(c.out[k], 101 + k));
    for (size_t k = 0; k < c.in.size(); ++k) base.push_back(optable::random_host(c.in[k], 201 + k));
    const double dscalar = 0.7;
    auto cpu = ops::make_backend<T>("cpu");
    const Result ref = optable::run<T>(c, *cpu, in, &dout, dscalar, &base);
    for (const std::string& name : optable::backends()) {
      SCOPED_TRACE(name);
      auto be = optable::make<T>(name);
      const Result got = optable::run<T>(c, *be, in, &dout, dscalar, &base);
      for (size_t k = 0; k < c.out.size(); ++k)
        expect_close(got.out[k], ref.out[k], optable::tolerance<T>(),
                     "output " + std::to_string(k));
      expect_close(got.scalars, ref.scalars, optable::tolerance<T>(), "scalars");
      for (size_t k = 0; k < got.grads.size(); ++k)
        expect_close(got.grads[k], ref.grads[k], optable::tolerance<T>(),
                     "gradient " + std::to_string(k));
    }
  }
}

// bf16 storage: every row whose ops take activations (found by
// optable::activation_storage from the op contract), run with those stored
// in bf16 and again in fp32 from the same bf16-rounded values, on every
// backend. The two compute the same fp32 values and differ only by the
// rounding of what is stored (expect_bf16_roundings).
void check_bf16_storage() {
  int rows = 0;
  for (const Case<float>& c : optable::op_table<float>()) {
    SCOPED_TRACE(c.name);
    optable::RowStorage rs;
    try {
      rs = optable::activation_storage(c, ops::Dtype::BF16);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    if (!rs.any) continue;
    ++rows;
    const optable::Storage& st = rs.storage;
    auto rounded = [](std::vector<Host> v, const std::vector<ops::Dtype>& dt) {
      for (size_t k = 0; k < v.size() && k < dt.size(); ++k)
        if (dt[k] == ops::Dtype::BF16)
          for (double& x : v[k]) x = double(float(ops::bf16(float(x))));
      return v;
    };
    const std::vector<Host> in = rounded(optable::inputs_of(c), st.in);
    std::vector<Host> dout, base;
    for (size_t k = 0; k < c.out.size(); ++k)
      dout.push_back(optable::random_host(c.out[k], 101 + k));
    for (size_t k = 0; k < c.in.size(); ++k) base.push_back(optable::random_host(c.in[k], 201 + k));
    dout = rounded(dout, st.dout);
    base = rounded(base, st.grad);
    for (const std::string& name : optable::backends()) {
      SCOPED_TRACE(name);
      auto be = optable::make<float>(name);
      const Result want = optable::run<float>(c, *be, in, &dout, 0.7, &base);
      Result got;
      try {
        got = optable::run<float>(c, *be, in, &dout, 0.7, &base, &st);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      for (size_t k = 0; k < c.out.size(); ++k)
        expect_bf16_roundings(got.out[k], want.out[k], "output " + std::to_string(k));
      expect_bf16_roundings(got.scalars, want.scalars, "scalars");
      for (size_t k = 0; k < got.grads.size(); ++k)
        expect_bf16_roundings(got.grads[k], want.grads[k], "gradient " + std::to_string(k));
    }
  }
  EXPECT_GE(rows, 25);
}

}  // namespace

TEST(BackendParity, EveryOpWithActivationsMatchesInBf16Storage) { check_bf16_storage(); }

// An activation knows its storage: pointer arithmetic counts its own
// elements, a bf16 one refuses to become a float* (a kernel without a bf16
// path says so instead of reading bf16 bits as floats), and one op's
// activations may not mix storages.
TEST(BackendParity, ActivationsKeepTheirStorage) {
  std::vector<ops::bf16> h(8);
  std::vector<float> f(8);
  const ops::Act<float> a(h.data()), b(f.data());
  EXPECT_TRUE(a.is_bf16());
  EXPECT_TRUE(b.native());
  EXPECT_EQ((a + 3).raw(), static_cast<void*>(h.data() + 3));
  EXPECT_EQ((b + 3).raw(), static_cast<void*>(f.data() + 3));
  EXPECT_EQ(static_cast<float*>(b + 2), f.data() + 2);
  try {
    float* p = a;
    ADD_FAILURE() << "a bf16 activation became a float* " << p;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no bf16-storage path"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ops::common_storage(ops::Dtype::F32, a, ops::Act<float>(), a + 1), ops::Dtype::BF16);
  EXPECT_THROW(ops::common_storage(ops::Dtype::F32, a, b), Error);
  auto cpu = ops::make_backend<float>("cpu");
  ops::ActBuffer<float> x(cpu.get(), 5, ops::Dtype::BF16), y(cpu.get(), 5);
  EXPECT_THROW(cpu->residual_forward(x.data(), x.data(), y.data(), 5), Error);
  // A copy between the storages converts (round to nearest even, widen
  // exactly), on every backend: how bf16 activations meet fp32 buffers.
  for (const char* device : {"cpu", "simt"}) {
    auto be = ops::make_backend<float>(device);
    optable::Device<float> dev(*be);
    const Host values = {1.0, 1.00390625, 1.01171875, -3.1415926, 1e-3};  // ties to even, ...
    const ops::Act<float> f32 = dev.put(values);
    const ops::Act<float> b16 = dev.put(Host(5, 0.0), ops::Dtype::BF16);
    const ops::Act<float> back = dev.put(Host(5, 0.0));
    be->copy(b16, f32, 5);
    be->copy(back, b16, 5);
    const Host got = dev.get(back, 5);
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(got[i], double(float(ops::bf16(float(values[i]))))) << device << " " << i;
    EXPECT_EQ(got[1], 1.0) << "a tie rounds to even";
  }
  EXPECT_THROW(
      (ops::ActBuffer<double>(ops::make_backend<double>("cpu").get(), 4, ops::Dtype::BF16)), Error);
}

// The three roundings to bf16 (ops::bf16 on the host, the CPU kernels'
// vector stores, the CUDA kernels' act_store) give the same bits: nearest,
// ties to even, NaN quiet, infinities and signed zeros kept, subnormals
// rounded like any other value; and widening is exact.
TEST(BackendParity, Bf16RoundingIsTheSameInEveryKernel) {
  std::vector<float> f = {0.0f,     -0.0f,     1.0f, -1.0f,
                          INFINITY, -INFINITY, NAN,  std::numeric_limits<float>::denorm_min(),
                          1e-40f,   3.4e38f};
  // Ties: 1 + 2^-8 (halfway between 1 and the next bf16) rounds to 1 (even),
  // 1 + 3 * 2^-8 rounds up to 1 + 2^-6 (even); just above a tie rounds up.
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF808000u, 0x7F7F8000u})
    f.push_back(std::bit_cast<float>(bits));
  for (int i = 0; i < 2000; ++i) f.push_back(float(optable::random_host(1, 900 + i)[0] * 1e3));
  const std::vector<uint16_t> want_ties = {0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80};
  for (size_t i = 0; i < want_ties.size(); ++i)
    EXPECT_EQ(ops::bf16(f[10 + i]).bits, want_ties[i]) << "tie case " << i;
  EXPECT_EQ(ops::bf16(NAN).bits & 0x7FC0, 0x7FC0) << "NaN stays a quiet NaN";
  std::vector<ops::bf16> cpu(f.size());
  cpu::narrow(cpu.data(), f.data(), int64_t(f.size()));
  std::vector<float> back(f.size());
  cpu::widen(back.data(), cpu.data(), int64_t(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    SCOPED_TRACE(f[i]);
    const ops::bf16 host(f[i]);
    EXPECT_EQ(cpu[i].bits, host.bits);
    EXPECT_EQ(cuda::act_store<ops::bf16>(f[i]).bits, host.bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t(host.bits) << 16);
    EXPECT_EQ(std::bit_cast<uint32_t>(cuda::act_load(host)), uint32_t(host.bits) << 16);
  }
}

TEST(BackendParity, EveryOpFloatMatchesItsReference) { check_references<float>(); }
TEST(BackendParity, EveryOpDoubleMatchesItsReference) { check_references<double>(); }
TEST(BackendParity, EveryOpFloatMatchesTheCpuBackend) { check_parity<float>(); }
TEST(BackendParity, EveryOpDoubleMatchesTheCpuBackend) { check_parity<double>(); }

// The table covers the declared ops: each op of ops/ops.def is called by a
// row (so it is compared across backends), a forward by a row with a
// reference, a backward by the backward of a row with a gradient check. A
// new op fails here until its rows exist.
TEST(BackendParity, EveryDeclaredOpHasAReferenceAGradientCheckAndAParityRow) {
  std::set<std::string> called, referenced, gradient_checked;
  for (const Case<double>& c : optable::op_table<double>()) {
    std::set<std::string> seen;
    optable::Wrapped<double> be(ops::make_backend<double>("cpu"),
                                [&](const char* op) -> std::shared_ptr<void> {
                                  seen.insert(op);
                                  return nullptr;
                                });
    const std::vector<Host> in = optable::inputs_of(c);
    optable::run<double>(c, be, in, nullptr, 0, nullptr);
    const std::set<std::string> forward = seen;
    std::vector<Host> dout, base;
    for (int64_t n : c.out) dout.push_back(Host(size_t(n), 1.0));
    for (int64_t n : c.in) base.push_back(Host(size_t(n), 0.0));
    optable::run<double>(c, be, in, &dout, 1.0, &base);
    called.insert(seen.begin(), seen.end());
    if (c.ref) referenced.insert(forward.begin(), forward.end());
    const bool has_gradient_check =
        c.bwd && std::find(c.diff.begin(), c.diff.end(), true) != c.diff.end();
    if (has_gradient_check)
      for (const std::string& op : seen)
        if (!forward.count(op)) gradient_checked.insert(op);
  }
  for (const ops::OpInfo& op : ops::kOps) {
    EXPECT_TRUE(called.count(op.name)) << op.name << ": no row of tests/op_table.cpp calls it";
    if (op.role == ops::OpRole::Forward)
      EXPECT_TRUE(referenced.count(op.name))
          << op.name << ": no row with a reference (tests/reference.h) calls it";
    else
      EXPECT_TRUE(gradient_checked.count(op.name))
          << op.name << ": no row with a gradient check calls it in its backward";
  }
}

TEST(BackendParity, SimtRunsTheKernelsAndReportsDeviceMemory) {
  auto be = ops::make_backend<float>("simt");
  EXPECT_STREQ(be->name(), "simt");
  EXPECT_FALSE(be->is_host());
  const uint64_t before = simt::launch_count();
  ops::DeviceBuffer<float> a(be.get(), 100), b(be.get(), 100);
  be->residual_forward(a.data(), a.data(), b.data(), 100);
  EXPECT_GT(simt::launch_count(), before);
  try {
    ops::make_backend<float>("tpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown device 'tpu'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("simt"), std::string::npos) << e.what();
  }
}

// bf16 matmuls round both operands to bf16 exactly as the CPU backend does
// and accumulate in fp32. On simt the sums agree with the CPU's to 1e-6 of
// the largest output, as every op does. On cuda (tensor cores, cuBLASLt's
// split K) the order of the fp32 accumulation differs, and each element is
// held to the bound of two orders of one sum. A product of two bf16 values
// (8 significant bits each) is exact in fp32 (24 bits), so only the K - 1
// additions round: in any order they err by at most (K - 1) u sum_k |a_k b_k|
// to first order, with u = eps_fp32 / 2 = 2^-24 for rounded additions and 2u
// for an accumulator that truncates (as tensor cores may). Two such sums
// differ by at most (K - 1) 3u sum |a_k b_k|, within
//   |cuda - cpu| <= 2 K eps_fp32 sum_k |a_k| |b_k|   (eps_fp32 = 2^-23)
// per element, the a_k and b_k the bf16-rounded operands. The fp32 product
// breaks the bound: it separates bf16 from fp32.
TEST(BackendParity, Bf16MatmulsRoundOperandsLikeTheCpuBackend) {
  const int N = 9, IC = 37, OC = 11;
  const Host x = optable::random_host(N * IC, 5), w = optable::random_host(OC * IC, 6);
  auto linear = [&](ops::Backend<float>& be, ops::MatmulPrecision precision) {
    be.set_matmul_precision(precision);
    optable::Device<float> dev(be);
    float* out = dev.put(Host(size_t(N * OC), 0.0));
    be.linear_forward(out, dev.put(x), dev.put(w), nullptr, N, IC, OC);
    be.set_matmul_precision(ops::MatmulPrecision::FP32);
    return dev.get(out, N * OC);
  };
  auto cpu = ops::make_backend<float>("cpu");
  const Host want = linear(*cpu, ops::MatmulPrecision::BF16);

  std::vector<float> xb(x.begin(), x.end()), wb(w.begin(), w.end());
  cpu::round_to_bf16_serial(xb.data(), xb.data(), int64_t(xb.size()));
  cpu::round_to_bf16_serial(wb.data(), wb.data(), int64_t(wb.size()));
  const double eps = std::numeric_limits<float>::epsilon();
  Host bound(size_t(N * OC));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double sum = 0;
      for (int k = 0; k < IC; ++k) sum += std::abs(double(xb[n * IC + k]) * wb[o * IC + k]);
      bound[size_t(n * OC + o)] = 2 * IC * eps * sum;
    }
  auto within_bound = [&](const Host& got) {
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::abs(got[i] - want[i]) <= bound[i])) return i;
    return got.size();
  };

  for (const std::string& name : optable::backends()) {
    if (name.rfind("cpu", 0) == 0) continue;  // the CPU backend's paths: test_ops
    SCOPED_TRACE(name);
    auto be = optable::make<float>(name);
    const Host got = linear(*be, ops::MatmulPrecision::BF16);
    if (name == "simt") {
      expect_close(got, want, 1e-6, "bf16 linear");
    } else {
      const size_t i = within_bound(got);
      EXPECT_EQ(i, got.size()) << "bf16 linear element " << i << ": " << got[i] << " vs " << want[i]
                               << ", beyond 2 K eps sum|a||b| = " << bound[i];
    }
    // And it is not the fp32 product, which the bound tells apart.
    const Host fp32 = linear(*be, ops::MatmulPrecision::FP32);
    double diff = 0;
    for (size_t i = 0; i < fp32.size(); ++i) diff = std::max(diff, std::abs(fp32[i] - got[i]));
    EXPECT_GT(diff, 1e-4);
    EXPECT_LT(within_bound(fp32), fp32.size()) << "the bound does not tell bf16 from fp32";
  }
}

// ------------------------------------------------------------ GEMM fallback
// The operands gemm_engine.h's rule keeps from cuBLASLt (leading dimensions
// not a multiple of 16 bytes, views not 16-byte aligned) run on strata's
// tiled GEMM kernel, through the SIMT executor here as on a GPU; aligned ones
// do not. Each is checked against the CPU GEMM: within 1e-5 of the largest
// |C| in fp32 and bf16 (the same bf16 operands, fp32 sums in another order),
// 1e-12 in double.
namespace {

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad_a, pad_b, pad_c;  // leading dimension = stored row length + pad
  int64_t off_a, off_b, off_c;  // elements from an aligned start (a view)
  double alpha, beta;
};

const GemmCase kOddGemms[] = {
    {false, false, 9, 13, 37, 0, 0, 0, 0, 0, 0, 1.0, 0.0},   // odd ld everywhere
    {true, false, 17, 11, 20, 1, 0, 3, 0, 0, 0, 1.5, 0.5},   // A^T, ld M + 1
    {false, true, 40, 35, 50, 2, 1, 0, 0, 0, 0, -1.0, 1.0},  // B^T, several tiles
    {true, true, 21, 18, 33, 0, 3, 2, 0, 0, 0, 0.5, -2.0},   // both transposed
    {false, false, 16, 16, 32, 0, 0, 0, 1, 0, 0, 1.0, 1.0},  // A a view one element off
    {true, false, 16, 24, 32, 0, 0, 0, 0, 0, 1, 2.0, 0.25},  // C a view one element off
};
// Aligned for every precision: ld multiples of 8 elements, 16-byte starts.
const GemmCase kAlignedGemms[] = {
    {false, true, 16, 24, 32, 0, 8, 0, 0, 0, 0, 1.0, 0.0},
    {true, false, 24, 16, 40, 8, 0, 8, 8, 0, 8, 1.5, 0.5},
};

// Runs `c` on the simt backend's GEMM engine and on the CPU GEMM; returns
// whether the engine took the fallback.
template <typename T>
bool run_gemm_case(const GemmCase& c, ops::MatmulPrecision prec, const std::string& what) {
  auto be = ops::make_backend<T>("simt");
  auto* kb = dynamic_cast<cuda::KernelBackend<T>*>(be.get());
  EXPECT_NE(kb, nullptr);
  if (!kb) return false;
  const int64_t rows_a = c.ta ? c.K : c.M, cols_a = c.ta ? c.M : c.K;
  const int64_t rows_b = c.tb ? c.N : c.K, cols_b = c.tb ? c.K : c.N;
  const int64_t lda = cols_a + c.pad_a, ldb = cols_b + c.pad_b, ldc = c.N + c.pad_c;
  const Host a = optable::random_host(c.off_a + rows_a * lda, 21);
  const Host b = optable::random_host(c.off_b + rows_b * ldb, 22);
  const Host c0 = optable::random_host(c.off_c + c.M * ldc, 23);
  // The CPU GEMM on the same values as T.
  std::vector<T> ha(a.begin(), a.end()), hb(b.begin(), b.end()), hc(c0.begin(), c0.end());
  const ops::MatmulPrecision saved = cpu::matmul_precision();
  cpu::set_matmul_precision(prec);
  cpu::gemm<T>(c.ta, c.tb, c.M, c.N, c.K, T(c.alpha), ha.data() + c.off_a, lda, hb.data() + c.off_b,
               ldb, T(c.beta), hc.data() + c.off_c, ldc);
  cpu::set_matmul_precision(saved);
  // The engine on backend memory.
  optable::Device<T> dev(*be);
  const T* da = dev.put(a);
  const T* db = dev.put(b);
  T* dc = dev.put(c0);
  cuda::GemmEngine<T>& engine = kb->gemm_engine();
  engine.set_precision(prec);
  const uint64_t before = engine.fallback_gemms();
  engine.gemm(c.ta, c.tb, c.M, c.N, c.K, T(c.alpha), da + c.off_a, lda, db + c.off_b, ldb,
              T(c.beta), dc + c.off_c, ldc);
  const uint64_t fallbacks = engine.fallback_gemms() - before;
  EXPECT_LE(fallbacks, 1u) << what;
  const Host got = dev.get(dc, int64_t(c0.size()));
  expect_close(got, Host(hc.begin(), hc.end()), std::is_same_v<T, double> ? 1e-12 : 1e-5, what);
  return fallbacks == 1;
}

std::string gemm_case_text(const GemmCase& c, const char* prec) {
  return cat(prec, " ", c.ta ? "A^T " : "", c.tb ? "B^T " : "", c.M, "x", c.N, "x", c.K, " pads ",
             c.pad_a, "/", c.pad_b, "/", c.pad_c, " offsets ", c.off_a, "/", c.off_b, "/", c.off_c);
}

}  // namespace

TEST(BackendParity, GemmOperandsCublasLtWouldRejectTakeTheFallback) {
  for (const GemmCase& c : kOddGemms) {
    for (auto prec : {ops::MatmulPrecision::FP32, ops::MatmulPrecision::BF16}) {
      const std::string what =
          gemm_case_text(c, prec == ops::MatmulPrecision::BF16 ? "bf16" : "fp32");
      EXPECT_TRUE(run_gemm_case<float>(c, prec, what)) << what << ": no fallback";
    }
    const std::string what = gemm_case_text(c, "double");
    EXPECT_TRUE(run_gemm_case<double>(c, ops::MatmulPrecision::FP32, what)) << what;
  }
}

TEST(BackendParity, GemmAlignedOperandsStayOnTheCublasLtPath) {
  for (const GemmCase& c : kAlignedGemms) {
    for (auto prec : {ops::MatmulPrecision::FP32, ops::MatmulPrecision::BF16}) {
      const std::string what =
          gemm_case_text(c, prec == ops::MatmulPrecision::BF16 ? "bf16" : "fp32");
      EXPECT_FALSE(run_gemm_case<float>(c, prec, what)) << what << ": took the fallback";
    }
    const std::string what = gemm_case_text(c, "double");
    EXPECT_FALSE(run_gemm_case<double>(c, ops::MatmulPrecision::FP32, what)) << what;
  }
  // ld 36 floats: 144 bytes, aligned in fp32; as bf16 operands 72 bytes, not.
  const GemmCase c{false, false, 8, 36, 36, 0, 0, 0, 0, 0, 0, 1.0, 0.0};
  EXPECT_FALSE(run_gemm_case<float>(c, ops::MatmulPrecision::FP32, "fp32 ld 36"));
  EXPECT_TRUE(run_gemm_case<float>(c, ops::MatmulPrecision::BF16, "bf16 ld 36"));
  EXPECT_TRUE(cuda::lt_gemm_ok(reinterpret_cast<const void*>(64), 36,
                               reinterpret_cast<const void*>(64), 36,
                               reinterpret_cast<const void*>(64), 36, 4, 4));
  EXPECT_FALSE(cuda::lt_gemm_ok(reinterpret_cast<const void*>(64), 36,
                                reinterpret_cast<const void*>(64), 36,
                                reinterpret_cast<const void*>(64), 36, 2, 4));
}

// A model-sized op with an odd width runs its GEMMs on the fallback and still
// matches the CPU backend (the linear op, forward).
TEST(BackendParity, GemmFallbackUnderTheLinearOp) {
  auto cpu = ops::make_backend<float>("cpu");
  auto simt = ops::make_backend<float>("simt");
  auto& engine = dynamic_cast<cuda::KernelBackend<float>&>(*simt).gemm_engine();
  const int N = 19, IC = 45, OC = 29;
  const Host x = optable::random_host(N * IC, 8), w = optable::random_host(OC * IC, 9);
  std::vector<Host> outs;
  const uint64_t before = engine.fallback_gemms();
  for (auto* be : {cpu.get(), simt.get()}) {
    optable::Device<float> dev(*be);
    float* out = dev.put(Host(size_t(N * OC), 0.0));
    be->linear_forward(out, dev.put(x), dev.put(w), nullptr, N, IC, OC);
    outs.push_back(dev.get(out, N * OC));
  }
  EXPECT_EQ(engine.fallback_gemms() - before, 1u);
  expect_close(outs[1], outs[0], 1e-5, "linear with IC 45, OC 29");
}

// The GEMM engines take activations stored in bf16 (gemm_engine.h): with
// bf16 precision the bf16 operands as they are (no conversion: on a GPU
// cuBLASLt reads them; only an fp32 operand is converted) and a bf16 C
// written directly, the fp32 result rounded once; with fp32 precision, and
// for the operands cuBLASLt is not given, on fp32 copies. Every mix of bf16
// and fp32 A, B, C against the CPU GEMM on the same (bf16-valued) operands:
// within 1e-5 of the largest |C| for an fp32 C, one bf16 step (2^-8 of the
// largest |C|) for a bf16 one.
TEST(BackendParity, GemmEngineReadsAndWritesBf16Activations) {
  using ops::Dtype;
  const GemmCase cases[] = {kAlignedGemms[0], kAlignedGemms[1], kOddGemms[0], kOddGemms[5]};
  for (const GemmCase& c : cases)  // (the first two go to cuBLASLt)
    for (auto prec : {ops::MatmulPrecision::FP32, ops::MatmulPrecision::BF16})
      for (int mask = 1; mask < 8; ++mask) {  // bit 0: A in bf16, bit 1: B, bit 2: C
        const bool a16 = mask & 1, b16 = mask & 2, c16 = mask & 4;
        const std::string what =
            cat(gemm_case_text(c, prec == ops::MatmulPrecision::BF16 ? "bf16" : "fp32"),
                ", bf16 storage of", a16 ? " A" : "", b16 ? " B" : "", c16 ? " C" : "");
        auto be = ops::make_backend<float>("simt");
        auto& kb = dynamic_cast<cuda::KernelBackend<float>&>(*be);
        const int64_t rows_a = c.ta ? c.K : c.M, cols_a = c.ta ? c.M : c.K;
        const int64_t rows_b = c.tb ? c.N : c.K, cols_b = c.tb ? c.K : c.N;
        const int64_t lda = cols_a + c.pad_a, ldb = cols_b + c.pad_b, ldc = c.N + c.pad_c;
        auto as_bf16 = [](Host h) {
          for (double& v : h) v = float(ops::bf16(float(v)));
          return h;
        };
        Host a = optable::random_host(c.off_a + rows_a * lda, 31);
        Host b = optable::random_host(c.off_b + rows_b * ldb, 32);
        Host c0 = optable::random_host(c.off_c + c.M * ldc, 33);
        if (a16) a = as_bf16(a);
        if (b16) b = as_bf16(b);
        if (c16) c0 = as_bf16(c0);
        std::vector<float> ha(a.begin(), a.end()), hb(b.begin(), b.end()), hc(c0.begin(), c0.end());
        const ops::MatmulPrecision saved = cpu::matmul_precision();
        cpu::set_matmul_precision(prec);
        cpu::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), ha.data() + c.off_a, lda,
                         hb.data() + c.off_b, ldb, float(c.beta), hc.data() + c.off_c, ldc);
        cpu::set_matmul_precision(saved);
        Host want(hc.begin(), hc.end());
        if (c16) want = as_bf16(want);

        optable::Device<float> dev(*be);
        const ops::Act<float> da = dev.put(a, a16 ? Dtype::BF16 : Dtype::F32);
        const ops::Act<float> db = dev.put(b, b16 ? Dtype::BF16 : Dtype::F32);
        const ops::Act<float> dc = dev.put(c0, c16 ? Dtype::BF16 : Dtype::F32);
        cuda::GemmEngine<float>& engine = kb.gemm_engine();
        engine.set_precision(prec);
        const uint64_t conversions = engine.bf16_conversions();
        engine.gemm(c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), da + c.off_a, lda, db + c.off_b, ldb,
                    float(c.beta), dc + c.off_c, ldc);
        const Host got = dev.get(dc, int64_t(c0.size()));
        double scale = 0;
        for (double v : want) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], (c16 ? 1.0 / 256 : 1e-5) * scale) << what << " at " << i;
        // Conversions on cuBLASLt's path (the aligned cases): the fp32 operands only.
        if (prec == ops::MatmulPrecision::BF16 && &c < cases + 2) {
          EXPECT_EQ(engine.bf16_conversions() - conversions, uint64_t(!a16) + uint64_t(!b16))
              << what;
        }
      }
}

// The element-wise kernels of the kernel backends (residual, axpby, SwiGLU,
// RoPE, bias, embedding, AdamW, and RMSNorm's rows) move 16-byte packs where
// every pointer is 16-byte aligned and finish element by element
// (kernels/common.cuh): lengths around a pack (1, 7, 8, 9, 37, 64, 1003), views
// one element off (no packs), in fp32 and bf16 storage, against the CPU
// backend: within 1e-6 of the value in fp32 (another compiler may contract
// the same formula differently), two bf16 steps in bf16 (that ulp may cross
// a rounding boundary), and 1e-5 absolute (RMSNorm's backward sums a row in
// another order and cancels). A pack read at the wrong place is off by O(1).
TEST(BackendParity, ElementwiseKernelsInPacksAndTails) {
  auto cpu = ops::make_backend<float>("cpu");
  auto simt = ops::make_backend<float>("simt");
  for (ops::Dtype dt : {ops::Dtype::F32, ops::Dtype::BF16})
    for (int64_t n : {1, 7, 8, 9, 37, 64, 1003})
      for (int64_t off : {0, 1}) {
        const std::string what = cat(ops::dtype_name(dt), " n ", n, " offset ", off);
        std::vector<Host> got;
        for (ops::Backend<float>* be : {cpu.get(), simt.get()}) {
          optable::Device<float> dev(*be);
          const Host x = optable::random_host(off + 2 * n, 41),
                     y = optable::random_host(off + 2 * n, 42);
          const ops::Act<float> a = dev.put(x, dt) + off, b = dev.put(y, dt) + off;
          const ops::Act<float> o = dev.put(Host(size_t(off + 2 * n), 0.0), dt) + off;
          const ops::Act<float> g = dev.put(Host(size_t(off + 2 * n), 0.5), dt) + off;
          Host r;
          auto take = [&](ops::ActIn<float> p, int64_t m) {
            const Host h = dev.get(p, m);
            r.insert(r.end(), h.begin(), h.end());
          };
          be->residual_forward(o, a, b, n);
          take(o, n);
          be->residual_backward(g, g + n, a, n);
          take(g, 2 * n);
          be->axpby_forward(o, a, b, n, 0.7, -1.3);
          take(o, n);
          be->axpby_backward(g, g + n, b, n, 0.25, 2.0);
          take(g, 2 * n);
          // SwiGLU over one row of F = n: gateup = [a | b] (2n elements from a).
          be->swiglu_forward(o, a, 1, int(n));
          take(o, n);
          be->swiglu_backward(g, b, a, 1, int(n));
          take(g, 2 * n);
          // RMSNorm over two rows of C = n (row kernels in packs when C allows).
          float* w = dev.put(optable::random_host(n, 43));
          float* rstd = dev.put(Host(2, 0.0));
          float* dw = dev.put(Host(size_t(n), 0.0));
          be->rmsnorm_forward(o, rstd, a, w, 2, int(n), 1e-5);
          take(o, 2 * n);
          be->rmsnorm_backward(g, dw, b, a, w, rstd, 2, int(n));
          take(g, 2 * n);
          // RoPE on one row of one head of D = 2n (runs of a pack when half
          // a head is whole packs), at position 3 of made-up tables.
          const float* cs = dev.put(optable::random_host(4 * n, 44));
          const float* sn = dev.put(optable::random_host(4 * n, 45));
          be->rope_forward(a, cs, sn, 1, 1, 1, int(2 * n), 2 * n, 3);
          take(a, 2 * n);
          be->rope_backward(b, cs, sn, 1, 1, 1, int(2 * n), 2 * n, 3);
          take(b, 2 * n);
          // Bias over two rows of n; the embedding of two tokens of width n
          // (the same row twice, so the backward sums) and its gradient.
          be->bias_add_forward(o, w, 2, int(n));
          take(o, 2 * n);
          const int32_t tokens[2] = {2, 2};
          const float* wte = dev.put(optable::random_host(3 * n, 46));
          be->embedding_forward(o, tokens, wte, 2, int(n), 3);
          take(o, 2 * n);
          float* dwte = dev.put(Host(size_t(3 * n), 0.25));
          be->embedding_backward(dwte, tokens, b, 2, int(n));
          take(dwte, 3 * n);
          // AdamW (fp32 state) one element off when `off`, clipped by a factor.
          float* p = dev.put(optable::random_host(off + n, 47)) + off;
          float* m = dev.put(optable::random_host(off + n, 48)) + off;
          float* v = dev.put(Host(size_t(off + n), 0.01)) + off;
          const float* gr = dev.put(optable::random_host(off + n, 49)) + off;
          ops::AdamWStep st;
          st.lr = 1e-2;
          st.weight_decay = 0.1;
          st.clip = 0.5;
          be->adamw_update(p, gr, m, v, n, st);
          take(p, n);
          take(m, n);
          take(v, n);
          got.push_back(r);
        }
        ASSERT_EQ(got[0].size(), got[1].size());
        for (size_t i = 0; i < got[0].size(); ++i) {
          const double tol = (dt == ops::Dtype::BF16 ? 1.0 / 128 : 1e-6) * std::abs(got[0][i]);
          ASSERT_NEAR(got[1][i], got[0][i], tol + 1e-5) << what << " at " << i;
        }
      }
}

// The LM head in row chunks with bf16 matmuls: the head weight is converted
// to bf16 once per call (PinnedOperand), not in each chunk's two GEMMs, and
// chunking changes nothing but the order dW's chunks are summed in.
TEST(BackendParity, Bf16HeadConvertsItsWeightOncePerCall) {
  const int N = 50, C = 32, V = 64;  // widths cuBLASLt is given (not the fallback GEMM)
  const Host x = optable::random_host(N * C, 11), wn = optable::random_host(C, 12),
             w = optable::random_host(V * C, 13);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[size_t(i)] = (i * 7) % V;
  std::vector<Host> grads;
  std::vector<double> losses;
  for (int64_t rows : {0, 16}) {  // one chunk; four chunks (16, 16, 16, 2 rows)
    auto simt = ops::make_backend<float>("simt");
    auto& kb = dynamic_cast<cuda::KernelBackend<float>&>(*simt);
    kb.set_matmul_precision(ops::MatmulPrecision::BF16);
    kb.set_head_chunk_rows(rows);
    optable::Device<float> dev(*simt);
    float* dx = dev.put(Host(size_t(N * C), 0.0));
    float* dwn = dev.put(Host(size_t(C), 0.0));
    float* dw = dev.put(Host(size_t(V * C), 0.0));
    float* xn = dev.put(Host(size_t(N * C), 0.0));
    float* rstd = dev.put(Host(size_t(N), 0.0));
    const uint64_t before = kb.gemm_engine().bf16_conversions();
    int64_t n_valid = 0;
    losses.push_back(simt->head_ce_forward_backward(dx, dwn, dw, xn, rstd, &n_valid, dev.put(x),
                                                    dev.put(wn), dev.put(w), targets.data(), N, C,
                                                    V, 1e-5, 1.0 / N));
    // Per chunk: xn (logits GEMM), the logits (dxn GEMM), the logits and xn
    // (dW GEMM); the weight, read by the first two, once in all.
    const uint64_t chunks = rows ? 4 : 1;
    EXPECT_EQ(kb.gemm_engine().bf16_conversions() - before, 4 * chunks + 1) << rows << " rows";
    Host g = dev.get(dx, N * C);
    const Host gw = dev.get(dw, V * C);
    g.insert(g.end(), gw.begin(), gw.end());
    grads.push_back(g);
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::abs(losses[0]));
  expect_close(grads[1], grads[0], 1e-5, "head gradients, 4 chunks vs 1");
}

// Generation freezes the weights (Backend::freeze_weights), a training step
// holds them (hold_weights): the GEMM engine
// then converts a weight to bf16 once and reads that copy on every later
// call (a decode step would otherwise convert every weight for every token),
// with the same results; the activations are still converted every call, and
// thawing drops the copies. Proof that the copy is what is read: a weight
// changed while frozen (which generation never does) is not seen until the thaw.
TEST(BackendParity, FrozenWeightsAreConvertedToBf16Once) {
  const int N = 4, IC = 32, OC = 24;  // operands cuBLASLt is given
  auto simt = ops::make_backend<float>("simt");
  auto& kb = dynamic_cast<cuda::KernelBackend<float>&>(*simt);
  kb.set_matmul_precision(ops::MatmulPrecision::BF16);
  const cuda::GemmEngine<float>& engine = kb.gemm_engine();
  optable::Device<float> dev(*simt);
  const Host w0 = optable::random_host(OC * IC, 31), x0 = optable::random_host(N * IC, 32),
             x1 = optable::random_host(N * IC, 33);
  float* w = dev.put(w0);
  const float* xa = dev.put(x0);
  const float* xb = dev.put(x1);
  float* out = dev.put(Host(size_t(N * OC), 0.0));
  auto run = [&](const float* x) {
    simt->linear_forward(out, x, w, nullptr, N, IC, OC);
    return dev.get(out, N * OC);
  };
  const Host plain_a = run(xa), plain_b = run(xb);
  uint64_t before = engine.bf16_conversions();
  simt->freeze_weights(true);
  EXPECT_EQ(run(xa), plain_a);
  EXPECT_EQ(engine.bf16_conversions() - before, 2u) << "x and the weight";
  before = engine.bf16_conversions();
  EXPECT_EQ(run(xb), plain_b);
  EXPECT_EQ(engine.bf16_conversions() - before, 1u) << "x only: the weight's copy is kept";
  Host w1 = w0;
  for (double& e : w1) e = -e;
  simt->from_host(w, std::vector<float>(w1.begin(), w1.end()).data(), OC * IC);
  EXPECT_EQ(run(xa), plain_a) << "frozen: the copy made before the change is read";
  simt->freeze_weights(false);
  Host negated = plain_a;
  for (double& e : negated) e = -e;
  EXPECT_EQ(run(xa), negated) << "thawed: the changed weight is converted again";
  // A training step's hold (Backend::hold_weights): operands inside the held
  // range keep a copy; one reaching past it is converted every time.
  simt->hold_weights(w, OC * IC);
  before = engine.bf16_conversions();
  EXPECT_EQ(run(xa), negated);
  run(xb);
  EXPECT_EQ(engine.bf16_conversions() - before, 3u) << "the weight once, x twice";
  simt->hold_weights(w, OC * IC - 1);
  before = engine.bf16_conversions();
  run(xa);
  run(xb);
  EXPECT_EQ(engine.bf16_conversions() - before, 4u) << "a weight past the held range";
  simt->hold_weights(nullptr, 0);
}

// Under the SIMT executor's strict mode an op given host memory for a buffer
// (which the executor could read, but a GPU could not) stops in one line
// naming the op; device buffers, and host token ids, pass.
TEST(BackendParity, StrictSimtRefusesHostBuffersGivenToOps) {
  const bool was = simt::strict();
  simt::set_strict(true);
  {
    auto be = ops::make_backend<float>("simt");
    ops::DeviceBuffer<float> a(be.get(), 64), b(be.get(), 64), out(be.get(), 64);
    std::vector<float> host(64);
    be->residual_forward(out.data(), a.data(), b.data(), 64);  // all device: fine
    try {
      be->residual_forward(host.data(), a.data(), b.data(), 64);
      ADD_FAILURE() << "a host output was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("op residual_forward was given"), std::string::npos)
          << e.what();
    }
    const int32_t tokens[2] = {1, 2};  // host by contract
    ops::DeviceBuffer<float> wte(be.get(), 4 * 8), x(be.get(), 2 * 8);
    be->embedding_forward(x.data(), tokens, wte.data(), 2, 8, 4);
    be->synchronize();
  }
  simt::set_strict(was);
}

// The fused classifier in bf16 storage keeps its logits chunk in bf16 (the
// GEMM writes bf16, the softmax reads it and writes the bf16 gradient, the
// backward GEMMs read that as it is): on simt the head converts only its
// weight, once, whatever the chunking. The CPU rounds its logits rows the
// same way, so the two agree closely (a side without the rounding is off by
// ~1e-4 of the loss here), and both equal the unfused head (the full logits
// in double) within bf16 tolerance.
TEST(BackendParity, FusedHeadInBf16StorageKeepsItsLogitsInBf16) {
  const int N = 50, C = 32, V = 64;
  const Host x = optable::random_host(N * C, 21), wn = optable::random_host(C, 22),
             w = optable::random_host(V * C, 23);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[size_t(i)] = i % 9 == 4 ? ops::kIgnoreIndex : (i * 7) % V;
  Host xr = x;  // the input as bf16 storage holds it
  for (double& e : xr) e = double(float(ops::bf16(float(e))));
  const auto ref = reference::head_ce(xr, wn, w, targets, N, C, V, 1e-5, ops::kIgnoreIndex);
  std::vector<double> losses;
  std::vector<Host> grads;
  for (const char* name : {"cpu", "simt"}) {
    SCOPED_TRACE(name);
    auto be = optable::make<float>(name);
    be->set_matmul_precision(ops::MatmulPrecision::BF16);
    auto* kb = dynamic_cast<cuda::KernelBackend<float>*>(be.get());
    if (kb) kb->set_head_chunk_rows(16);
    cpu::set_head_ce_chunk_rows(16);
    optable::Device<float> dev(*be);
    const ops::Act<float> dx = dev.put(Host(size_t(N * C), 0.0), ops::Dtype::BF16);
    const ops::Act<float> xn = dev.put(Host(size_t(N * C), 0.0), ops::Dtype::BF16);
    float* dwn = dev.put(Host(size_t(C), 0.0));
    float* dw = dev.put(Host(size_t(V * C), 0.0));
    float* rstd = dev.put(Host(size_t(N), 0.0));
    const uint64_t before = kb ? kb->gemm_engine().bf16_conversions() : 0;
    int64_t n_valid = 0;
    losses.push_back(be->head_ce_forward_backward(
        dx, dwn, dw, xn, rstd, &n_valid, dev.put(x, ops::Dtype::BF16), dev.put(wn), dev.put(w),
        targets.data(), N, C, V, 1e-5, 1.0 / N));
    if (kb) {
      EXPECT_EQ(kb->gemm_engine().bf16_conversions() - before, 1u) << "the weight only";
    }
    EXPECT_EQ(n_valid, ref.n_valid);
    Host g = dev.get(dx, N * C);
    const Host gw = dev.get(dw, V * C);
    g.insert(g.end(), gw.begin(), gw.end());
    grads.push_back(g);
  }
  cpu::set_head_ce_chunk_rows(0);
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
  expect_close(grads[1], grads[0], 2e-2, "head gradients, simt vs cpu");
  for (double l : losses) EXPECT_NEAR(l, ref.loss_sum, 3e-3 * std::abs(ref.loss_sum));
}

// ------------------------------------------------------- bf16 KV cache
// The generation ops with fp32 rows and a bf16 KV cache (ops.def): on every
// backend, what the same op gives with an fp32 cache holding the
// bf16-rounded values (the cache widens exactly when read; the compiled sums
// may run in another order: within 2e-6 of the largest output), and an
// append writes exactly the values rounded to bf16 (to nearest even).
// Another storage mix (bf16 rows, fp32 cache) is refused in one line.
TEST(BackendParity, Bf16KvCacheHoldsRoundedValuesAndReadsThemAsFp32Would) {
  const int Hq = 4, Hkv = 2, D = 16, max_len = 10, blocks = 2, rows = 2;
  const int64_t qs = int64_t(Hq + 2 * Hkv) * D, block = int64_t(Hkv) * max_len * D;
  const int64_t nkv = blocks * block;
  const Host q = optable::random_host(size_t(rows) * qs, 31);
  Host cache_k = optable::random_host(size_t(nkv), 32),
       cache_v = optable::random_host(size_t(nkv), 33);
  for (double& x : cache_k) x = double(float(ops::bf16(float(x))));
  for (double& x : cache_v) x = double(float(ops::bf16(float(x))));
  const std::vector<int32_t> ints = {6, 3, 1, 0};  // positions, then slots
  for (const std::string& name : optable::backends()) {
    SCOPED_TRACE(name);
    auto be = optable::make<float>(name);
    auto upload = [&](const Host& h) {
      std::vector<float> f(h.begin(), h.end());
      ops::DeviceBuffer<float> d(be.get(), f.size());
      be->from_host(d.data(), f.data(), int64_t(f.size()));
      return d;
    };
    auto download = [&](ops::ActIn<float> a, int64_t n) {
      ops::ActBuffer<float> f(be.get(), size_t(n));
      be->copy(f.data(), a, n);
      std::vector<float> h(static_cast<size_t>(n));
      be->to_host(h.data(), static_cast<const float*>(f.data().raw()), n);
      return h;
    };
    int32_t* dev_ints = be->alloc_ints(ints.size());
    be->ints_from_host(dev_ints, ints.data(), ints.size());
    const int32_t* pos = dev_ints;
    const int32_t* slot = dev_ints + rows;
    // Two caches with the same values: fp32, and bf16 (exact: the values are bf16's).
    ops::DeviceBuffer<float> k32 = upload(cache_k), v32 = upload(cache_v);
    ops::ActBuffer<float> k16(be.get(), size_t(nkv), ops::Dtype::BF16),
        v16(be.get(), size_t(nkv), ops::Dtype::BF16);
    be->copy(k16.data(), k32.data(), nkv);
    be->copy(v16.data(), v32.data(), nkv);
    // Reading: the cached and the decoding attention.
    ops::DeviceBuffer<float> qd = upload(q), o32(be.get(), size_t(rows) * Hq * D),
                             o16(be.get(), size_t(rows) * Hq * D);
    be->attention_cached_forward(o32.data(), qd.data(), qs, k32.data(), v32.data(), rows, 3, Hq,
                                 Hkv, D, max_len);
    be->attention_cached_forward(o16.data(), qd.data(), qs, k16.data(), v16.data(), rows, 3, Hq,
                                 Hkv, D, max_len);
    const auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
      double scale = 0, worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, double(std::abs(b[i])));
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
      }
      return a.size() == b.size() && worst <= 2e-6 * scale;
    };
    EXPECT_TRUE(close(download(o16.data(), rows * Hq * D), download(o32.data(), rows * Hq * D)))
        << "attention_cached_forward";
    be->attention_decode(o32.data(), qd.data(), qs, k32.data(), v32.data(), block, rows, slot, pos,
                         Hq, Hkv, D, max_len);
    be->attention_decode(o16.data(), qd.data(), qs, k16.data(), v16.data(), block, rows, slot, pos,
                         Hq, Hkv, D, max_len);
    EXPECT_TRUE(close(download(o16.data(), rows * Hq * D), download(o32.data(), rows * Hq * D)))
        << "attention_decode";
    // Writing: the same rows appended to both caches; the bf16 one holds the
    // fp32 one's values rounded.
    ops::DeviceBuffer<float> q32 = upload(q), q16 = upload(q);
    be->kv_cache_append(k32.data(), v32.data(), q32.data(), qs, rows, 4, Hq, Hkv, D, max_len);
    be->kv_cache_append(k16.data(), v16.data(), q16.data(), qs, rows, 4, Hq, Hkv, D, max_len);
    std::vector<double> table_freq(size_t(D / 2));
    for (int i = 0; i < D / 2; ++i) table_freq[size_t(i)] = std::pow(1e4, -2.0 * i / D);
    ops::DeviceBuffer<float> cs(be.get(), size_t(max_len) * D / 2),
        sn(be.get(), size_t(max_len) * D / 2);
    be->rope_table(cs.data(), sn.data(), max_len, D, table_freq.data());
    be->decode_rope_append(q32.data(), qs, cs.data(), sn.data(), k32.data(), v32.data(), block,
                           rows, slot, pos, Hq, Hkv, D, max_len);
    be->decode_rope_append(q16.data(), qs, cs.data(), sn.data(), k16.data(), v16.data(), block,
                           rows, slot, pos, Hq, Hkv, D, max_len);
    EXPECT_EQ(download(q16.data(), rows * qs), download(q32.data(), rows * qs))
        << "decode_rope_append rotates the rows alike";
    for (auto [c16, c32] : {std::pair{k16.data(), k32.data()}, std::pair{v16.data(), v32.data()}}) {
      const std::vector<float> got = download(c16, nkv), wide = download(c32, nkv);
      for (int64_t i = 0; i < nkv; ++i)
        ASSERT_EQ(got[size_t(i)], float(ops::bf16(wide[size_t(i)]))) << "cache element " << i;
    }
    // bf16 rows beside an fp32 cache: refused.
    ops::ActBuffer<float> q_bf16(be.get(), size_t(rows) * qs, ops::Dtype::BF16);
    try {
      be->kv_cache_append(k32.data(), v32.data(), q_bf16.data(), qs, rows, 4, Hq, Hkv, D, max_len);
      ADD_FAILURE() << "bf16 rows beside an fp32 cache were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a KV cache stored in fp32 beside activations in bf16"),
                std::string::npos)
          << e.what();
    }
    be->synchronize();
    be->free_ints(dev_ints);
  }
}
