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

template <typename T>
using Ptrs = std::vector<T*>;

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
  ops::Backend<T>& be_;
  std::vector<ops::DeviceBuffer<T>> bufs_;
};

// A case's forward (and backward) on one backend.
struct Result {
  std::vector<Host> out, grads;
  std::vector<double> scalars;
};

// dout: output gradients (null: forward only); grad_base: what the gradient
// buffers hold before the backward.
template <typename T>
Result run(const Case<T>& c, ops::Backend<T>& be, const std::vector<Host>& in,
           const std::vector<Host>* dout, double dscalar, const std::vector<Host>* grad_base) {
  Device<T> dev(be);
  Ptrs<T> din, dout_p, dgrad, outs;
  for (const Host& h : in) din.push_back(dev.put(h));
  for (int64_t n : c.out) outs.push_back(dev.put(Host(size_t(n), 0.0)));
  Result r;
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
// returns (a scope: a recording, a capped CPU level).
template <typename T>
class Wrapped final : public ops::Backend<T> {
 public:
  using Hook = std::function<std::shared_ptr<void>(const char* op)>;
  Wrapped(std::unique_ptr<ops::Backend<T>> inner, Hook hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}

  const char* name() const override { return inner_->name(); }
  T* alloc(size_t n) override { return inner_->alloc(n); }
  void free(T* p) override { inner_->free(p); }
  void zero(T* p, int64_t n) override { inner_->zero(p, n); }
  void copy(T* dst, const T* src, int64_t n) override { inner_->copy(dst, src, n); }
  void to_host(T* dst, const T* src, int64_t n) override { inner_->to_host(dst, src, n); }
  void from_host(T* dst, const T* src, int64_t n) override { inner_->from_host(dst, src, n); }
  bool is_host() const override { return inner_->is_host(); }
  void* stream() const override { return inner_->stream(); }
  void synchronize() override { inner_->synchronize(); }
  double* alloc_scalars(int n) override { return inner_->alloc_scalars(n); }
  void free_scalars(double* p) override { inner_->free_scalars(p); }
  void zero_scalars(double* p, int n) override { inner_->zero_scalars(p, n); }
  void read_scalars(double* dst, const double* p, int n) override {
    inner_->read_scalars(dst, p, n);
  }
  void set_matmul_precision(ops::MatmulPrecision p) override { inner_->set_matmul_precision(p); }
  bool native_bf16() const override { return inner_->native_bf16(); }
  std::string matmul_path(ops::MatmulPrecision p) const override { return inner_->matmul_path(p); }
  void freeze_weights(bool frozen) override { inner_->freeze_weights(frozen); }

#define STRATA_DEFAULT(...)
#define STRATA_OP(role, name, ret, params, args) \
  ret name params override {                     \
    const auto scope = hook_(#name);             \
    return inner_->name args;                    \
  }
#include "ops/ops.def"
#undef STRATA_OP
#undef STRATA_DEFAULT

 private:
  std::unique_ptr<ops::Backend<T>> inner_;
  Hook hook_;
};

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
