// The rows of the op table (op_table.h): one function per op family, each
// row an op on one shape with its reference. Shapes cover what the kernels
// branch on (several chunks, ragged tails, views, shards, "=" and "+="), and
// the shapes of the separate forward and gradient tests this table replaced.
#include "op_table.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "reference.h"
#include "testing.h"

namespace strata::optable {
namespace {

template <typename T>
using Be = ops::Backend<T>;
using Ins = std::vector<Host>;
namespace ref = reference;

std::vector<double> none() { return {}; }

// Multiplies input k by s (inputs are uniform in [-1, 1] before).
std::function<void(Ins&)> scaled(size_t k, double s) {
  if (s == 1) return nullptr;
  return [=](Ins& in) {
    for (double& x : in[k]) x *= s;
  };
}

// Token ids: a fixed pattern with repeats, or seeded random ones with `id`
// placed at `at` (repeated ids must accumulate).
std::vector<int32_t> pattern_tokens(int N, int V) {
  std::vector<int32_t> tok(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) tok[size_t(n)] = (n * 7 + n / 3) % V;
  return tok;
}
std::vector<int32_t> random_tokens_with(int N, int V, uint32_t stream, std::vector<int> at,
                                        int32_t id) {
  auto tok = testing::random_tokens(N, V, stream);
  for (int a : at) tok[size_t(a)] = id;
  return tok;
}

// ------------------------------------------------------------------ embedding
template <typename T>
void embedding_rows(std::vector<Case<T>>& t) {
  struct S {
    int N, C, V, v0, Vl;
    std::vector<int32_t> tok;
  };
  for (const S& s :
       {S{7, 5, 11, 0, -1, pattern_tokens(7, 11)}, S{40, 64, 9, 0, -1, pattern_tokens(40, 9)},
        S{12, 33, 10, 3, 4, pattern_tokens(12, 10)},
        S{23, 13, 11, 0, -1, random_tokens_with(23, 11, 1, {5, 9, 17}, 3)},
        S{12, 5, 7, 0, -1, random_tokens_with(12, 7, 1, {2, 8}, 4)}}) {
    const int rows = s.Vl < 0 ? s.V : s.Vl;
    t.push_back({.name = cat("embedding N", s.N, " C", s.C, s.Vl < 0 ? "" : " shard"),
                 .in = {int64_t(rows) * s.C},
                 .diff = {true},
                 .out = {int64_t(s.N) * s.C},
                 .in_loss = {true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.embedding_forward(out[0], s.tok.data(), in[0], s.N, s.C, s.V, s.v0, s.Vl);
                       return none();
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>&, const Ptrs<T>&, const Ptrs<T>& d, double,
                         const Ptrs<T>& g) {
                       be.embedding_backward(g[0], s.tok.data(), d[0], s.N, s.C, s.v0, s.Vl);
                     },
                 .ref =
                     [=](const Ins& in) {
                       return Expected{{ref::embedding(s.tok, in[0], s.C, s.v0, s.Vl)}, {}};
                     },
                 .ref_tol = 0});  // a copy
  }
}

// -------------------------------------------------------------------- rmsnorm
template <typename T>
void rmsnorm_rows(std::vector<Case<T>>& t) {
  struct S {
    int N, C;
    double x_scale;
    int fd_samples;
  };
  for (const S& s :
       {S{3, 8, 1, 24}, S{5, 300, 1, 24}, S{2, 1000, 1, 24}, S{19, 67, 2, 24}, S{6, 10, 2, 0}})
    t.push_back({.name = cat("rmsnorm N", s.N, " C", s.C),
                 .in = {int64_t(s.N) * s.C, s.C},
                 .diff = {true, true},
                 .out = {int64_t(s.N) * s.C, s.N},
                 .in_loss = {true, false},
                 .init = scaled(0, s.x_scale),
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.rmsnorm_forward(out[0], out[1], in[0], in[1], s.N, s.C, 1e-5);
                       return none();
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out, const Ptrs<T>& d, double,
                         const Ptrs<T>& g) {
                       be.rmsnorm_backward(g[0], g[1], d[0], in[0], in[1], out[1], s.N, s.C);
                     },
                 .ref =
                     [=](const Ins& in) {
                       return Expected{{ref::rmsnorm(in[0], in[1], s.N, s.C, 1e-5),
                                        ref::rmsnorm_rstd(in[0], s.N, s.C, 1e-5)},
                                       {}};
                     },
                 .fd_samples = s.fd_samples});
}

// --------------------------------------------------------------------- linear

// The rows x cols block of a matrix with rows ld apart, compact; and back.
Host compact(const Host& m, int64_t rows, int64_t cols, int64_t ld, int64_t at = 0) {
  Host c(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) c[size_t(r * cols + j)] = m[size_t(at + r * ld + j)];
  return c;
}
void place(Host& m, const Host& c, int64_t rows, int64_t cols, int64_t ld, int64_t at = 0) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) m[size_t(at + r * ld + j)] = c[size_t(r * cols + j)];
}

// Linear with and without bias, compact and on views (leading dimensions),
// dx "=" and "+=", a frozen weight (null gradient).
template <typename T>
void linear_rows(std::vector<Case<T>>& t) {
  struct S {
    int N, IC, OC, pad;
    bool acc, bias = true, frozen_w = false;
    int fd_samples = 24;
  };
  std::vector<S> shapes;
  for (S s : {S{4, 6, 5, 0, false}, S{33, 20, 17, 0, false}, S{9, 12, 7, 3, false}})
    for (bool acc : {false, true}) {
      s.acc = acc;
      shapes.push_back(s);
    }
  shapes.push_back({17, 33, 21, 0, false, false});
  shapes.push_back({17, 33, 21, 0, false});
  shapes.push_back({5, 6, 4, 0, false, true, false, 0});
  shapes.push_back({9, 7, 5, 0, true, false, true});
  for (const S& s : shapes) {
    const int64_t lx = s.pad ? s.IC + s.pad : s.IC, lw = s.pad ? s.IC + s.pad + 1 : s.IC,
                  lo = s.pad ? s.OC + s.pad : s.OC;
    const ops::LinearLd ld{s.pad ? lx : 0, s.pad ? lw : 0, s.pad ? lo : 0};
    std::vector<int64_t> in = {s.N * lx, s.OC * lw};
    std::vector<bool> diff = {true, !s.frozen_w};
    if (s.bias) {
      in.push_back(s.OC);
      diff.push_back(true);
    }
    t.push_back(
        {.name = cat("linear N", s.N, " IC", s.IC, s.pad ? " views" : "", s.bias ? "" : " no bias",
                     s.frozen_w ? " frozen w" : "", s.acc ? " dx+=" : " dx="),
         .in = in,
         .diff = diff,
         .out = {s.N * lo},
         .in_loss = {true},
         .fwd =
             [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
               be.linear_forward(out[0], in[0], in[1], s.bias ? in[2] : nullptr, s.N, s.IC, s.OC,
                                 ld);
               return none();
             },
         .bwd =
             [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>&, const Ptrs<T>& d, double,
                 const Ptrs<T>& g) {
               be.linear_backward(g[0], g[1], s.bias ? g[2] : nullptr, d[0], in[0], in[1], s.N,
                                  s.IC, s.OC, s.acc, ld);
             },
         .ref =
             [=](const Ins& in) {
               const Host x = compact(in[0], s.N, s.IC, lx), w = compact(in[1], s.OC, s.IC, lw);
               Host out(size_t(s.N * lo), 0.0);
               place(out, ref::linear(x, w, s.bias ? &in[2] : nullptr, s.N, s.IC, s.OC), s.N, s.OC,
                     lo);
               return Expected{{out}, {}};
             },
         .assigns = {!s.acc, false, false},
         .fd_samples = s.fd_samples});
  }
  // One shard's block of a full weight on a view of the activations, its
  // output into columns of a wider one, then the bias op on that view: what
  // the executor does for shards of full weights.
  const int N = 4, IX = 9, OW = 7, c0 = 2, r0 = 1, IC = 5, OC = 3, OX = 6, o0 = 2;
  const ops::LinearLd ld{IX, IX, OX};
  t.push_back({.name = "linear on views + bias_add",
               .in = {N * IX, OW * IX, OC},
               .diff = {true, true, true},
               .out = {N * OX},
               .in_loss = {true},
               .fwd =
                   [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                     be.linear_forward(out[0] + o0, in[0] + c0, in[1] + r0 * IX + c0, nullptr, N,
                                       IC, OC, ld);
                     be.bias_add_forward(out[0] + o0, in[2], N, OC, OX);
                     return none();
                   },
               .bwd =
                   [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>&, const Ptrs<T>& d, double,
                       const Ptrs<T>& g) {
                     be.linear_backward(g[0] + c0, g[1] + r0 * IX + c0, nullptr, d[0] + o0,
                                        in[0] + c0, in[1] + r0 * IX + c0, N, IC, OC, true, ld);
                     be.bias_add_backward(g[2], d[0] + o0, N, OC, OX);
                   },
               .ref =
                   [=](const Ins& in) {
                     const Host x = compact(in[0], N, IC, IX, c0),
                                w = compact(in[1], OC, IC, IX, r0 * IX + c0);
                     Host out(size_t(N * OX), 0.0);
                     place(out, ref::linear(x, w, &in[2], N, IC, OC), N, OC, OX, o0);
                     return Expected{{out}, {}};
                   },
               .fd_samples = 0});
}

// -------------------------------------------------------------- bias, axpby
template <typename T>
void bias_axpby_rows(std::vector<Case<T>>& t) {
  struct B {
    int N, OC, ld;
  };
  for (const B& s : {B{5, 7, 0}, B{6, 4, 9}, B{9, 6, 10}}) {
    const int64_t n = int64_t(s.N) * (s.ld ? s.ld : s.OC);
    t.push_back({.name = cat("bias_add N", s.N, s.ld ? " ld" : ""),
                 .in = {n, s.OC},
                 .diff = {true, true},
                 .out = {n},
                 .in_loss = {true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.copy(out[0], in[0], n);
                       be.bias_add_forward(out[0], in[1], s.N, s.OC, s.ld);
                       return none();
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>&, const Ptrs<T>&, const Ptrs<T>& d, double,
                         const Ptrs<T>& g) {
                       be.residual_backward(g[0], nullptr, d[0], n);
                       be.bias_add_backward(g[1], d[0], s.N, s.OC, s.ld);
                     },
                 .ref =
                     [=](const Ins& in) {
                       Host out = in[0];
                       for (int r = 0; r < s.N; ++r)
                         for (int j = 0; j < s.OC; ++j)
                           out[size_t(r * (s.ld ? s.ld : s.OC) + j)] += in[1][size_t(j)];
                       return Expected{{out}, {}};
                     }});
  }
  struct A {
    int64_t n;
    double a, b;
  };
  for (const A& s : {A{5, 0.3, -1.7}, A{1000, 0.3, -1.7}, A{37, 0.25, -1.5}, A{13, 0.3, 0.7}})
    t.push_back(
        {.name = cat("axpby n", s.n),
         .in = {s.n, s.n},
         .diff = {true, true},
         .out = {s.n},
         .in_loss = {true},
         .fwd =
             [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
               be.axpby_forward(out[0], in[0], in[1], s.n, s.a, s.b);
               return none();
             },
         .bwd = [=](Be<T>& be, const Ptrs<T>&, const Ptrs<T>&, const Ptrs<T>& d, double,
                    const Ptrs<T>& g) { be.axpby_backward(g[0], g[1], d[0], s.n, s.a, s.b); },
         .ref =
             [=](const Ins& in) {
               Host out(static_cast<size_t>(s.n));
               for (size_t i = 0; i < out.size(); ++i) out[i] = s.a * in[0][i] + s.b * in[1][i];
               return Expected{{out}, {}};
             },
         .fd_samples = s.n == 13 ? 0 : 24});
}

// ------------------------------------------------------------------- residual
template <typename T>
void residual_rows(std::vector<Case<T>>& t) {
  for (int64_t n : {3, 777, 101, 8})
    t.push_back({.name = cat("residual n", n),
                 .in = {n, n},
                 .diff = {true, true},
                 .out = {n},
                 .in_loss = {true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.residual_forward(out[0], in[0], in[1], n);
                       return none();
                     },
                 .bwd = [=](Be<T>& be, const Ptrs<T>&, const Ptrs<T>&, const Ptrs<T>& d, double,
                            const Ptrs<T>& g) { be.residual_backward(g[0], g[1], d[0], n); },
                 .ref =
                     [=](const Ins& in) {
                       Host out(static_cast<size_t>(n));
                       for (size_t i = 0; i < out.size(); ++i) out[i] = in[0][i] + in[1][i];
                       return Expected{{out}, {}};
                     },
                 .fd_samples = 0});
}

// ----------------------------------------------------------------------- RoPE

// RoPE on the first H of more heads (row stride), positions from pos0, with
// the backend's own table of theta's frequencies.
template <typename T>
void rope_rows(std::vector<Case<T>>& t) {
  struct S {
    int B, S_, H, D, extra, pos0;
    double theta;
    int max_pos;
  };
  std::vector<S> shapes = {
      {2, 5, 3, 8, 4, 3, 1e4, 10}, {1, 9, 2, 64, 0, 0, 1e4, 11}, {2, 4, 2, 6, 2, 3, 1e4, 16}};
  for (double theta : {1e4, 5e5})
    for (int pos0 : {0, 17}) shapes.push_back({2, 9, 3, 8, 5, pos0, theta, 40});
  for (const S& s : shapes) {
    const int64_t stride = int64_t(s.H) * s.D + s.extra, n = int64_t(s.B) * s.S_ * stride;
    const int64_t table = int64_t(s.max_pos) * s.D / 2;
    auto table_of = [=](Be<T>& be, ops::DeviceBuffer<T>& c, ops::DeviceBuffer<T>& sn) {
      std::vector<double> inv(size_t(s.D / 2));
      for (int i = 0; i < s.D / 2; ++i) inv[size_t(i)] = std::pow(s.theta, -2.0 * i / s.D);
      c = ops::DeviceBuffer<T>(&be, size_t(table));
      sn = ops::DeviceBuffer<T>(&be, size_t(table));
      be.rope_table(c.data(), sn.data(), s.max_pos, s.D, inv.data());
    };
    t.push_back(
        {.name = cat("rope D", s.D, " pos0 ", s.pos0, s.theta == 1e4 ? "" : " theta 5e5"),
         .in = {n},
         .diff = {true},
         .out = {n, table},
         .in_loss = {true, false},
         .fwd =
             [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
               ops::DeviceBuffer<T> c, sn;
               table_of(be, c, sn);
               be.copy(out[0], in[0], n);
               be.rope_forward(out[0], c.data(), sn.data(), s.B, s.S_, s.H, s.D, stride, s.pos0);
               be.copy(out[1], c.data(), table);
               be.synchronize();
               return none();
             },
         .bwd =
             [=](Be<T>& be, const Ptrs<T>&, const Ptrs<T>&, const Ptrs<T>& d, double,
                 const Ptrs<T>& g) {
               ops::DeviceBuffer<T> c, sn;
               ops::ActBuffer<T> tmp(&be, size_t(n), d[0].dtype());
               table_of(be, c, sn);
               be.copy(tmp.data(), d[0], n);
               be.rope_backward(tmp.data(), c.data(), sn.data(), s.B, s.S_, s.H, s.D, stride,
                                s.pos0);
               be.residual_backward(g[0], nullptr, tmp.data(), n);
               be.synchronize();
             },
         .ref =
             [=](const Ins& in) {
               Host cos(static_cast<size_t>(table));
               for (int p = 0; p < s.max_pos; ++p)
                 for (int i = 0; i < s.D / 2; ++i)
                   cos[size_t(p * (s.D / 2) + i)] = std::cos(p * std::pow(s.theta, -2.0 * i / s.D));
               return Expected{
                   {ref::rope(in[0], s.B, s.S_, s.H, s.D, stride, s.theta, s.pos0), cos}, {}};
             },
         .ref_tol = 5,
         .fd_samples = s.max_pos == 16 ? 0 : 24});
  }
}

// ------------------------------------------------------------------ attention

// MHA, GQA, MQA; sequences of one and several 32-key chunks (and the CPU's
// tiles, with a ragged last one); head dims below, at and above one element
// per lane, and those of the CPU's full and edge micro-kernels.
template <typename T>
void attention_rows(std::vector<Case<T>>& t) {
  struct S {
    int B, S_, Hq, Hkv, D;
    double scale = 1;
    int fd_samples = 24;
  };
  const std::vector<S> shapes = {
      {2, 5, 2, 2, 4, 1, 0},  {1, 40, 4, 2, 8},        {1, 70, 2, 1, 40},
      {2, 33, 3, 1, 64},      {1, 1, 1, 1, 4, 1.5},    {2, 5, 4, 2, 8, 1.5},
      {1, 70, 2, 2, 48, 1.5}, {2, 130, 4, 1, 16, 1.5}, {1, 64, 3, 3, 64, 1.5},
      {1, 33, 6, 2, 6, 1.5},  {2, 6, 4, 2, 4, 1.5, 0}, {1, 70, 2, 1, 8, 1.5, 150}};
  for (const S& s : shapes) {
    const int64_t W = int64_t(s.Hq + 2 * s.Hkv) * s.D, nq = int64_t(s.B) * s.S_ * W;
    const int64_t no = int64_t(s.B) * s.S_ * s.Hq * s.D, nl = int64_t(s.B) * s.Hq * s.S_;
    t.push_back({.name = cat("attention B", s.B, " T", s.S_, " Hq", s.Hq, " Hkv", s.Hkv, " D", s.D),
                 .in = {nq},
                 .diff = {true},
                 .out = {no, nl},
                 .in_loss = {true, false},
                 .init = scaled(0, s.scale),
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.attention_forward(out[0], out[1], in[0], s.B, s.S_, s.Hq, s.Hkv, s.D);
                       return none();
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out, const Ptrs<T>& d, double,
                         const Ptrs<T>& g) {
                       ops::ActBuffer<T> tmp(&be, size_t(nq), g[0].dtype());
                       be.attention_backward(tmp.data(), d[0], in[0], out[0], out[1], s.B, s.S_,
                                             s.Hq, s.Hkv, s.D);
                       be.residual_backward(g[0], nullptr, tmp.data(), nq);
                       be.synchronize();
                     },
                 .ref =
                     [=](const Ins& in) {
                       Expected e;
                       e.out.resize(2);
                       ref::attention(in[0], s.B, s.S_, s.Hq, s.Hkv, s.D, e.out[0], e.out[1]);
                       return e;
                     },
                 .ref_tol = 5,
                 .fd_samples = s.fd_samples});
  }
  struct C {
    int n, pos0, Hq, Hkv, D, max_len;
  };
  for (const C& s : {C{3, 5, 4, 2, 8, 12}, C{1, 37, 2, 2, 16, 40}}) {
    const int64_t qs = int64_t(s.Hq + 2 * s.Hkv) * s.D, kv = int64_t(s.Hkv) * s.max_len * s.D;
    t.push_back({.name = cat("attention_cached n", s.n, " pos0 ", s.pos0),
                 .in = {s.n * qs, kv, kv},
                 .diff = {false, false, false},
                 .out = {int64_t(s.n) * s.Hq * s.D},
                 .in_loss = {true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.attention_cached_forward(out[0], in[0], qs, in[1], in[2], s.n, s.pos0,
                                                   s.Hq, s.Hkv, s.D, s.max_len);
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       return Expected{{ref::attention_cached(in[0], qs, in[1], in[2], s.n, s.pos0,
                                                              s.Hq, s.Hkv, s.D, s.max_len)},
                                       {}};
                     },
                 .ref_tol = 5});
  }
  for (const C& s : {C{3, 5, 4, 2, 8, 12}, C{1, 37, 2, 2, 16, 40}, C{4, 0, 8, 1, 64, 4}}) {
    const int64_t qs = int64_t(s.Hq + 2 * s.Hkv) * s.D + 3, kv = int64_t(s.Hkv) * s.max_len * s.D;
    t.push_back({.name = cat("kv_cache_append n", s.n, " pos0 ", s.pos0, " Hkv ", s.Hkv),
                 .in = {s.n * qs},
                 .diff = {false},
                 .out = {kv, kv},
                 .in_loss = {true, true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.kv_cache_append(out[0], out[1], in[0], qs, s.n, s.pos0, s.Hq, s.Hkv, s.D,
                                          s.max_len);
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       auto [kc, vc] = ref::kv_cache_append(in[0], qs, s.n, s.pos0, s.Hq, s.Hkv,
                                                            s.D, s.max_len);
                       return Expected{{kc, vc}, {}};
                     },
                 .ref_tol = 0});
  }
}

// Decoding with positions and cache slots in backend memory: rows of
// different sequences (cache blocks), one at the last position of its cache,
// one at position 0, and one outside the cache, which is left alone.
struct DecodeRows {
  int Hq, Hkv, D, max_len, blocks;
  std::vector<int32_t> pos, slot;
  int rows() const { return int(pos.size()); }
  int64_t qs() const { return int64_t(Hq + 2 * Hkv) * D + 3; }
  int64_t block() const { return int64_t(Hkv) * max_len * D; }
};
const std::vector<DecodeRows>& decode_rows_cases() {
  static const std::vector<DecodeRows> c = {{4, 2, 8, 12, 3, {5, 0, 11, 12}, {2, 0, 1, 0}},
                                            {2, 2, 16, 40, 2, {37, 3}, {1, 0}},
                                            {8, 1, 64, 6, 4, {2, -1, 5}, {3, 0, 1}}};
  return c;
}
// The rows' positions then slots in backend memory, for one call.
template <typename T>
struct DecodeInts {
  DecodeInts(Be<T>& be, const DecodeRows& s) : be_(be), p_(be.alloc_ints(2 * size_t(s.rows()))) {
    std::vector<int32_t> host = s.pos;
    host.insert(host.end(), s.slot.begin(), s.slot.end());
    be.ints_from_host(p_, host.data(), host.size());
  }
  ~DecodeInts() {
    be_.synchronize();
    be_.free_ints(p_);
  }
  const int32_t* pos() const { return p_; }
  const int32_t* slot(const DecodeRows& s) const { return p_ + s.rows(); }
  Be<T>& be_;
  int32_t* p_;
};

template <typename T>
void decode_rows_ops(std::vector<Case<T>>& t) {
  for (const DecodeRows& s : decode_rows_cases()) {
    const int64_t qs = s.qs(), kv = s.block() * s.blocks, nq = s.rows() * qs;
    const int64_t table = int64_t(s.max_len) * s.D / 2;
    const double theta = 1e4;
    t.push_back({.name = cat("decode_rope_append rows ", s.rows(), " D", s.D, " Hkv ", s.Hkv),
                 .in = {nq, kv, kv},
                 .diff = {false, false, false},
                 .out = {nq, kv, kv},
                 .in_loss = {true, true, true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       std::vector<double> inv(size_t(s.D / 2));
                       for (int i = 0; i < s.D / 2; ++i)
                         inv[size_t(i)] = std::pow(theta, -2.0 * i / s.D);
                       ops::DeviceBuffer<T> c(&be, size_t(table)), sn(&be, size_t(table));
                       be.rope_table(c.data(), sn.data(), s.max_len, s.D, inv.data());
                       for (int i = 0; i < 3; ++i) be.copy(out[i], in[i], i == 0 ? nq : kv);
                       const DecodeInts<T> ints(be, s);
                       be.decode_rope_append(out[0], qs, c.data(), sn.data(), out[1], out[2],
                                             s.block(), s.rows(), ints.slot(s), ints.pos(), s.Hq,
                                             s.Hkv, s.D, s.max_len);
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       Expected e{{in[0], in[1], in[2]}, {}};
                       for (int r = 0; r < s.rows(); ++r) {
                         const int p = s.pos[size_t(r)];
                         if (p < 0 || p >= s.max_len) continue;
                         const auto row0 = in[0].begin() + r * qs;
                         const ref::Vec rotated = ref::rope(ref::Vec(row0, row0 + qs), 1, 1,
                                                            s.Hq + s.Hkv, s.D, qs, theta, p);
                         std::copy(rotated.begin(), rotated.end(), e.out[0].begin() + r * qs);
                         const auto [kc, vc] =
                             ref::kv_cache_append(rotated, qs, 1, p, s.Hq, s.Hkv, s.D, s.max_len);
                         const int64_t at = s.slot[size_t(r)] * s.block();
                         for (int h = 0; h < s.Hkv; ++h)
                           for (int c = 0; c < s.D; ++c) {
                             const int64_t i = (int64_t(h) * s.max_len + p) * s.D + c;
                             e.out[1][size_t(at + i)] = kc[size_t(i)];
                             e.out[2][size_t(at + i)] = vc[size_t(i)];
                           }
                       }
                       return e;
                     }});
    t.push_back({.name = cat("attention_decode rows ", s.rows(), " D", s.D, " Hkv ", s.Hkv),
                 .in = {nq, kv, kv},
                 .diff = {false, false, false},
                 .out = {int64_t(s.rows()) * s.Hq * s.D},
                 .in_loss = {true},
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       const DecodeInts<T> ints(be, s);
                       be.attention_decode(out[0], in[0], qs, in[1], in[2], s.block(), s.rows(),
                                           ints.slot(s), ints.pos(), s.Hq, s.Hkv, s.D, s.max_len);
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       Expected e{{ref::Vec(size_t(s.rows()) * s.Hq * s.D, 0.0)}, {}};
                       for (int r = 0; r < s.rows(); ++r) {
                         const int p = s.pos[size_t(r)];
                         if (p < 0 || p >= s.max_len) continue;
                         const int64_t at = s.slot[size_t(r)] * s.block();
                         const ref::Vec q(in[0].begin() + r * qs, in[0].begin() + (r + 1) * qs);
                         const ref::Vec kc(in[1].begin() + at, in[1].begin() + at + s.block());
                         const ref::Vec vc(in[2].begin() + at, in[2].begin() + at + s.block());
                         const ref::Vec o = ref::attention_cached(q, qs, kc, vc, 1, p, s.Hq, s.Hkv,
                                                                  s.D, s.max_len);
                         std::copy(o.begin(), o.end(), e.out[0].begin() + int64_t(r) * s.Hq * s.D);
                       }
                       return e;
                     },
                 .ref_tol = 5});
  }
}

// --------------------------------------------------------------------- SwiGLU
template <typename T>
void swiglu_rows(std::vector<Case<T>>& t) {
  struct S {
    int N, F;
    double scale;
    int fd_samples;
  };
  for (const S& s : {S{3, 4, 1, 24}, S{7, 300, 1, 24}, S{13, 37, 6, 24}, S{4, 9, 4, 0}}) {
    const int64_t n = int64_t(s.N) * s.F;
    t.push_back({.name = cat("swiglu N", s.N, " F", s.F),
                 .in = {2 * n},
                 .diff = {true},
                 .out = {n},
                 .in_loss = {true},
                 .init = scaled(0, s.scale),
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.swiglu_forward(out[0], in[0], s.N, s.F);
                       return none();
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>&, const Ptrs<T>& d, double,
                         const Ptrs<T>& g) {
                       ops::ActBuffer<T> tmp(&be, size_t(2 * n), g[0].dtype());
                       be.swiglu_backward(tmp.data(), d[0], in[0], s.N, s.F);
                       be.residual_backward(g[0], nullptr, tmp.data(), 2 * n);
                       be.synchronize();
                     },
                 .ref =
                     [=](const Ins& in) {
                       return Expected{{ref::swiglu(in[0], s.N, s.F)}, {}};
                     },
                 .ref_tol = 4,
                 .fd_samples = s.fd_samples});
  }
}

// ------------------------------------------------------- head + cross-entropy

// Fused norm + head + cross-entropy: forward then backward, and the fused
// forward-backward; ignored targets; the phases of the vocabulary-parallel
// head on one rank's shard (with one rank the combines are identities).
template <typename T>
void head_ce_rows(std::vector<Case<T>>& t) {
  struct S {
    int N, C, V;
    bool fused;
    int v0;
    std::vector<int32_t> tg;
    double x_scale = 1;
    int fd_samples = 24;
  };
  auto pattern = [](int N, int V, int v0) {
    std::vector<int32_t> tg(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) tg[size_t(n)] = (n * 5 + 2) % (V + v0);
    tg[2] = ops::kIgnoreIndex;
    return tg;
  };
  std::vector<S> shapes = {
      {6, 8, 13, false, 0, pattern(6, 13, 0)},
      {6, 8, 13, true, 0, pattern(6, 13, 0)},
      {20, 16, 700, true, 0, pattern(20, 700, 0)},
      {7, 8, 11, false, 5, pattern(7, 11, 5)},
      {29, 24, 53, false, 0, random_tokens_with(29, 53, 20, {3, 11}, ops::kIgnoreIndex), 2}};
  for (bool fused : {false, true})
    shapes.push_back(
        {7, 6, 11, fused, 0, random_tokens_with(7, 11, 23, {4}, ops::kIgnoreIndex), 2, 0});
  for (const S& s : shapes) {
    const int64_t N = s.N;
    const bool shard = s.v0 > 0;
    std::vector<int64_t> out = {N * s.C, N, N, N};
    if (shard) out.push_back(N);  // the target logits
    t.push_back({.name = cat("head_ce ", s.fused ? "fused " : "", "N", s.N, " V", s.V,
                             shard ? " shard" : ""),
                 .in = {N * s.C, s.C, int64_t(s.V) * s.C},
                 .diff = {true, true, true},
                 .out = out,
                 .in_loss = std::vector<bool>(out.size(), false),
                 .scalar_in_loss = true,
                 .init = scaled(0, s.x_scale),
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       int64_t valid = 0;
                       if (!shard) {
                         const double loss =
                             be.head_ce_forward(out[0], out[1], out[2], out[3], &valid, in[0],
                                                in[1], in[2], s.tg.data(), N, s.C, s.V, 1e-5);
                         return std::vector<double>{loss, double(valid)};
                       }
                       // One rank: its statistics are already the combined ones.
                       be.head_ce_shard_stats(out[0], out[1], out[2], out[4], in[0], in[1], in[2],
                                              s.tg.data(), N, s.C, s.V, s.v0, 1e-5);
                       const double loss =
                           be.head_ce_shard_loss(out[3], &valid, out[2], out[4], s.tg.data(), N);
                       return std::vector<double>{loss, double(valid)};
                     },
                 .bwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out, const Ptrs<T>&,
                         double ds, const Ptrs<T>& g) {
                       if (shard) {
                         ops::ActBuffer<T> dxn(&be, size_t(N) * s.C, g[0].dtype());
                         be.head_ce_shard_backward(dxn.data(), g[2], out[0], out[2], in[2],
                                                   s.tg.data(), N, s.C, s.V, s.v0, ds);
                         be.rmsnorm_backward(g[0], g[1], dxn.data(), in[0], in[1], out[1], N, s.C);
                         be.synchronize();
                       } else if (s.fused) {
                         ops::ActBuffer<T> xn(&be, size_t(N) * s.C, in[0].dtype());
                         ops::DeviceBuffer<T> rstd(&be, size_t(N));
                         int64_t valid = 0;
                         be.head_ce_forward_backward(g[0], g[1], g[2], xn.data(), rstd.data(),
                                                     &valid, in[0], in[1], in[2], s.tg.data(), N,
                                                     s.C, s.V, 1e-5, ds);
                         be.synchronize();
                       } else {
                         be.head_ce_backward(g[0], g[1], g[2], in[0], out[0], out[1], out[2], in[1],
                                             in[2], s.tg.data(), N, s.C, s.V, ds);
                       }
                     },
                 .ref =
                     [=](const Ins& in) {
                       const auto r = ref::head_ce(in[0], in[1], in[2], s.tg, N, s.C, s.V, 1e-5,
                                                   ops::kIgnoreIndex, s.v0);
                       Expected e{{ref::rmsnorm(in[0], in[1], N, s.C, 1e-5),
                                   ref::rmsnorm_rstd(in[0], N, s.C, 1e-5), r.lse, r.nll},
                                  {r.loss_sum, double(r.n_valid)}};
                       if (shard) {
                         Host tl(static_cast<size_t>(N), 0.0);
                         for (int64_t n = 0; n < N; ++n) {
                           const int64_t y = int64_t(s.tg[size_t(n)]) - s.v0;
                           if (s.tg[size_t(n)] != ops::kIgnoreIndex && y >= 0 && y < s.V)
                             tl[size_t(n)] = r.logits[size_t(n * s.V + y)];
                         }
                         e.out.push_back(tl);
                       }
                       return e;
                     },
                 .ref_tol = 10,
                 .fd_samples = s.fd_samples});
  }
  struct L {
    int N, C, V;
    double x_scale;
  };
  for (const L& s : {L{3, 8, 13, 1}, L{5, 40, 300, 1}, L{29, 24, 53, 2}})
    t.push_back({.name = cat("head_logits N", s.N, " V", s.V),
                 .in = {int64_t(s.N) * s.C, s.C, int64_t(s.V) * s.C},
                 .diff = {false, false, false},
                 .out = {int64_t(s.N) * s.V, int64_t(s.N) * s.C},
                 .in_loss = {true, false},
                 .init = scaled(0, s.x_scale),
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.head_logits(out[0], out[1], in[0], in[1], in[2], s.N, s.C, s.V, 1e-5);
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       const Host xn = ref::rmsnorm(in[0], in[1], s.N, s.C, 1e-5);
                       return Expected{{ref::linear(xn, in[2], nullptr, s.N, s.C, s.V), xn}, {}};
                     },
                 .ref_tol = 10});
}

// ------------------------------------------------------------------------ MSE
template <typename T>
void mse_rows(std::vector<Case<T>>& t) {
  for (int64_t n : {6, 5000, 1001, 12})
    t.push_back({.name = cat("mse n", n),
                 .in = {n, n},
                 .diff = {true, true},
                 .scalar_in_loss = true,
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>&) {
                       return std::vector<double>{be.mse_forward(in[0], in[1], n)};
                     },
                 .bwd = [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>&, const Ptrs<T>&, double ds,
                            const Ptrs<T>& g) { be.mse_backward(g[0], g[1], in[0], in[1], n, ds); },
                 .ref =
                     [=](const Ins& in) {
                       return Expected{{}, {ref::mse(in[0], in[1])}};
                     },
                 .fd_samples = n == 12 ? 0 : 24});
}

// ---------------------------------------------------------- optimizer, norms
template <typename T>
void optimizer_rows(std::vector<Case<T>>& t) {
  // AdamW on (p, g, m, v >= 0): one step at step 3, and five steps from zero
  // moments; the updated p, m, v.
  struct S {
    int64_t n;
    int steps;
  };
  for (const S& s : {S{7, 1}, S{3000, 1}, S{257, 5}}) {
    const int64_t n = s.n;
    ops::AdamWStep st;
    st.lr = s.steps == 1 ? 3e-3 : 1e-2;
    st.weight_decay = 0.1;
    t.push_back({.name = cat("adamw n", n, s.steps > 1 ? " 5 steps" : ""),
                 .in = {n, n * s.steps, n, n},
                 .diff = {false, false, false, false},
                 .out = {n, n, n},
                 .in_loss = {true, true, true},
                 .init =
                     [=](Ins& in) {
                       for (double& x : in[3]) x = std::abs(x) * 0.01;
                       if (s.steps > 1) {
                         std::fill(in[2].begin(), in[2].end(), 0.0);
                         std::fill(in[3].begin(), in[3].end(), 0.0);
                       }
                     },
                 .fwd =
                     [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                       be.copy(out[0], in[0], n);
                       be.copy(out[1], in[2], n);
                       be.copy(out[2], in[3], n);
                       ops::AdamWStep step = st;
                       for (int k = 0; k < s.steps; ++k) {
                         step.step = s.steps == 1 ? 3 : k + 1;
                         be.adamw_update(out[0], in[1] + k * n, out[1], out[2], n, step);
                       }
                       return none();
                     },
                 .ref =
                     [=](const Ins& in) {
                       Host p = in[0], m = in[2], v = in[3];
                       for (int k = 0; k < s.steps; ++k)
                         ref::adamw(p, Host(in[1].begin() + k * n, in[1].begin() + (k + 1) * n), m,
                                    v, s.steps == 1 ? 3 : k + 1, st.lr, st.beta1, st.beta2, st.eps,
                                    st.weight_decay);
                       return Expected{{p, m, v}, {}};
                     },
                 .ref_tol = 10});
  }
  // Clipping inside the update (ops::AdamWStep): a factor from the host, and
  // the factor computed where the update runs from sums of squares left in
  // backend scalars (the gradient's squares split over the two accumulators,
  // as the optimizer splits split and replicated tensors), the norm above
  // the limit (clipped) and below it; the gradient itself is left as it was.
  // The sums are also returned, so the accumulators are checked too.
  struct Clip {
    const char* name;
    double host_factor, max_norm;  // max_norm > 0: from the device sums
  };
  for (int64_t n : {5, 3001})
    for (const Clip& c : {Clip{"host factor", 0.37, 0}, Clip{"device factor", 1, 0.5},
                          Clip{"device, under the limit", 1, 1e9}})
      t.push_back({.name = cat("adamw+clip ", c.name, " n", n),
                   .in = {n, n, n, n},
                   .diff = {false, false, false, false},
                   .out = {n, n, n, n},
                   .in_loss = {true, true, true, false},
                   .init =
                       [](Ins& in) {
                         for (double& x : in[3]) x = std::abs(x) * 0.01;
                       },
                   .fwd =
                       [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                         be.copy(out[0], in[0], n);
                         be.copy(out[1], in[2], n);
                         be.copy(out[2], in[3], n);
                         be.copy(out[3], in[1], n);
                         double* acc = be.alloc_scalars(2);
                         be.sum_squares(acc, in[1], n / 2);
                         be.sum_squares(acc + 1, in[1] + n / 2, n - n / 2);
                         ops::AdamWStep st;
                         st.lr = 3e-3;
                         st.weight_decay = 0.1;
                         st.step = 2;
                         st.clip = c.host_factor;
                         if (c.max_norm > 0) {
                           st.squares = acc;
                           st.max_norm = c.max_norm;
                         }
                         be.adamw_update(out[0], out[3], out[1], out[2], n, st);
                         double h[2];
                         be.read_scalars(h, acc, 2);
                         be.free_scalars(acc);
                         return std::vector<double>{h[0], h[1]};
                       },
                   .ref =
                       [=](const Ins& in) {
                         double s0 = 0, s1 = 0;
                         for (int64_t i = 0; i < n; ++i)
                           (i < n / 2 ? s0 : s1) += in[1][i] * in[1][i];
                         const double k =
                             c.max_norm > 0 ? ops::clip_coefficient(std::sqrt(s0 + s1), c.max_norm)
                                            : c.host_factor;
                         Host p = in[0], m = in[2], v = in[3], g = in[1];
                         for (double& x : g) x *= k;
                         ref::adamw(p, g, m, v, 2, 3e-3, 0.9, 0.95, 1e-8, 0.1);
                         return Expected{{p, m, v, in[1]}, {s0, s1}};
                       },
                   .ref_tol = 10});
  // A non-finite norm (an inf among the gradients) updates nothing.
  t.push_back({.name = "adamw+clip non-finite norm",
               .in = {6, 6, 6, 6},
               .diff = {false, false, false, false},
               .out = {6, 6, 6},
               .in_loss = {true, true, true},
               .init =
                   [](Ins& in) {
                     for (double& x : in[3]) x = std::abs(x) * 0.01;
                   },
               .fwd =
                   [=](Be<T>& be, const Ptrs<T>& in, const Ptrs<T>& out) {
                     be.copy(out[0], in[0], 6);
                     be.copy(out[1], in[2], 6);
                     be.copy(out[2], in[3], 6);
                     std::vector<T> g(6, T(0.5));
                     g[3] = std::numeric_limits<T>::infinity();
                     ops::DeviceBuffer<T> dg(&be, 6);
                     be.from_host(dg.data(), g.data(), 6);
                     double* acc = be.alloc_scalars(2);
                     be.sum_squares(acc + 1, dg.data(), 6);
                     ops::AdamWStep st;
                     st.squares = acc;
                     st.max_norm = 1.0;
                     be.adamw_update(out[0], dg.data(), out[1], out[2], 6, st);
                     be.synchronize();
                     be.free_scalars(acc);
                     return none();
                   },
               .ref =
                   [](const Ins& in) {
                     return Expected{{in[0], in[2], in[3]}, {}};
                   },
               .ref_tol = 0});
}

}  // namespace

template <typename T>
std::vector<Case<T>> op_table() {
  std::vector<Case<T>> t;
  embedding_rows(t);
  rmsnorm_rows(t);
  linear_rows(t);
  bias_axpby_rows(t);
  residual_rows(t);
  rope_rows(t);
  attention_rows(t);
  decode_rows_ops(t);
  swiglu_rows(t);
  head_ce_rows(t);
  mse_rows(t);
  optimizer_rows(t);
  return t;
}

template std::vector<Case<float>> op_table<float>();
template std::vector<Case<double>> op_table<double>();

}  // namespace strata::optable
