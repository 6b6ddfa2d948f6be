// One table over ops x backends x shapes x dtypes. Every case runs through
// the op interface on each backend this build has ("cpu"; "simt": the CUDA
// kernels on the CPU SIMT executor; "cuda" where a GPU is visible) and is
// checked three ways:
//   forward:  outputs (and returned scalars) of every backend equal the CPU
//             backend's (float: 2e-5 relative to the output's scale; double:
//             1e-11);
//   backward: with the same output gradients and the same non-zero gradient
//             buffers (so "+=" and "=" rules are checked too), the input
//             gradients equal the CPU backend's;
//   finite differences (double): each backend's backward equals central
//             differences of its own forward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/simt/simt.h"
#include "core/error.h"
#include "ops/backend.h"

using namespace strata;
using ops::Backend;

namespace {

using Host = std::vector<double>;

template <typename T>
struct Case {
  std::string name;
  std::vector<int64_t> in;      // input sizes
  std::vector<bool> diff;       // inputs with a gradient (checked by finite differences)
  std::vector<int64_t> out;     // output sizes
  std::vector<bool> in_loss;    // outputs the scalar loss of the gradient checks reads
  bool scalar_in_loss = false;  // the returned scalar (loss) is part of it
  // Values of the inputs (default: uniform in [-1, 1]).
  std::function<void(std::vector<Host>&)> init;
  // Runs the op: inputs and outputs are backend memory; returns host scalars.
  std::function<std::vector<double>(Backend<T>&, const std::vector<T*>&, const std::vector<T*>&)>
      fwd;
  // Backward: adds into grads[k] (one per input with diff[k], null otherwise)
  // the gradient of sum(dout . out) + dscalar * scalar.
  std::function<void(Backend<T>&, const std::vector<T*>& in, const std::vector<T*>& out,
                     const std::vector<T*>& dout, double dscalar, const std::vector<T*>& grads)>
      bwd;
};

Host random_host(int64_t n, uint64_t seed) {
  Host v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double(s >> 11) / double(1ull << 53) * 2.0 - 1.0;
  }
  return v;
}

// Runs a case's forward (and backward) on one backend.
template <typename T>
struct Run {
  std::vector<Host> out, grads;
  std::vector<double> scalars;
};

template <typename T>
class Device {
 public:
  explicit Device(Backend<T>& be) : be_(be) {}
  T* put(const Host& h) {
    bufs_.emplace_back(&be_, h.size());
    std::vector<T> t(h.begin(), h.end());
    if (!h.empty()) be_.from_host(bufs_.back().data(), t.data(), int64_t(t.size()));
    return bufs_.back().data();
  }
  Host get(const T* p, int64_t n) {
    std::vector<T> t(static_cast<size_t>(n));
    if (n) be_.to_host(t.data(), p, n);
    return Host(t.begin(), t.end());
  }

 private:
  Backend<T>& be_;
  std::vector<ops::DeviceBuffer<T>> bufs_;
};

template <typename T>
Run<T> run(const Case<T>& c, Backend<T>& be, const std::vector<Host>& in,
           const std::vector<Host>* dout, double dscalar, const std::vector<Host>* grad_base) {
  Device<T> dev(be);
  std::vector<T*> din, dout_p, dgrad;
  for (const Host& h : in) din.push_back(dev.put(h));
  std::vector<T*> outs;
  for (int64_t n : c.out) outs.push_back(dev.put(Host(size_t(n), 0.0)));
  Run<T> r;
  r.scalars = c.fwd(be, din, outs);
  for (size_t k = 0; k < outs.size(); ++k) r.out.push_back(dev.get(outs[k], c.out[k]));
  if (dout && c.bwd) {
    for (const Host& h : *dout) dout_p.push_back(dev.put(h));
    for (size_t k = 0; k < c.in.size(); ++k)
      dgrad.push_back(c.diff[k] ? dev.put((*grad_base)[k]) : nullptr);
    c.bwd(be, din, outs, dout_p, dscalar, dgrad);
    for (size_t k = 0; k < c.in.size(); ++k)
      r.grads.push_back(c.diff[k] ? dev.get(dgrad[k], c.in[k]) : Host());
  }
  return r;
}

template <typename T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-11;
}

// max |a - b| <= tol * max(1, max |b|), element by element with a message.
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

std::vector<std::string> backends() {
  std::vector<std::string> b = {"cpu", "simt"};
  if (ops::resolve_device("auto") == "cuda") b.push_back("cuda");
  return b;
}

// ------------------------------------------------------------------ the table
template <typename T>
std::vector<Case<T>> table() {
  std::vector<Case<T>> t;
  using V = std::vector<T*>;

  // Embedding, whole table and a vocabulary shard.
  for (auto [N, C, V_, v0, Vl] :
       {std::tuple{7, 5, 11, 0, -1}, std::tuple{40, 64, 9, 0, -1}, std::tuple{12, 33, 10, 3, 4}}) {
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) tok[size_t(n)] = (n * 7 + n / 3) % V_;
    const int rows = Vl < 0 ? V_ : Vl;
    t.push_back(
        {"embedding N" + std::to_string(N) + " C" + std::to_string(C) + (Vl < 0 ? "" : " shard"),
         {int64_t(rows) * C},
         {true},
         {int64_t(N) * C},
         {true},
         false,
         nullptr,
         [=](Backend<T>& be, const V& in, const V& out) {
           be.embedding_forward(out[0], tok.data(), in[0], N, C, V_, v0, Vl);
           return std::vector<double>{};
         },
         [=](Backend<T>& be, const V&, const V&, const V& d, double, const V& g) {
           be.embedding_backward(g[0], tok.data(), d[0], N, C, v0, Vl);
         }});
  }

  for (auto [N, C] : {std::pair{3, 8}, std::pair{5, 300}, std::pair{2, 1000}})
    t.push_back({"rmsnorm N" + std::to_string(N) + " C" + std::to_string(C),
                 {int64_t(N) * C, C},
                 {true, true},
                 {int64_t(N) * C, N},
                 {true, false},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.rmsnorm_forward(out[0], out[1], in[0], in[1], N, C, 1e-5);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V& in, const V& out, const V& d, double, const V& g) {
                   be.rmsnorm_backward(g[0], g[1], d[0], in[0], in[1], out[1], N, C);
                 }});

  // Linear with bias, compact and on views (leading dimensions), dx "=" and "+=".
  for (auto [N, IC, OC, pad] :
       {std::tuple{4, 6, 5, 0}, std::tuple{33, 20, 17, 0}, std::tuple{9, 12, 7, 3}})
    for (bool acc : {false, true}) {
      const ops::LinearLd ld{pad ? IC + pad : 0, pad ? IC + pad + 1 : 0, pad ? OC + pad : 0};
      const int64_t lx = pad ? IC + pad : IC, lw = pad ? IC + pad + 1 : IC,
                    lo = pad ? OC + pad : OC;
      t.push_back({"linear N" + std::to_string(N) + " IC" + std::to_string(IC) +
                       (pad ? " views" : "") + (acc ? " dx+=" : " dx="),
                   {N * lx, OC * lw, OC},
                   {true, true, true},
                   {N * lo},
                   {true},
                   false,
                   nullptr,
                   [=](Backend<T>& be, const V& in, const V& out) {
                     be.linear_forward(out[0], in[0], in[1], in[2], N, IC, OC, ld);
                     return std::vector<double>{};
                   },
                   [=](Backend<T>& be, const V& in, const V&, const V& d, double, const V& g) {
                     be.linear_backward(g[0], g[1], g[2], d[0], in[0], in[1], N, IC, OC, acc, ld);
                   }});
    }

  for (auto [N, OC, ld] : {std::tuple{5, 7, 0}, std::tuple{6, 4, 9}})
    t.push_back({"bias_add N" + std::to_string(N) + (ld ? " ld" : ""),
                 {int64_t(N) * (ld ? ld : OC), OC},
                 {true, true},
                 {int64_t(N) * (ld ? ld : OC)},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.copy(out[0], in[0], int64_t(N) * (ld ? ld : OC));
                   be.bias_add_forward(out[0], in[1], N, OC, ld);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V&, const V&, const V& d, double, const V& g) {
                   be.residual_backward(g[0], nullptr, d[0], int64_t(N) * (ld ? ld : OC));
                   be.bias_add_backward(g[1], d[0], N, OC, ld);
                 }});

  for (int64_t n : {5, 1000})
    t.push_back({"axpby n" + std::to_string(n),
                 {n, n},
                 {true, true},
                 {n},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.axpby_forward(out[0], in[0], in[1], n, 0.3, -1.7);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V&, const V&, const V& d, double, const V& g) {
                   be.axpby_backward(g[0], g[1], d[0], n, 0.3, -1.7);
                 }});

  for (int64_t n : {3, 777})
    t.push_back({"residual n" + std::to_string(n),
                 {n, n},
                 {true, true},
                 {n},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.residual_forward(out[0], in[0], in[1], n);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V&, const V&, const V& d, double, const V& g) {
                   be.residual_backward(g[0], g[1], d[0], n);
                 }});

  // RoPE on the first H of more heads (row stride), positions from pos0; the
  // backend's own table.
  for (auto [B, S, H, D, extra, pos0] :
       {std::tuple{2, 5, 3, 8, 4, 3}, std::tuple{1, 9, 2, 64, 0, 0}}) {
    const int64_t stride = int64_t(H) * D + extra, n = int64_t(B) * S * stride;
    const int max_pos = pos0 + S + 2;
    auto table_of = [=](Backend<T>& be, ops::DeviceBuffer<T>& c, ops::DeviceBuffer<T>& s) {
      std::vector<double> inv(size_t(D / 2));
      for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = std::pow(10000.0, -2.0 * i / D);
      c = ops::DeviceBuffer<T>(&be, size_t(max_pos) * D / 2);
      s = ops::DeviceBuffer<T>(&be, size_t(max_pos) * D / 2);
      be.rope_table(c.data(), s.data(), max_pos, D, inv.data());
    };
    t.push_back({"rope D" + std::to_string(D) + " pos0 " + std::to_string(pos0),
                 {n},
                 {true},
                 {n, int64_t(max_pos) * D / 2},
                 {true, false},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   ops::DeviceBuffer<T> c, s;
                   table_of(be, c, s);
                   be.copy(out[0], in[0], n);
                   be.rope_forward(out[0], c.data(), s.data(), B, S, H, D, stride, pos0);
                   be.copy(out[1], c.data(), int64_t(max_pos) * D / 2);
                   be.synchronize();
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V&, const V&, const V& d, double, const V& g) {
                   ops::DeviceBuffer<T> c, s, tmp(&be, size_t(n));
                   table_of(be, c, s);
                   be.copy(tmp.data(), d[0], n);
                   be.rope_backward(tmp.data(), c.data(), s.data(), B, S, H, D, stride, pos0);
                   be.residual_backward(g[0], nullptr, tmp.data(), n);
                   be.synchronize();
                 }});
  }

  // Attention: MHA, GQA, MQA; sequences over one and several 32-key chunks;
  // head dims below, at and above one element per lane.
  for (auto [B, S, Hq, Hkv, D] : {std::tuple{2, 5, 2, 2, 4}, std::tuple{1, 40, 4, 2, 8},
                                  std::tuple{1, 70, 2, 1, 40}, std::tuple{2, 33, 3, 1, 64}}) {
    const int64_t W = int64_t(Hq + 2 * Hkv) * D, nq = int64_t(B) * S * W;
    const int64_t no = int64_t(B) * S * Hq * D, nl = int64_t(B) * Hq * S;
    t.push_back({"attention B" + std::to_string(B) + " T" + std::to_string(S) + " Hq" +
                     std::to_string(Hq) + " Hkv" + std::to_string(Hkv) + " D" + std::to_string(D),
                 {nq},
                 {true},
                 {no, nl},
                 {true, false},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.attention_forward(out[0], out[1], in[0], B, S, Hq, Hkv, D);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V& in, const V& out, const V& d, double, const V& g) {
                   ops::DeviceBuffer<T> tmp(&be, size_t(nq));
                   be.attention_backward(tmp.data(), d[0], in[0], out[0], out[1], B, S, Hq, Hkv, D);
                   be.residual_backward(g[0], nullptr, tmp.data(), nq);
                   be.synchronize();
                 }});
  }

  for (auto [n, pos0, Hq, Hkv, D, max_len] :
       {std::tuple{3, 5, 4, 2, 8, 12}, std::tuple{1, 37, 2, 2, 16, 40}}) {
    const int64_t qs = int64_t(Hq + 2 * Hkv) * D, kv = int64_t(Hkv) * max_len * D;
    t.push_back({"attention_cached n" + std::to_string(n) + " pos0 " + std::to_string(pos0),
                 {n * qs, kv, kv},
                 {false, false, false},
                 {int64_t(n) * Hq * D},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.attention_cached_forward(out[0], in[0], qs, in[1], in[2], n, pos0, Hq, Hkv, D,
                                               max_len);
                   return std::vector<double>{};
                 },
                 nullptr});
  }

  for (auto [N, F] : {std::pair{3, 4}, std::pair{7, 300}}) {
    const int64_t n = int64_t(N) * F;
    t.push_back({"swiglu N" + std::to_string(N) + " F" + std::to_string(F),
                 {2 * n},
                 {true},
                 {n},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.swiglu_forward(out[0], in[0], N, F);
                   return std::vector<double>{};
                 },
                 [=](Backend<T>& be, const V& in, const V&, const V& d, double, const V& g) {
                   ops::DeviceBuffer<T> tmp(&be, size_t(2 * n));
                   be.swiglu_backward(tmp.data(), d[0], in[0], N, F);
                   be.residual_backward(g[0], nullptr, tmp.data(), 2 * n);
                   be.synchronize();
                 }});
  }

  // Fused norm + head + cross-entropy: forward then backward, and the fused
  // forward-backward; an ignored target; a vocabulary shard (one rank).
  for (auto [N, C, V_, fused, v0] :
       {std::tuple{6, 8, 13, false, 0}, std::tuple{6, 8, 13, true, 0},
        std::tuple{20, 16, 700, true, 0}, std::tuple{7, 8, 11, false, 5}}) {
    std::vector<int32_t> tg(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) tg[size_t(n)] = (n * 5 + 2) % (V_ + v0);
    tg[2] = ops::kIgnoreIndex;
    auto shard = std::make_shared<ops::VocabShard<T>>();
    shard->v0 = v0;
    shard->combine = [](T*, T*, int64_t) {};  // one rank: local statistics are global
    shard->reduce = [](T*, int64_t) {};
    auto sp = v0 ? shard : nullptr;
    t.push_back({std::string("head_ce ") + (fused ? "fused " : "") + "N" + std::to_string(N) +
                     " V" + std::to_string(V_) + (v0 ? " shard" : ""),
                 {int64_t(N) * C, C, int64_t(V_) * C},
                 {true, true, true},
                 {int64_t(N) * C, N, N, N},
                 {false, false, false, false},
                 true,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   int64_t valid = 0;
                   const double loss =
                       be.head_ce_forward(out[0], out[1], out[2], out[3], &valid, in[0], in[1],
                                          in[2], tg.data(), N, C, V_, 1e-5, sp.get());
                   return std::vector<double>{loss, double(valid)};
                 },
                 [=](Backend<T>& be, const V& in, const V& out, const V&, double ds, const V& g) {
                   if (fused) {
                     ops::DeviceBuffer<T> xn(&be, size_t(N) * C), rstd(&be, size_t(N));
                     int64_t valid = 0;
                     be.head_ce_forward_backward(g[0], g[1], g[2], xn.data(), rstd.data(), &valid,
                                                 in[0], in[1], in[2], tg.data(), N, C, V_, 1e-5, ds,
                                                 sp.get());
                     be.synchronize();
                   } else {
                     be.head_ce_backward(g[0], g[1], g[2], in[0], out[0], out[1], out[2], in[1],
                                         in[2], tg.data(), N, C, V_, ds, sp.get());
                   }
                 }});
  }

  for (auto [N, C, V_] : {std::tuple{3, 8, 13}, std::tuple{5, 40, 300}})
    t.push_back({"head_logits N" + std::to_string(N) + " V" + std::to_string(V_),
                 {int64_t(N) * C, C, int64_t(V_) * C},
                 {false, false, false},
                 {int64_t(N) * V_, int64_t(N) * C},
                 {true, false},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.head_logits(out[0], out[1], in[0], in[1], in[2], N, C, V_, 1e-5);
                   return std::vector<double>{};
                 },
                 nullptr});

  for (int64_t n : {6, 5000})
    t.push_back({"mse n" + std::to_string(n),
                 {n, n},
                 {true, true},
                 {},
                 {},
                 true,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V&) {
                   return std::vector<double>{be.mse_forward(in[0], in[1], n)};
                 },
                 [=](Backend<T>& be, const V& in, const V&, const V&, double ds, const V& g) {
                   be.mse_backward(g[0], g[1], in[0], in[1], n, ds);
                 }});

  // AdamW on (p, g, m, v >= 0): the updated p, m, v.
  for (int64_t n : {7, 3000})
    t.push_back({"adamw n" + std::to_string(n),
                 {n, n, n, n},
                 {false, false, false, false},
                 {n, n, n},
                 {true, true, true},
                 false,
                 [](std::vector<Host>& in) {
                   for (double& x : in[3]) x = std::abs(x) * 0.01;
                 },
                 [=](Backend<T>& be, const V& in, const V& out) {
                   be.copy(out[0], in[0], n);
                   be.copy(out[1], in[2], n);
                   be.copy(out[2], in[3], n);
                   ops::AdamWStep s;
                   s.lr = 3e-3;
                   s.weight_decay = 0.1;
                   s.step = 3;
                   be.adamw_update(out[0], in[1], out[1], out[2], n, s);
                   return std::vector<double>{};
                 },
                 nullptr});

  // Gradient-norm helpers: sum of squares into a scalar accumulator (twice,
  // so it accumulates), then scaling in place.
  for (int64_t n : {5, 300000})
    t.push_back({"sum_squares+scale n" + std::to_string(n),
                 {n},
                 {false},
                 {n},
                 {true},
                 false,
                 nullptr,
                 [=](Backend<T>& be, const V& in, const V& out) {
                   double* acc = be.alloc_scalars(2);
                   be.sum_squares(acc, in[0], n);
                   be.sum_squares(acc + 1, in[0], n);
                   be.sum_squares(acc + 1, in[0], n);
                   double h[2];
                   be.read_scalars(h, acc, 2);
                   be.free_scalars(acc);
                   be.copy(out[0], in[0], n);
                   be.scale_inplace(out[0], n, 0.37);
                   return std::vector<double>{h[0], h[1]};
                 },
                 nullptr});
  return t;
}

template <typename T>
void check_table(bool finite_differences) {
  const auto cases = table<T>();
  ASSERT_GE(cases.size(), 30u);
  for (const Case<T>& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Host> in, dout, base, zero;
    for (size_t k = 0; k < c.in.size(); ++k) in.push_back(random_host(c.in[k], 11 + k));
    if (c.init) c.init(in);
    for (size_t k = 0; k < c.out.size(); ++k) dout.push_back(random_host(c.out[k], 101 + k));
    for (size_t k = 0; k < c.in.size(); ++k) {
      base.push_back(random_host(c.in[k], 201 + k));
      zero.push_back(Host(size_t(c.in[k]), 0.0));
    }
    const double dscalar = 0.7;
    auto cpu = ops::make_backend<T>("cpu");
    const Run<T> ref = run<T>(c, *cpu, in, &dout, dscalar, &base);
    for (const std::string& name : backends()) {
      SCOPED_TRACE(name);
      auto be = ops::make_backend<T>(name);
      if (!finite_differences) {
        const Run<T> got = run<T>(c, *be, in, &dout, dscalar, &base);
        for (size_t k = 0; k < c.out.size(); ++k)
          expect_close(got.out[k], ref.out[k], tolerance<T>(), "output " + std::to_string(k));
        expect_close(got.scalars, ref.scalars, tolerance<T>(), "scalars");
        for (size_t k = 0; k < got.grads.size(); ++k)
          expect_close(got.grads[k], ref.grads[k], tolerance<T>(), "gradient " + std::to_string(k));
        continue;
      }
      if (!c.bwd) continue;
      // dL/d in[k] by central differences of this backend's forward.
      auto loss = [&](const std::vector<Host>& x) {
        const Run<T> r = run<T>(c, *be, x, nullptr, 0, nullptr);
        double L = 0;
        for (size_t k = 0; k < c.out.size(); ++k)
          if (c.in_loss[k])
            for (size_t i = 0; i < r.out[k].size(); ++i) L += dout[k][i] * r.out[k][i];
        if (c.scalar_in_loss) L += dscalar * r.scalars[0];
        return L;
      };
      std::vector<Host> dmask = dout;
      for (size_t k = 0; k < c.out.size(); ++k)
        if (!c.in_loss[k]) std::fill(dmask[k].begin(), dmask[k].end(), 0.0);
      const Run<T> an = run<T>(c, *be, in, &dmask, c.scalar_in_loss ? dscalar : 0.0, &zero);
      for (size_t k = 0; k < c.in.size(); ++k) {
        if (!c.diff[k]) continue;
        const int64_t stride = std::max<int64_t>(1, c.in[k] / 24);  // about 24 elements
        for (int64_t i = 0; i < c.in[k]; i += stride) {
          std::vector<Host> xp = in, xm = in;
          const double h = 1e-6;
          xp[k][size_t(i)] += h;
          xm[k][size_t(i)] -= h;
          const double num = (loss(xp) - loss(xm)) / (2 * h);
          EXPECT_NEAR(an.grads[k][size_t(i)], num, 1e-6 * std::max(1.0, std::abs(num)))
              << "input " << k << " element " << i;
        }
      }
    }
  }
}

}  // namespace

TEST(BackendParity, EveryOpFloatMatchesTheCpuBackend) { check_table<float>(false); }
TEST(BackendParity, EveryOpDoubleMatchesTheCpuBackend) { check_table<double>(false); }
TEST(BackendParity, EveryBackwardMatchesFiniteDifferences) { check_table<double>(true); }

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

TEST(BackendParity, Bf16MatmulsRoundOperandsLikeTheCpuBackend) {
  auto cpu = ops::make_backend<float>("cpu");
  auto simt = ops::make_backend<float>("simt");
  const int N = 9, IC = 37, OC = 11;
  const Host x = random_host(N * IC, 5), w = random_host(OC * IC, 6);
  std::vector<Host> outs;
  for (auto* be : {cpu.get(), simt.get()}) {
    be->set_matmul_precision(ops::MatmulPrecision::BF16);
    Device<float> dev(*be);
    float* dx = dev.put(x);
    float* dw = dev.put(w);
    float* out = dev.put(Host(size_t(N * OC), 0.0));
    be->linear_forward(out, dx, dw, nullptr, N, IC, OC);
    outs.push_back(dev.get(out, N * OC));
    be->set_matmul_precision(ops::MatmulPrecision::FP32);
  }
  expect_close(outs[1], outs[0], 1e-6, "bf16 linear");
  // And it is not the fp32 product.
  Device<float> dev(*simt);
  float* out = dev.put(Host(size_t(N * OC), 0.0));
  simt->linear_forward(out, dev.put(x), dev.put(w), nullptr, N, IC, OC);
  const Host fp32 = dev.get(out, N * OC);
  double diff = 0;
  for (size_t i = 0; i < fp32.size(); ++i) diff = std::max(diff, std::abs(fp32[i] - outs[1][i]));
  EXPECT_GT(diff, 1e-4);
}
