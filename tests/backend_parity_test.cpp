// The op table (op_table.h, op_table.cpp) on every backend this build has:
// each row's forward against its reference, and every backend against the
// CPU backend, forward and backward; a coverage test over the ops of
// ops/ops.def; and what only the kernel backends have (the SIMT executor's
// launches, bf16 operand rounding). The gradient checks of the same table
// are tests/grad_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cuda/simt/simt.h"
#include "core/error.h"
#include "op_table.h"
#include "ops/backend.h"

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

}  // namespace

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
    auto be = ops::make_backend<float>(name);
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
