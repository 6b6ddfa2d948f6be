// The op table: every op of ops/ops.def on the shapes that matter, one row
// per op and shape (op_table.cpp), in the manner of ggml's
// test-backend-ops. Each row runs through the op interface on every backend
// this build has and is checked three ways:
//   reference   (backend_parity_test.cpp) the outputs and returned scalars
//               of every backend equal the row's double reference
//               (reference.h), computed from the inputs as the backend got
//               them;
//   parity      (backend_parity_test.cpp) outputs, scalars and, with the same
//               output gradients and the same non-zero gradient buffers
//               (so "+=" and "=" rules are compared too), input gradients of
//               every backend equal the CPU backend's;
//   gradient    (grad_test.cpp, double) each backend's backward equals
//               central differences of its own forward, added to what the
//               gradient buffer held where the op accumulates.
// The backends: "cpu"; "cpu-avx2", the CPU backend held to its AVX2 kernels
// where it would take AVX-512 ones; "simt", the CUDA kernels on the CPU SIMT
// executor; "cuda" where a GPU is visible. A coverage test fails when an op
// of ops/ops.def has no row, no reference check or (a backward) no gradient
// check.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/backend.h"
#include "testing.h"

namespace strata::optable {

using Host = std::vector<double>;

// What a row's forward should give: one Host per output (an empty one is not
// checked) and the returned scalars.
struct Expected {
  std::vector<Host> out;
  std::vector<double> scalars;
};

// A row's buffers as the ops see them: activations (storage T, or bf16 in
// the bf16-storage check) or plain T* (weights, statistics), which an Act
// converts back to when its storage is T.
template <typename T>
using Ptrs = std::vector<ops::Act<T>>;

template <typename T>
struct Case {
  std::string name = {};           // the op and what is special about the shape
  std::vector<int64_t> in = {};    // input sizes
  std::vector<bool> diff = {};     // inputs with a gradient (checked by finite differences)
  std::vector<int64_t> out = {};   // output sizes
  std::vector<bool> in_loss = {};  // outputs the scalar loss of the gradient check reads
  bool scalar_in_loss = false;     // the returned scalar (a loss) is part of it
  // Values of the inputs (default: uniform in [-1, 1]).
  std::function<void(std::vector<Host>&)> init = nullptr;
  // Runs the op: inputs and outputs are backend memory; returns host scalars.
  std::function<std::vector<double>(ops::Backend<T>&, const Ptrs<T>& in, const Ptrs<T>& out)> fwd =
      nullptr;
  // Backward: into grads[k] (one per input with diff[k], null otherwise) the
  // gradient of sum(dout . out) + dscalar * scalar, added (or written, for
  // the inputs of `assigns`).
  std::function<void(ops::Backend<T>&, const Ptrs<T>& in, const Ptrs<T>& out, const Ptrs<T>& dout,
                     double dscalar, const Ptrs<T>& grads)>
      bwd = nullptr;
  // The reference: the forward's outputs and scalars from the inputs.
  std::function<Expected(const std::vector<Host>& in)> ref = nullptr;
  // Its tolerance: ref_tol times 2e-5 (float) or 1e-12 (double), relative to
  // the largest magnitude of the expected output (0: exact).
  double ref_tol = 1;
  std::vector<bool> assigns = {};  // gradients written with "=" (default: all "+=")
  int fd_samples = 24;             // elements per input the gradient check probes (0: all)
};

// Every row, for float and double (op_table.cpp).
template <typename T>
std::vector<Case<T>> op_table();

inline Host random_host(int64_t n, uint64_t seed) {
  Host v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double(s >> 11) / double(1ull << 53) * 2.0 - 1.0;
  }
  return v;
}

// ------------------------------------------------------------ running a row

template <typename T>
class Device {
 public:
  explicit Device(ops::Backend<T>& be) : be_(be) {}
  // h in backend memory, stored as dt (bf16: h rounded to nearest even).
  ops::Act<T> put(const Host& h, ops::Dtype dt = ops::Act<T>::kNative) {
    bufs_.emplace_back(&be_, h.size(), dt);
    ops::Act<T> p = bufs_.back().data();
    if (h.empty()) return p;
    if (dt == ops::Act<T>::kNative) {
      std::vector<T> t(h.begin(), h.end());
      be_.from_host(p, t.data(), int64_t(t.size()));
    } else {
      std::vector<ops::bf16> b(h.size() + 1);
      for (size_t i = 0; i < h.size(); ++i) b[i] = ops::bf16(float(h[i]));
      be_.from_host(static_cast<T*>(p.raw()), reinterpret_cast<const T*>(b.data()),
                    int64_t(b.size() * 2 / sizeof(T)));
    }
    return p;
  }
  Host get(ops::ActIn<T> p, int64_t n) {
    if (!n) return Host();
    if (p.native()) {
      std::vector<T> t(static_cast<size_t>(n));
      be_.to_host(t.data(), p, n);
      return Host(t.begin(), t.end());
    }
    std::vector<ops::bf16> b(size_t(n) + 1);
    be_.to_host(reinterpret_cast<T*>(b.data()), static_cast<const T*>(p.raw()),
                int64_t((size_t(n) + 1) * 2 / sizeof(T)));
    Host h(static_cast<size_t>(n));
    for (size_t i = 0; i < h.size(); ++i) h[i] = double(float(b[i]));
    return h;
  }
  // Where each buffer put() made lies: [start, start + bytes).
  std::vector<std::pair<const char*, size_t>> ranges() const {
    std::vector<std::pair<const char*, size_t>> r;
    for (const auto& b : bufs_)
      r.push_back({static_cast<const char*>(b.data().raw()), b.size() * dtype_size(b.dtype())});
    return r;
  }

 private:
  ops::Backend<T>& be_;
  std::vector<ops::ActBuffer<T>> bufs_;
};

// The storage of each buffer of a row (empty: T's own type for all): inputs,
// outputs, output gradients and input gradients.
struct Storage {
  std::vector<ops::Dtype> in, out, dout, grad;
  static ops::Dtype of(const std::vector<ops::Dtype>& v, size_t k, ops::Dtype native) {
    return k < v.size() ? v[k] : native;
  }
};

// A case's forward (and backward) on one backend.
struct Result {
  std::vector<Host> out, grads;
  std::vector<double> scalars;
};

// dout: output gradients (null: forward only); grad_base: what the gradient
// buffers hold before the backward; storage: the buffers' storage (null: T);
// ranges (optional): where the buffers lay, in the order inputs, outputs,
// output gradients, input gradients (null ones included).
template <typename T>
Result run(const Case<T>& c, ops::Backend<T>& be, const std::vector<Host>& in,
           const std::vector<Host>* dout, double dscalar, const std::vector<Host>* grad_base,
           const Storage* storage = nullptr,
           std::vector<std::pair<const char*, size_t>>* ranges = nullptr) {
  const ops::Dtype nat = ops::Act<T>::kNative;
  const Storage none;
  const Storage& st = storage ? *storage : none;
  Device<T> dev(be);
  Ptrs<T> din, dout_p, dgrad, outs;
  for (size_t k = 0; k < in.size(); ++k) din.push_back(dev.put(in[k], Storage::of(st.in, k, nat)));
  for (size_t k = 0; k < c.out.size(); ++k)
    outs.push_back(dev.put(Host(size_t(c.out[k]), 0.0), Storage::of(st.out, k, nat)));
  Result r;
  r.scalars = c.fwd(be, din, outs);
  for (size_t k = 0; k < outs.size(); ++k) r.out.push_back(dev.get(outs[k], c.out[k]));
  if (dout && c.bwd) {
    for (size_t k = 0; k < dout->size(); ++k)
      dout_p.push_back(dev.put((*dout)[k], Storage::of(st.dout, k, nat)));
    for (size_t k = 0; k < c.in.size(); ++k)
      dgrad.push_back(c.diff[k] ? dev.put((*grad_base)[k], Storage::of(st.grad, k, nat))
                                : ops::Act<T>());
    c.bwd(be, din, outs, dout_p, dscalar, dgrad);
    for (size_t k = 0; k < c.in.size(); ++k)
      r.grads.push_back(c.diff[k] ? dev.get(dgrad[k], c.in[k]) : Host());
  }
  if (ranges) {
    *ranges = dev.ranges();
    // Null gradients take no buffer: put a placeholder where they would be.
    const size_t before = in.size() + c.out.size() + (dout && c.bwd ? dout->size() : 0);
    if (dout && c.bwd)
      for (size_t k = 0; k < c.in.size(); ++k)
        if (!c.diff[k]) ranges->insert(ranges->begin() + long(before + k), {nullptr, 0});
  }
  return r;
}

// A row's inputs: seeded uniform values, then its init.
template <typename T>
std::vector<Host> inputs_of(const Case<T>& c) {
  std::vector<Host> in;
  for (size_t k = 0; k < c.in.size(); ++k) in.push_back(random_host(c.in[k], 11 + k));
  if (c.init) c.init(in);
  return in;
}

// ----------------------------------------------------------------- backends

// A backend that hands every call to another; before each op of ops/ops.def
// it calls hook(op name) and keeps what the hook returns until the op
// returns (a scope: a recording, a capped CPU level). With an args hook it
// also reports each op's pointers, and whether each arrived as an activation
// (ops::Act) or a plain T*, and each copy()'s two sides (as "copy").
struct Call {
  const char* op;
  std::vector<std::pair<const void*, bool>> ptrs;  // (pointer, as an activation); nulls left out
};
template <typename T>
class Wrapped final : public ops::Backend<T> {
 public:
  using Hook = std::function<std::shared_ptr<void>(const char* op)>;
  using ArgsHook = std::function<void(const Call&)>;
  Wrapped(std::unique_ptr<ops::Backend<T>> inner, Hook hook, ArgsHook args = nullptr)
      : inner_(std::move(inner)), hook_(std::move(hook)), args_(std::move(args)) {}

  const char* name() const override { return inner_->name(); }
  T* alloc(size_t n) override { return inner_->alloc(n); }
  void free(T* p) override { inner_->free(p); }
  void zero(ops::Act<T> p, int64_t n) override { inner_->zero(p, n); }
  void copy(ops::Act<T> dst, ops::ActIn<T> src, int64_t n) override {
    if (args_) args_(Call{"copy", {{dst.raw(), true}, {src.raw(), true}}});
    inner_->copy(dst, src, n);
  }
  void to_host(T* dst, const T* src, int64_t n) override { inner_->to_host(dst, src, n); }
  void from_host(T* dst, const T* src, int64_t n) override { inner_->from_host(dst, src, n); }
  bool is_host() const override { return inner_->is_host(); }
  void* stream() const override { return inner_->stream(); }
  void synchronize() override { inner_->synchronize(); }
  double* alloc_scalars(int n) override { return inner_->alloc_scalars(n); }
  void free_scalars(double* p) override { inner_->free_scalars(p); }
  void zero_scalars(double* p, int n) override { inner_->zero_scalars(p, n); }
  int32_t* alloc_ints(size_t n) override { return inner_->alloc_ints(n); }
  void free_ints(int32_t* p) override { inner_->free_ints(p); }
  void ints_from_host(int32_t* dst, const int32_t* src, size_t n) override {
    inner_->ints_from_host(dst, src, n);
  }
  void read_scalars(double* dst, const double* p, int n) override {
    inner_->read_scalars(dst, p, n);
  }
  void set_matmul_precision(ops::MatmulPrecision p) override { inner_->set_matmul_precision(p); }
  bool native_bf16() const override { return inner_->native_bf16(); }
  std::string matmul_path(ops::MatmulPrecision p) const override { return inner_->matmul_path(p); }
  void freeze_weights(bool frozen) override { inner_->freeze_weights(frozen); }

#define STRATA_DEFAULT(...)
#define STRATA_OP(role, name, ret, params, args)       \
  ret name params override {                           \
    const auto scope = hook_ ? hook_(#name) : nullptr; \
    if (args_) report(#name, STRATA_UNPAREN args);     \
    return inner_->name args;                          \
  }
#define STRATA_UNPAREN(...) __VA_ARGS__
#include "ops/ops.def"
#undef STRATA_UNPAREN
#undef STRATA_OP
#undef STRATA_DEFAULT

 private:
  template <typename... P>
  void report(const char* op, const P&... p) {
    Call c{op, {}};
    (one(c, p), ...);
    args_(c);
  }
  static void one(Call& c, const ops::Act<T>& a) {
    if (a) c.ptrs.push_back({a.raw(), true});
  }
  static void one(Call& c, const ops::ActIn<T>& a) {
    if (a) c.ptrs.push_back({a.raw(), true});
  }
  static void one(Call& c, T* p) {
    if (p) c.ptrs.push_back({p, false});
  }
  static void one(Call& c, const T* p) {
    if (p) c.ptrs.push_back({p, false});
  }
  template <typename U>
  static void one(Call&, const U&) {}  // sizes, host arrays, scalars
  std::unique_ptr<ops::Backend<T>> inner_;
  Hook hook_;
  ArgsHook args_;
};

// Which buffers of row c are activations, by running it (forward and
// backward) on the CPU backend under a Wrapped that reports the ops' pointers: a buffer some op
// received as an ops::Act is one, and so is a buffer copied to or from one. Returns the storage
// that puts `dt` on those and T on the rest, whether any buffer is an activation and the ops the
// row calls; throws if an op received a buffer as a plain T* that another received as an
// activation.
struct RowStorage {
  Storage storage;
  bool any = false;
  std::set<std::string> ops;
};
template <typename T>
RowStorage activation_storage(const Case<T>& c, ops::Dtype dt) {
  struct {
    std::vector<std::pair<const void*, bool>> seen;
    std::vector<std::pair<const void*, const void*>> copies;
    std::set<std::string> ops;
  } r;
  Wrapped<T> rec(ops::make_backend<T>("cpu"), nullptr, [&r](const Call& c) {
    if (std::string(c.op) == "copy") return r.copies.push_back({c.ptrs[0].first, c.ptrs[1].first});
    r.ops.insert(c.op);
    r.seen.insert(r.seen.end(), c.ptrs.begin(), c.ptrs.end());
  });
  const std::vector<Host> in = inputs_of(c);
  std::vector<Host> dout, base;
  for (int64_t n : c.out) dout.push_back(Host(size_t(n), 0.5));
  for (int64_t n : c.in) base.push_back(Host(size_t(n), 0.25));
  std::vector<std::pair<const char*, size_t>> ranges;
  run<T>(c, rec, in, &dout, 0.7, &base, nullptr, &ranges);
  auto buffer_of = [&](const void* p) -> int {
    const char* q = static_cast<const char*>(p);
    for (size_t b = 0; b < ranges.size(); ++b)
      if (ranges[b].first && q >= ranges[b].first && q < ranges[b].first + ranges[b].second)
        return int(b);
    return -1;
  };
  std::vector<int> act(ranges.size(), 0), plain(ranges.size(), 0);
  for (const auto& [p, is_act] : r.seen)
    if (const int b = buffer_of(p); b >= 0) (is_act ? act : plain)[size_t(b)] = 1;
  for (bool changed = true; changed;) {  // copies join their two sides
    changed = false;
    for (const auto& [d, s] : r.copies) {
      const int x = buffer_of(d), y = buffer_of(s);
      if (x < 0 || y < 0 || act[size_t(x)] == act[size_t(y)]) continue;
      act[size_t(x)] = act[size_t(y)] = 1;
      changed = true;
    }
  }
  // The gradient of an activation is one, and an activation's gradient
  // belongs to one: outputs pair with their output gradients, inputs with
  // their gradients.
  const size_t ni = c.in.size(), no = c.out.size();
  if (c.bwd)
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < (pass ? ni : no); ++k) {
        const size_t x = pass ? k : ni + k, g = pass ? ni + 2 * no + k : ni + no + k;
        if (ranges[g].first == nullptr) continue;  // no gradient buffer
        act[x] = act[g] = act[x] | act[g];
      }
  RowStorage out;
  out.ops = r.ops;
  Storage& st = out.storage;
  bool& any = out.any;
  std::vector<ops::Dtype>* parts[] = {&st.in, &st.out, &st.dout, &st.grad};
  const size_t sizes[] = {c.in.size(), c.out.size(), c.bwd ? c.out.size() : 0,
                          c.bwd ? c.in.size() : 0};
  size_t b = 0;
  for (int part = 0; part < 4; ++part)
    for (size_t k = 0; k < sizes[part]; ++k, ++b) {
      STRATA_CHECK(!(act[b] && plain[b]), c.name, ": buffer ", b,
                   " is an activation of one op and a plain pointer of another");
      parts[part]->push_back(act[b] ? dt : ops::Act<T>::kNative);
      any = any || act[b];
    }
  return out;
}

// The backends each row runs on (see the top of this file); the variable
// STRATA_TEST_BACKENDS (names, comma-separated) keeps only those it names,
// e.g. "cpu" under an emulator.
inline std::vector<std::string> backends() {
  std::vector<std::string> b = {"cpu"};
  if (testing::cpu_levels().size() > 1) b.push_back("cpu-avx2");
  b.push_back("simt");
  if (ops::resolve_device("auto") == "cuda") b.push_back("cuda");
  if (const char* only = std::getenv("STRATA_TEST_BACKENDS")) {
    const std::string list = std::string(",") + only + ",";
    std::erase_if(
        b, [&](const std::string& n) { return list.find("," + n + ",") == std::string::npos; });
  }
  return b;
}

template <typename T>
std::unique_ptr<ops::Backend<T>> make(const std::string& name) {
  if (name != "cpu-avx2") return ops::make_backend<T>(name);
  return std::make_unique<Wrapped<T>>(ops::make_backend<T>("cpu"), [](const char*) {
    return std::make_shared<testing::ForceCpuLevel>(CpuLevel::Avx2);
  });
}

template <typename T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-11;
}

}  // namespace strata::optable
