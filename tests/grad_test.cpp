// Gradient checks: every backward kernel against central finite differences
// of its forward, in double precision. The scalar checked is L = sum(y * R)
// for a fixed random R, so dL/dy = R is what each backward receives.
#include <gtest/gtest.h>

#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "ops/backend.h"
#include "reference.h"
#include "testing.h"

namespace strata {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_tokens;
using testing::random_vec;
using Vec = std::vector<double>;

TEST(Grad, Embedding) {
  const int V = 7, C = 5;
  const int64_t N = 12;
  auto tokens = random_tokens(N, V, 1);
  tokens[2] = tokens[8] = 4;
  auto wte = random_vec<double>(V * C, 1), R = random_vec<double>(N * C, 2);
  auto loss = [&] {
    Vec out(N * C);
    cpu::embedding_forward<double>(out.data(), tokens.data(), wte.data(), N, C, V);
    return dot(out, R);
  };
  Vec dw(V * C, 0.0);
  cpu::embedding_backward<double>(dw.data(), tokens.data(), R.data(), N, C);
  expect_gradient(loss, wte.data(), V * C, dw.data(), "d wte");
}

TEST(Grad, RmsNorm) {
  const int64_t N = 6;
  const int C = 10;
  auto x = random_vec<double>(N * C, 3, 2.0), w = random_vec<double>(C, 4),
       R = random_vec<double>(N * C, 5);
  auto loss = [&] {
    Vec out(N * C), rstd(N);
    cpu::rmsnorm_forward<double>(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, R);
  };
  Vec out(N * C), rstd(N), dx(N * C, 0.0), dw(C, 0.0);
  cpu::rmsnorm_forward<double>(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  cpu::rmsnorm_backward<double>(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N,
                                C);
  expect_gradient(loss, x.data(), N * C, dx.data(), "d x");
  expect_gradient(loss, w.data(), C, dw.data(), "d w");
}

TEST(Grad, Linear) {
  const int64_t N = 5;
  const int IC = 6, OC = 4;
  auto x = random_vec<double>(N * IC, 6), w = random_vec<double>(OC * IC, 7),
       b = random_vec<double>(OC, 8), R = random_vec<double>(N * OC, 9);
  auto loss = [&] {
    Vec out(N * OC);
    cpu::linear_forward<double>(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(out, R);
  };
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  cpu::linear_backward<double>(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC,
                               OC, false);
  expect_gradient(loss, x.data(), N * IC, dx.data(), "d x");
  expect_gradient(loss, w.data(), OC * IC, dw.data(), "d w");
  expect_gradient(loss, b.data(), OC, db.data(), "d bias");
}

// A linear layer on views into larger matrices (one shard's block of a full
// weight), with a bias added by the bias op: what the executor does for
// shards of full weights.
TEST(Grad, LinearOnViewsAndBiasAdd) {
  const auto be = ops::make_backend<double>();
  const int64_t N = 4;
  const int IX = 9, OW = 7, c0 = 2, r0 = 1, IC = 5, OC = 3, OX = 6, o0 = 2;
  auto x = random_vec<double>(N * IX, 81), w = random_vec<double>(OW * IX, 82),
       b = random_vec<double>(OC, 83), R = random_vec<double>(N * OX, 84);
  const ops::LinearLd ld{IX, IX, OX};
  auto loss = [&] {
    Vec out(N * OX, 0.0);
    be->linear_forward(out.data() + o0, x.data() + c0, w.data() + r0 * IX + c0, nullptr, N, IC, OC,
                       ld);
    be->bias_add_forward(out.data() + o0, b.data(), N, OC, OX);
    return dot(out, R);
  };
  Vec dx(N * IX, 0.0), dw(OW * IX, 0.0), db(OC, 0.0);
  be->linear_backward(dx.data() + c0, dw.data() + r0 * IX + c0, nullptr, R.data() + o0,
                      x.data() + c0, w.data() + r0 * IX + c0, N, IC, OC, true, ld);
  be->bias_add_backward(db.data(), R.data() + o0, N, OC, OX);
  expect_gradient(loss, x.data(), N * IX, dx.data(), "d x (view)");
  expect_gradient(loss, w.data(), OW * IX, dw.data(), "d w (view)");
  expect_gradient(loss, b.data(), OC, db.data(), "d bias");
}

TEST(Grad, Axpby) {
  const auto be = ops::make_backend<double>();
  const int64_t n = 13;
  auto x = random_vec<double>(n, 85), y = random_vec<double>(n, 86), R = random_vec<double>(n, 87);
  auto loss = [&] {
    Vec out(n);
    be->axpby_forward(out.data(), x.data(), y.data(), n, 0.3, 0.7);
    return dot(out, R);
  };
  Vec dx(n, 0.0), dy(n, 0.0);
  be->axpby_backward(dx.data(), dy.data(), R.data(), n, 0.3, 0.7);
  expect_gradient(loss, x.data(), n, dx.data(), "d x");
  expect_gradient(loss, y.data(), n, dy.data(), "d y");
}

TEST(Grad, Rope) {
  const int B = 2, S = 4, H = 2, D = 6, max_pos = 16, pos0 = 3;
  const int64_t stride = int64_t(H) * D + 2;
  Vec cos(max_pos * D / 2), sin(max_pos * D / 2);
  cpu::rope_table<double>(cos.data(), sin.data(), max_pos, D, 10000.0);
  auto x = random_vec<double>(int64_t(B) * S * stride, 10), R = random_vec<double>(x.size(), 11);
  auto loss = [&] {
    Vec y = x;
    cpu::rope_forward<double>(y.data(), cos.data(), sin.data(), B, S, H, D, stride, pos0);
    return dot(y, R);
  };
  Vec dx = R;
  cpu::rope_backward<double>(dx.data(), cos.data(), sin.data(), B, S, H, D, stride, pos0);
  expect_gradient(loss, x.data(), int64_t(x.size()), dx.data(), "d x");
}

void check_attention_at_level(int B, int S, int Hq, int Hkv, int D, int64_t samples) {
  const int64_t QS = int64_t(Hq + 2 * Hkv) * D;
  auto qkv = random_vec<double>(int64_t(B) * S * QS, 12, 1.5);
  auto R = random_vec<double>(int64_t(B) * S * Hq * D, 13);
  Vec out(R.size()), lse(size_t(B) * Hq * S);
  auto loss = [&] {
    cpu::attention_forward<double>(out.data(), lse.data(), qkv.data(), B, S, Hq, Hkv, D);
    return dot(out, R);
  };
  loss();
  Vec dqkv(qkv.size(), 7.0);  // garbage: the backward overwrites
  cpu::attention_backward<double>(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, S,
                                  Hq, Hkv, D);
  expect_gradient(
      loss, qkv.data(), int64_t(qkv.size()), dqkv.data(),
      cat("d qkv (B", B, " T", S, " Hq", Hq, " Hkv", Hkv, " D", D, ")"), 1e-6, 1e-5,
      samples ? testing::sample_indices(int64_t(qkv.size()), samples, 14) : std::vector<int64_t>{});
}

// At every kernel level the CPU and build have (AVX2, and AVX-512 where present).
void check_attention(int B, int S, int Hq, int Hkv, int D, int64_t samples) {
  for (CpuLevel level : testing::cpu_levels()) {
    SCOPED_TRACE(cpu_level_name(level));
    testing::ForceCpuLevel force(level);
    check_attention_at_level(B, S, Hq, Hkv, D, samples);
  }
}

TEST(Grad, AttentionMha) { check_attention(2, 5, 2, 2, 4, 0); }
TEST(Grad, AttentionGqa) { check_attention(2, 6, 4, 2, 4, 0); }
TEST(Grad, AttentionMqaSeveralTiles) { check_attention(1, 70, 2, 1, 8, 150); }

TEST(Grad, Swiglu) {
  const int64_t N = 4;
  const int F = 9;
  auto gu = random_vec<double>(N * 2 * F, 15, 4.0), R = random_vec<double>(N * F, 16);
  auto loss = [&] {
    Vec h(N * F);
    cpu::swiglu_forward<double>(h.data(), gu.data(), N, F);
    return dot(h, R);
  };
  Vec d(N * 2 * F, 3.0);
  cpu::swiglu_backward<double>(d.data(), R.data(), gu.data(), N, F);
  expect_gradient(loss, gu.data(), N * 2 * F, d.data(), "d gate|up");
}

TEST(Grad, Residual) {
  const int64_t n = 8;
  auto a = random_vec<double>(n, 17), b = random_vec<double>(n, 18), R = random_vec<double>(n, 19);
  auto loss = [&] {
    Vec y(n);
    cpu::residual_forward<double>(y.data(), a.data(), b.data(), n);
    return dot(y, R);
  };
  Vec da(n, 0.0), db(n, 0.0);
  cpu::residual_backward<double>(da.data(), db.data(), R.data(), n);
  expect_gradient(loss, a.data(), n, da.data(), "d a");
  expect_gradient(loss, b.data(), n, db.data(), "d b");
}

TEST(Grad, HeadCrossEntropy) {
  const int64_t N = 7;
  const int C = 6, V = 11;
  auto x = random_vec<double>(N * C, 20, 2.0), wn = random_vec<double>(C, 21),
       wo = random_vec<double>(int64_t(V) * C, 22);
  auto targets = random_tokens(N, V, 23);
  targets[4] = cpu::kIgnoreIndex;
  const double dloss = 0.37;
  Vec xn(N * C), rstd(N), lse(N);
  auto loss = [&] {
    return dloss * cpu::head_ce_forward<double>(xn.data(), rstd.data(), lse.data(), nullptr,
                                                nullptr, x.data(), wn.data(), wo.data(),
                                                targets.data(), N, C, V, 1e-5);
  };
  for (bool fused : {false, true}) {
    Vec dx(N * C, 0.0), dwn(C, 0.0), dwo(int64_t(V) * C, 0.0);
    if (fused) {
      cpu::head_ce_forward_backward<double>(dx.data(), dwn.data(), dwo.data(), xn.data(),
                                            rstd.data(), nullptr, x.data(), wn.data(), wo.data(),
                                            targets.data(), N, C, V, 1e-5, dloss);
    } else {
      loss();
      cpu::head_ce_backward<double>(dx.data(), dwn.data(), dwo.data(), x.data(), xn.data(),
                                    rstd.data(), lse.data(), wn.data(), wo.data(), targets.data(),
                                    N, C, V, dloss);
    }
    const std::string tag = fused ? " (fused)" : "";
    expect_gradient(loss, x.data(), N * C, dx.data(), "d x" + tag);
    expect_gradient(loss, wn.data(), C, dwn.data(), "d norm weight" + tag);
    expect_gradient(loss, wo.data(), int64_t(V) * C, dwo.data(), "d head weight" + tag);
  }
}

TEST(Grad, Mse) {
  const int64_t n = 12;
  auto a = random_vec<double>(n, 24), b = random_vec<double>(n, 25);
  auto loss = [&] { return 1.7 * cpu::mse_forward<double>(a.data(), b.data(), n); };
  Vec da(n, 0.0), db(n, 0.0);
  cpu::mse_backward<double>(da.data(), db.data(), a.data(), b.data(), n, 1.7);
  expect_gradient(loss, a.data(), n, da.data(), "d a");
  expect_gradient(loss, b.data(), n, db.data(), "d b");
}

}  // namespace
}  // namespace strata
