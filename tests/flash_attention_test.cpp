// The tensor-core path of the CUDA kernels: the emulated warp-level matrix
// instructions (Mma*) against a scalar product, with the fragment layouts
// written out here from the PTX ISA independently of the executor's, and the
// flash attention kernels (FlashAttention*, kernels/flash_attention.cuh)
// against the reference kernel and the CPU backend, forward and backward.
// The kernel backends run the flash kernels when the matmuls are bf16; on a
// build with a visible GPU the same comparisons run on "cuda" too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernel_backend.h"
#include "backends/cuda/kernels/flash_attention.cuh"
#include "backends/cuda/simt/simt.h"
#include "core/error.h"
#include "ops/backend.h"
#include "reference.h"
#include "testing.h"

using namespace strata;

namespace {

uint16_t bits(float x) { return cuda::bf16_bits(x); }
float bf16_round(float x) {
  const uint32_t u = uint32_t(bits(x)) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t pack(float lo, float hi) { return uint32_t(bits(lo)) | (uint32_t(bits(hi)) << 16); }

std::vector<float> bf16_values(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_round(nd(rng));
  return v;
}

// ---------------------------------------------------------------- Mma*
// The PTX ISA's m16n8k16 fragments (".bf16", row.col), lane l = 4 g + t:
//   A a[r] holds A[g + 8 (r % 2)][2 t + 8 (r / 2) + {0, 1}];
//   B b[r] holds B[2 t + 8 r + {0, 1}][g];
//   C/D c[i] is C[g + 8 (i / 2)][2 t + i % 2].
STRATA_GLOBAL void k_mma_once(const float* A, const float* B, const float* C, float* D) {
  const int l = int(threadIdx.x), g = l / 4, t = l % 4;
  uint32_t a[4], b[2];
  float d[4];
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
    a[r] = pack(A[row * 16 + col], A[row * 16 + col + 1]);
  }
  for (int r = 0; r < 2; ++r) {
    const int k = 2 * t + 8 * r;
    b[r] = pack(B[k * 8 + g], B[(k + 1) * 8 + g]);
  }
  for (int i = 0; i < 4; ++i) d[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  mma_bf16_16816(d, a, b);
  for (int i = 0; i < 4; ++i) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

TEST(MmaM16n8k16, MatchesTheScalarProductForEveryFragmentElement) {
  const std::vector<float> A = bf16_values(256, 1), B = bf16_values(128, 2),
                           C = bf16_values(128, 3);
  std::vector<float> D(128, -1.f);
  STRATA_LAUNCH(k_mma_once, 1, 32, 0, nullptr, A.data(), B.data(), C.data(), D.data());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = C[i * 8 + j];
      for (int k = 0; k < 16; ++k) want += double(A[i * 16 + k]) * B[k * 8 + j];
      EXPECT_NEAR(D[i * 8 + j], want, 1e-5 * (1 + std::abs(want))) << "D[" << i << "][" << j << "]";
    }
}

// A single element: each of the 256 A positions (and 128 of B) moves the
// product only where the layout says, so a swapped lane or half is caught
// even if the sum happened to agree.
TEST(MmaM16n8k16, OneHotOperandsLandInTheirRowAndColumn) {
  std::vector<float> B(128), C(128, 0.f), D(128);
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 8; ++j) B[k * 8 + j] = float(k * 8 + j + 1);
  for (int pos = 0; pos < 256; pos += 7) {
    std::vector<float> A(256, 0.f);
    A[pos] = 1.f;
    STRATA_LAUNCH(k_mma_once, 1, 32, 0, nullptr, A.data(), B.data(), C.data(), D.data());
    const int i0 = pos / 16, k0 = pos % 16;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j)
        ASSERT_EQ(D[i * 8 + j], i == i0 ? B[k0 * 8 + j] : 0.f) << "A one at " << pos;
  }
}

// ldmatrix x4 (and .trans): four 8x8 matrices of b16 in shared memory; lanes
// 8 i .. 8 i + 7 give the rows of matrix i.
STRATA_GLOBAL void k_ldmatrix(uint32_t* out, bool trans, int misalign) {
  alignas(16) __shared__ uint16_t m[4 * 64 + 8];
  const int l = int(threadIdx.x);
  for (int e = l; e < 256; e += 32) m[e] = uint16_t(1000 + e);
  __syncwarp();
  const uint16_t* row = m + (l / 8) * 64 + (l % 8) * 8 + misalign;
  uint32_t r[4];
  if (trans)
    ldmatrix_x4_trans(r, row);
  else
    ldmatrix_x4(r, row);
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}

TEST(MmaLdmatrix, X4AndTransGiveTheDocumentedElements) {
  for (bool trans : {false, true}) {
    std::vector<uint32_t> out(128);
    STRATA_LAUNCH(k_ldmatrix, 1, 32, 0, nullptr, out.data(), trans, 0);
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        // Element (row, col) of matrix i is 1000 + 64 i + 8 row + col.
        const int a = l / 4, b = 2 * (l % 4);
        const auto el = [&](int row, int col) { return uint32_t(1000 + 64 * i + 8 * row + col); };
        const uint32_t want =
            trans ? el(b, a) | (el(b + 1, a) << 16) : el(a, b) | (el(a, b + 1) << 16);
        ASSERT_EQ(out[l * 4 + i], want) << (trans ? "trans " : "") << "lane " << l << " r" << i;
      }
  }
}

// cp.async, as the flash kernels stage their tiles: 16 bytes a lane (even
// lanes copy, odd lanes zero-fill), then commit, wait and a barrier, after
// which each lane reads its neighbour's chunk.
STRATA_GLOBAL void k_cp_async(uint32_t* out, const uint32_t* src, int misalign) {
  alignas(16) __shared__ uint32_t m[32 * 4];
  const int l = int(threadIdx.x);
  for (int e = 0; e < 4; ++e) m[4 * l + e] = 0xDEADBEEFu;
  cp_async16(m + 4 * l, src + 4 * l + misalign, l % 2 == 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const int n = (l + 1) % 32;
  for (int e = 0; e < 4; ++e) out[4 * l + e] = m[4 * n + e];
}

TEST(MmaCpAsync, CopiesOrZeroFillsSixteenBytesAndRefusesMisalignment) {
  alignas(16) uint32_t src[32 * 4 + 4];
  for (int i = 0; i < 32 * 4 + 4; ++i) src[i] = uint32_t(100 + i);
  std::vector<uint32_t> out(128);
  STRATA_LAUNCH(k_cp_async, 1, 32, 0, nullptr, out.data(), src, 0);
  for (int l = 0; l < 32; ++l) {
    const int n = (l + 1) % 32;
    for (int e = 0; e < 4; ++e)
      ASSERT_EQ(out[4 * l + e], n % 2 == 0 ? src[4 * n + e] : 0u) << "lane " << l << " word " << e;
  }
  EXPECT_THROW(STRATA_LAUNCH(k_cp_async, 1, 32, 0, nullptr, out.data(), src, 1), Error);
}

TEST(MmaLdmatrix, AMisalignedRowAndAPartialWarpAreRefused) {
  std::vector<uint32_t> out(128);
  EXPECT_THROW(STRATA_LAUNCH(k_ldmatrix, 1, 32, 0, nullptr, out.data(), false, 1), Error);
  std::vector<float> A(256, 0.f), B(128, 0.f), C(128, 0.f), D(128);
  try {
    STRATA_LAUNCH(k_mma_once, 1, 16, 0, nullptr, A.data(), B.data(), C.data(), D.data());
    ADD_FAILURE() << "a 16-thread mma.sync ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole warp"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------- FlashAttention*
struct Shape {
  int B, T, Hq, Hkv, D;
};

std::string name_of(const Shape& s) {
  return cat("B", s.B, " T", s.T, " Hq", s.Hq, " Hkv", s.Hkv, " D", s.D);
}

struct Outputs {
  std::vector<float> out, lse, dqkv;
};

// Forward and backward of one backend at one precision, on host copies.
Outputs run_attention(const std::string& backend, ops::MatmulPrecision p, const Shape& s,
                      const std::vector<float>& qkv, const std::vector<float>& dout,
                      const std::function<void(ops::Backend<float>&)>& prepare = {}) {
  auto be = ops::make_backend<float>(backend);
  be->set_matmul_precision(p);
  if (prepare) prepare(*be);
  const int64_t nq = int64_t(qkv.size()), no = int64_t(dout.size()), nl = int64_t(s.B) * s.Hq * s.T;
  float* d_qkv = be->alloc(nq);
  float* d_dout = be->alloc(no);
  float* d_out = be->alloc(no);
  float* d_lse = be->alloc(nl);
  float* d_dqkv = be->alloc(nq);
  be->from_host(d_qkv, qkv.data(), nq);
  be->from_host(d_dout, dout.data(), no);
  be->attention_forward(d_out, d_lse, d_qkv, s.B, s.T, s.Hq, s.Hkv, s.D);
  be->attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, s.B, s.T, s.Hq, s.Hkv, s.D);
  Outputs o{std::vector<float>(no), std::vector<float>(nl), std::vector<float>(nq)};
  be->to_host(o.out.data(), d_out, no);
  be->to_host(o.lse.data(), d_lse, nl);
  be->to_host(o.dqkv.data(), d_dqkv, nq);
  for (float* q : {d_qkv, d_dout, d_out, d_lse, d_dqkv}) be->free(q);
  return o;
}

// max |a - b| / max(1e-3, max |b|) over the elements of one part.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-3, err = 0;
  for (float x : b) scale = std::max(scale, double(std::abs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, double(std::abs(a[i] - b[i])));
  }
  return err / scale;
}

// The parts of dqkv (q, k, v columns of every row) compared separately: a
// kernel that wrote dk into dv's place would otherwise hide under dq's scale.
std::vector<float> part(const std::vector<float>& dqkv, const Shape& s, int which) {
  const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
  const int64_t from = which == 0 ? 0 : (which == 1 ? s.Hq : s.Hq + s.Hkv) * int64_t(s.D);
  const int64_t n = (which == 0 ? s.Hq : s.Hkv) * int64_t(s.D);
  std::vector<float> r;
  for (int64_t row = 0; row < int64_t(s.B) * s.T; ++row)
    r.insert(r.end(), dqkv.begin() + row * W + from, dqkv.begin() + row * W + from + n);
  return r;
}

// Bounds, relative to the largest element of each output: the flash kernels
// round P and dS to bf16 before their products (q, k, v and dout are bf16
// values already here), which costs about 1e-3 of out and 1.3-3.4e-3 of the
// gradients over the shapes below; lse, from fp32 scores of exact bf16
// products, agrees to about 1e-7. The bounds are three times those.
constexpr double kOutTol = 4e-3, kLseTol = 5e-7, kGradTol = 1e-2;

void compare(const Outputs& got, const Outputs& want, const Shape& s, const std::string& what,
             double out_tol = kOutTol, double lse_tol = kLseTol, double grad_tol = kGradTol) {
  SCOPED_TRACE(what + " " + name_of(s));
  EXPECT_LE(rel_error(got.out, want.out), out_tol) << "out";
  EXPECT_LE(rel_error(got.lse, want.lse), lse_tol) << "lse";
  const char* names[3] = {"dq", "dk", "dv"};
  for (int w = 0; w < 3; ++w)
    EXPECT_LE(rel_error(part(got.dqkv, s, w), part(want.dqkv, s, w)), grad_tol) << names[w];
}

std::vector<std::string> kernel_backends() {
  std::vector<std::string> b = {"simt"};
  if (ops::resolve_device("auto") == "cuda") b.push_back("cuda");
  return b;
}

void check_shape(const Shape& s, uint64_t seed) {
  const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
  const std::vector<float> qkv = bf16_values(size_t(int64_t(s.B) * s.T * W), seed, 1.5f);
  const std::vector<float> dout = bf16_values(size_t(int64_t(s.B) * s.T * s.Hq * s.D), seed + 1);
  const Outputs cpu = run_attention("cpu", ops::MatmulPrecision::FP32, s, qkv, dout);
  const Outputs ref = run_attention("simt", ops::MatmulPrecision::FP32, s, qkv, dout);
  for (const std::string& be : kernel_backends()) {
    const Outputs flash = run_attention(be, ops::MatmulPrecision::BF16, s, qkv, dout);
    compare(flash, ref, s, be + " flash vs the reference kernel");
    compare(flash, cpu, s, be + " flash vs the cpu backend");
  }
}

// Head dimensions 64 and 128 with GQA ratios 1, 4 and 8; lengths below,
// across and off the 64-row tiles (the causal edge inside a tile, padded
// rows and keys in the last one).
TEST(FlashAttentionTiles, HeadDim64GqaRatios) {
  check_shape({1, 100, 2, 2, 64}, 11);
  check_shape({2, 37, 4, 1, 64}, 12);
  check_shape({1, 130, 8, 1, 64}, 13);
}

TEST(FlashAttentionTiles, HeadDim128GqaRatios) {
  check_shape({1, 70, 2, 2, 128}, 21);
  check_shape({1, 64, 4, 1, 128}, 22);
  check_shape({1, 33, 8, 1, 128}, 23);
}

TEST(FlashAttentionTiles, SmallHeadsAndShortSequences) {
  check_shape({2, 1, 2, 1, 16}, 31);
  check_shape({1, 17, 4, 2, 32}, 32);
  check_shape({3, 129, 2, 1, 16}, 33);
}

// bf16 activation storage (ops/dtype.h): the flash kernels read q, k, v and
// dout as bf16 and write out and dqkv in bf16, with no fp32 copies. From the
// same bf16 values the result is the fp32-storage flash result rounded once
// (out; lse is the same fp32 computation, bit for bit) and, for the
// gradients, the rounding of out that delta = rowsum(dout * out) then sees:
// within the flash bounds of the fp32 run.
Outputs run_bf16_storage(const Shape& s, const std::vector<float>& qkv,
                         const std::vector<float>& dout, uint64_t launches = 4,
                         const std::function<void(ops::Backend<float>&)>& prepare = {}) {
  auto be = ops::make_backend<float>("simt");
  be->set_matmul_precision(ops::MatmulPrecision::BF16);
  if (prepare) prepare(*be);
  const int64_t nq = int64_t(qkv.size()), no = int64_t(dout.size()), nl = int64_t(s.B) * s.Hq * s.T;
  auto put = [&](const std::vector<float>& h) {
    ops::ActBuffer<float> b(be.get(), h.size(), ops::Dtype::BF16);
    std::vector<ops::bf16> v(h.begin(), h.end());
    v.push_back(ops::bf16(0.f));
    be->from_host(static_cast<float*>(b.data().raw()), reinterpret_cast<const float*>(v.data()),
                  int64_t(v.size() / 2));
    return b;
  };
  auto get = [&](const ops::ActBuffer<float>& b) {
    std::vector<ops::bf16> v(b.size() + 1);
    be->to_host(reinterpret_cast<float*>(v.data()), static_cast<const float*>(b.data().raw()),
                int64_t(v.size() / 2));
    return std::vector<float>(v.begin(), v.begin() + int64_t(b.size()));
  };
  ops::ActBuffer<float> d_qkv = put(qkv), d_dout = put(dout);
  ops::ActBuffer<float> d_out(be.get(), size_t(no), ops::Dtype::BF16),
      d_dqkv(be.get(), size_t(nq), ops::Dtype::BF16);
  ops::DeviceBuffer<float> d_lse(be.get(), size_t(nl));
  const uint64_t before = simt::launch_count();
  be->attention_forward(d_out.data(), d_lse.data(), d_qkv.data(), s.B, s.T, s.Hq, s.Hkv, s.D);
  be->attention_backward(d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out.data(), d_lse.data(),
                         s.B, s.T, s.Hq, s.Hkv, s.D);
  // Flash: forward, delta, dq, dk/dv, four launches, none of them a conversion.
  EXPECT_EQ(simt::launch_count() - before, launches) << name_of(s);
  Outputs o{get(d_out), std::vector<float>(size_t(nl)), get(d_dqkv)};
  be->to_host(o.lse.data(), d_lse.data(), nl);
  return o;
}

TEST(FlashAttentionBf16Storage, ReadsAndWritesBf16WithoutCopies) {
  for (const Shape& s : {Shape{1, 100, 2, 2, 64}, Shape{2, 37, 4, 1, 64}, Shape{1, 70, 8, 1, 128},
                         Shape{3, 129, 2, 1, 16}}) {
    const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
    const std::vector<float> qkv = bf16_values(size_t(int64_t(s.B) * s.T * W), 61, 1.5f);
    const std::vector<float> dout = bf16_values(size_t(int64_t(s.B) * s.T * s.Hq * s.D), 62);
    const Outputs fp32 = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout);
    const Outputs bf16 = run_bf16_storage(s, qkv, dout);
    EXPECT_EQ(std::memcmp(bf16.lse.data(), fp32.lse.data(), fp32.lse.size() * 4), 0) << name_of(s);
    for (size_t i = 0; i < fp32.out.size(); ++i)
      ASSERT_EQ(bf16.out[i], float(ops::bf16(fp32.out[i]))) << name_of(s) << " out " << i;
    compare(bf16, fp32, s, "bf16 storage vs fp32 storage");
    const Outputs cpu = run_attention("cpu", ops::MatmulPrecision::FP32, s, qkv, dout);
    compare(bf16, cpu, s, "bf16 storage vs the cpu backend");
  }
}

// The flash kernels are deterministic: no atomics, every output element
// written by one warp in a fixed order, so any thread order gives the same
// bits.
TEST(FlashAttentionDeterminism, SameBitsUnderEveryThreadOrder) {
  const Shape s{1, 90, 4, 2, 32};
  const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
  const std::vector<float> qkv = bf16_values(size_t(s.T * W), 41, 1.5f);
  const std::vector<float> dout = bf16_values(size_t(s.T * s.Hq * s.D), 42);
  const Outputs first = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout);
  for (simt::Schedule order : {simt::Schedule::Reverse, simt::Schedule::Shuffled}) {
    simt::set_schedule(order, 7);
    const Outputs again = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout);
    simt::set_schedule(simt::Schedule::Forward);
    EXPECT_EQ(0, std::memcmp(first.out.data(), again.out.data(), first.out.size() * 4));
    EXPECT_EQ(0, std::memcmp(first.dqkv.data(), again.dqkv.data(), first.dqkv.size() * 4));
  }
}

// The kernel backends choose the flash kernels for bf16 matmuls and the
// head dimensions they were built for, the reference kernels otherwise: a
// bf16 run of an unsupported head dimension equals the fp32 run bit for bit,
// and a supported one differs from it.
TEST(FlashAttentionDispatch, Bf16AndSupportedHeadDimsOnly) {
  for (int D : {24, 32}) {
    const Shape s{1, 40, 2, 1, D};
    const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
    const std::vector<float> qkv = bf16_values(size_t(s.T * W), 51, 1.5f);
    const std::vector<float> dout = bf16_values(size_t(s.T * s.Hq * s.D), 52);
    const Outputs fp32 = run_attention("simt", ops::MatmulPrecision::FP32, s, qkv, dout);
    const Outputs bf16 = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout);
    const bool same = std::memcmp(fp32.out.data(), bf16.out.data(), fp32.out.size() * 4) == 0;
    EXPECT_EQ(same, !cuda::flash_head_dim(D)) << "D " << D;
  }
}

// Generation's prefill over a KV cache ([Hkv, max_len, D], queries at
// pos0 ..): 64 rows or more with bf16 matmuls run the flash forward, fewer
// the reference kernel (bit for bit the fp32 result).
TEST(FlashAttentionPrefill, CachedAttentionOverTheKvCache) {
  const int Hq = 8, Hkv = 2, D = 64, max_len = 200, pos0 = 37;
  for (int n : {70, 20}) {
    const int64_t q_stride =
        int64_t(Hq + 2 * Hkv) * D;  // queries inside qkv rows, as generation has them
    const std::vector<float> q = bf16_values(size_t(n * q_stride), 81, 1.5f);
    const std::vector<float> kc = bf16_values(size_t(Hkv) * max_len * D, 82, 1.5f);
    const std::vector<float> vc = bf16_values(size_t(Hkv) * max_len * D, 83);
    std::vector<std::vector<float>> outs;
    for (auto p : {ops::MatmulPrecision::FP32, ops::MatmulPrecision::BF16}) {
      auto be = ops::make_backend<float>("simt");
      be->set_matmul_precision(p);
      float* dq = be->alloc(int64_t(q.size()));
      float* dk = be->alloc(int64_t(kc.size()));
      float* dv = be->alloc(int64_t(vc.size()));
      float* dout = be->alloc(int64_t(n) * Hq * D);
      be->from_host(dq, q.data(), int64_t(q.size()));
      be->from_host(dk, kc.data(), int64_t(kc.size()));
      be->from_host(dv, vc.data(), int64_t(vc.size()));
      be->attention_cached_forward(dout, dq, q_stride, dk, dv, n, pos0, Hq, Hkv, D, max_len);
      outs.emplace_back(size_t(n) * Hq * D);
      be->to_host(outs.back().data(), dout, int64_t(n) * Hq * D);
      for (float* x : {dq, dk, dv, dout}) be->free(x);
    }
    const double err = rel_error(outs[1], outs[0]);
    if (n >= cuda::kFlashRows) {
      EXPECT_GT(err, 0.0) << "n " << n << ": the flash kernel did not run";
      EXPECT_LE(err, kOutTol) << "n " << n;
    } else {
      EXPECT_EQ(err, 0.0) << "n " << n << ": a short prefill keeps the reference kernel";
    }
  }
}

// ------------------------------------------- model.attention = "cudnn"
// The glue a library attention runs behind (kernels/attention.cuh: bf16
// copies of qkv, out and dout in strata's layouts, the lse, the workspace,
// dqkv back to fp32), checked on simt with a stand-in library that computes
// attention on the host in double from the bf16 buffers it is handed.
class HostAttention final : public cuda::ExternalAttention {
 public:
  // Calls are counted into the caller's ints (the backend owns this object).
  explicit HostAttention(int* forwards = nullptr, int* backwards = nullptr)
      : forwards_(forwards), backwards_(backwards) {}
  const char* name() const override { return "host attention (test)"; }
  size_t forward_workspace(const cuda::AttentionShape&) override { return 64; }
  size_t backward_workspace(const cuda::AttentionShape&) override { return 128; }
  void forward(void*, uint16_t* o, float* lse, const uint16_t* qkv, const cuda::AttentionShape& s,
               void* ws) override {
    const simt::DeviceAccess access;  // the stand-in plays a library's device code
    EXPECT_NE(ws, nullptr);
    reference::Vec out, l;
    reference::attention(widen(qkv, s.B * s.T * W(s)), s.B, s.T, s.Hq, s.Hkv, s.D, out, l);
    for (size_t i = 0; i < out.size(); ++i) o[i] = bits(float(out[i]));
    for (size_t i = 0; i < l.size(); ++i) lse[i] = float(l[i]);
    if (forwards_) ++*forwards_;
  }
  // dS = P (dP - delta), delta = rowsum(dO o); dq = dS k / sqrt(D), dk = dS^T q / sqrt(D),
  // dv = P^T dO, with P from the lse it is given.
  void backward(void*, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* o,
                const float* lse, const cuda::AttentionShape& s, void*) override {
    const simt::DeviceAccess access;
    const reference::Vec x = widen(qkv, s.B * s.T * W(s)), d = widen(dout, s.B * s.T * s.Hq * s.D),
                         ov = widen(o, s.B * s.T * s.Hq * s.D);
    reference::Vec g(size_t(s.B) * s.T * W(s), 0.0);
    const double scale = 1 / std::sqrt(double(s.D));
    const int64_t w = W(s), wo = int64_t(s.Hq) * s.D;
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.Hq; ++h) {
        const int64_t kq = h * s.D, kk = (s.Hq + h / (s.Hq / s.Hkv)) * int64_t(s.D),
                      kv = kk + int64_t(s.Hkv) * s.D;
        for (int i = 0; i < s.T; ++i) {
          const int64_t qi = (int64_t(b) * s.T + i) * w, oi = (int64_t(b) * s.T + i) * wo + kq;
          double delta = 0;
          for (int c = 0; c < s.D; ++c) delta += d[oi + c] * ov[oi + c];
          for (int j = 0; j <= i; ++j) {
            const int64_t kj = (int64_t(b) * s.T + j) * w;
            double sc = 0, dp = 0;
            for (int c = 0; c < s.D; ++c) {
              sc += x[qi + kq + c] * x[kj + kk + c];
              dp += d[oi + c] * x[kj + kv + c];
            }
            const double p = std::exp(sc * scale - lse[(int64_t(b) * s.Hq + h) * s.T + i]);
            const double ds = p * (dp - delta);
            for (int c = 0; c < s.D; ++c) {
              g[qi + kq + c] += ds * x[kj + kk + c] * scale;
              g[kj + kk + c] += ds * x[qi + kq + c] * scale;
              g[kj + kv + c] += p * d[oi + c];
            }
          }
        }
      }
    for (size_t i = 0; i < g.size(); ++i) dqkv[i] = bits(float(g[i]));
    if (backwards_) ++*backwards_;
  }

 private:
  int* forwards_;
  int* backwards_;
  static int64_t W(const cuda::AttentionShape& s) { return int64_t(s.Hq + 2 * s.Hkv) * s.D; }
  static reference::Vec widen(const uint16_t* p, int64_t n) {
    reference::Vec v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = uint32_t(p[i]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      v[size_t(i)] = f;
    }
    return v;
  }
};

// Prepares a simt backend to run HostAttention as its library attention
// (model.attention = "cudnn"), counting its calls.
std::function<void(ops::Backend<float>&)> host_library(int* forwards, int* backwards) {
  return [=](ops::Backend<float>& be) {
    dynamic_cast<cuda::KernelBackend<float>&>(be).set_external_attention(
        std::make_unique<HostAttention>(forwards, backwards), "");
    be.set_attention(ops::AttentionImpl::Cudnn);
  };
}

TEST(FlashAttentionExternal, ALibraryGetsBf16LayoutsAndItsResultsComeBack) {
  const Shape s{2, 37, 4, 2, 16};
  const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
  const std::vector<float> qkv = bf16_values(size_t(s.B * s.T * W), 61, 1.5f);
  const std::vector<float> dout = bf16_values(size_t(s.B * s.T * s.Hq * s.D), 62);
  int forwards = 0, backwards = 0;
  const Outputs got = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout,
                                    host_library(&forwards, &backwards));
  EXPECT_EQ(forwards, 1);
  EXPECT_EQ(backwards, 1);
  // Against the CPU's fp32 attention of the same (bf16-valued) inputs: the
  // library's outputs are rounded to bf16 (2^-9 relative), its out (rounded)
  // feeds delta; everything else is exact here.
  const Outputs cpu = run_attention("cpu", ops::MatmulPrecision::FP32, s, qkv, dout);
  EXPECT_LE(rel_error(got.out, cpu.out), 4e-3);
  EXPECT_LE(rel_error(got.lse, cpu.lse), 1e-6);
  for (int w = 0; w < 3; ++w)
    EXPECT_LE(rel_error(part(got.dqkv, s, w), part(cpu.dqkv, s, w)), 1e-2) << "part " << w;
}

// bf16 activations go to the library as they are: no conversion kernel at
// all, and the same bits as the fp32-storage run, whose outputs are the
// library's bf16 results widened.
TEST(FlashAttentionExternal, Bf16ActivationsGoStraightToTheLibrary) {
  const Shape s{2, 37, 4, 2, 16};
  const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
  const std::vector<float> qkv = bf16_values(size_t(s.B * s.T * W), 61, 1.5f);
  const std::vector<float> dout = bf16_values(size_t(s.B * s.T * s.Hq * s.D), 62);
  int forwards = 0, backwards = 0;
  const auto library = host_library(&forwards, &backwards);
  const Outputs fp32 = run_attention("simt", ops::MatmulPrecision::BF16, s, qkv, dout, library);
  const Outputs bf16 = run_bf16_storage(s, qkv, dout, 0, library);
  EXPECT_EQ(forwards, 2);
  EXPECT_EQ(backwards, 2);
  EXPECT_EQ(bf16.out, fp32.out);
  EXPECT_EQ(bf16.lse, fp32.lse);
  EXPECT_EQ(bf16.dqkv, fp32.dqkv);
}

TEST(FlashAttentionExternal, RefusedWhereItCannotRun) {
  // simt and cpu have no cuDNN; a library attention needs bf16 matmuls.
  auto simt = ops::make_backend<float>("simt");
  EXPECT_ERROR(simt->set_attention(ops::AttentionImpl::Cudnn), "cudnn: device simt runs strata");
  auto cpu = ops::make_backend<float>("cpu");
  EXPECT_ERROR(cpu->set_attention(ops::AttentionImpl::Cudnn), "cudnn runs on device cuda only");
  dynamic_cast<cuda::KernelBackend<float>&>(*simt).set_external_attention(
      std::make_unique<HostAttention>(), "");
  simt->set_attention(ops::AttentionImpl::Cudnn);
  float* x = simt->alloc(3 * 16 * 4);
  float* y = simt->alloc(16 * 4);
  EXPECT_ERROR(simt->attention_forward(y, nullptr, x, 1, 4, 1, 1, 16), "needs bf16 matmuls");
  simt->free(x);
  simt->free(y);
}

// On a GPU (label gpu): cuDNN's fused attention against the flash kernels,
// forward and backward, where the build has cuDNN.
TEST(FlashAttentionCudnn, MatchesTheFlashKernels) {
  if (ops::resolve_device("auto") != "cuda") GTEST_SKIP() << "no GPU visible";
  try {
    ops::make_backend<float>("cuda")->set_attention(ops::AttentionImpl::Cudnn);
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  for (const Shape& s :
       {Shape{2, 100, 8, 2, 64}, Shape{1, 130, 8, 1, 128}, Shape{1, 64, 4, 4, 128}}) {
    const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D;
    const std::vector<float> qkv = bf16_values(size_t(s.B * s.T * W), 71, 1.5f);
    const std::vector<float> dout = bf16_values(size_t(s.B * s.T * s.Hq * s.D), 72);
    const Outputs flash = run_attention("cuda", ops::MatmulPrecision::BF16, s, qkv, dout);
    const Outputs cudnn =
        run_attention("cuda", ops::MatmulPrecision::BF16, s, qkv, dout,
                      [](ops::Backend<float>& be) { be.set_attention(ops::AttentionImpl::Cudnn); });
    const Outputs ref = run_attention("simt", ops::MatmulPrecision::FP32, s, qkv, dout);
    // cuDNN's outputs are bf16 (2^-9 more), its softmax statistics its own
    // fp32 arithmetic: twice the flash bounds, and 1e-5 for lse.
    compare(cudnn, ref, s, "cudnn vs the reference kernel", 2 * kOutTol, 1e-5, 2 * kGradTol);
    compare(cudnn, flash, s, "cudnn vs the flash kernels", 2 * kOutTol, 1e-5, 2 * kGradTol);
  }
}

}  // namespace
