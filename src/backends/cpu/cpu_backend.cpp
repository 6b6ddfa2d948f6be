// The CPU implementation of ops::Backend: forwards each call to the kernel of
// the same name in backends/cpu/<op>.cpp.
#include <algorithm>
#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "core/arena.h"
#include "core/error.h"
#include "ops/backend.h"

namespace strata::ops {
namespace {

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  const char* name() const override { return "cpu"; }

  T* alloc(size_t n) override { return static_cast<T*>(aligned_alloc_zeroed(n * sizeof(T))); }
  void free(T* p) override { aligned_free(p); }
  // Small copies and fills run on the calling thread: an OpenMP region costs
  // microseconds, and decoding copies each head's key and value row (a few
  // hundred floats) into the KV cache, hundreds of times per token.
  static constexpr int64_t kSerialBelow = 1 << 16;
  void zero(T* p, int64_t n) override {
    if (n < kSerialBelow) {
      std::memset(p, 0, sizeof(T) * size_t(n));
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += 4096)
      std::memset(p + i, 0, sizeof(T) * size_t(std::min<int64_t>(4096, n - i)));
  }
  void copy(T* dst, const T* src, int64_t n) override {
    if (n < kSerialBelow) {
      std::memcpy(dst, src, sizeof(T) * size_t(n));
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += 4096)
      std::memcpy(dst + i, src + i, sizeof(T) * size_t(std::min<int64_t>(4096, n - i)));
  }
  void to_host(T* dst, const T* src, int64_t n) override { copy(dst, src, n); }
  void from_host(T* dst, const T* src, int64_t n) override { copy(dst, src, n); }
  bool is_host() const override { return true; }
  void* stream() const override { return nullptr; }
  void synchronize() override {}  // every call has finished when it returns
  double* alloc_scalars(int n) override {
    return static_cast<double*>(aligned_alloc_zeroed(size_t(n) * sizeof(double)));
  }
  void free_scalars(double* p) override { aligned_free(p); }
  void zero_scalars(double* p, int n) override { std::fill(p, p + n, 0.0); }
  void read_scalars(double* dst, const double* p, int n) override { std::copy(p, p + n, dst); }

  void set_matmul_precision(MatmulPrecision p) override { cpu::set_matmul_precision(p); }
  bool native_bf16() const override { return cpu::native_bf16_available(); }
  std::string matmul_path(MatmulPrecision p) const override { return cpu::matmul_path(p); }
  void freeze_weights(bool frozen) override { cpu::set_frozen_weights(frozen); }

  void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C, int V,
                         int64_t v0, int V_local) override {
    cpu::embedding_forward(out, tokens, wte, N, C, V, v0, V_local);
  }
  void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C,
                          int64_t v0, int V_local) override {
    cpu::embedding_backward(dwte, tokens, dout, N, C, v0, V_local);
  }
  void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C,
                       double eps) override {
    cpu::rmsnorm_forward(out, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                        int64_t N, int C) override {
    cpu::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  }
  void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC, int OC,
                      const LinearLd& ld) override {
    cpu::linear_forward(out, x, w, bias, N, IC, OC, ld);
  }
  void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N,
                       int IC, int OC, bool accumulate_dx, const LinearLd& ld) override {
    cpu::linear_backward(dx, dw, dbias, dout, x, w, N, IC, OC, accumulate_dx, ld);
  }
  void bias_add_forward(T* out, const T* bias, int64_t N, int OC, int64_t ld) override {
    cpu::bias_add_forward(out, bias, N, OC, ld);
  }
  void bias_add_backward(T* dbias, const T* dout, int64_t N, int OC, int64_t ld) override {
    cpu::bias_add_backward(dbias, dout, N, OC, ld);
  }
  void axpby_forward(T* out, const T* x, const T* y, int64_t n, double a, double b) override {
    cpu::axpby_forward(out, x, y, n, a, b);
  }
  void axpby_backward(T* dx, T* dy, const T* dout, int64_t n, double a, double b) override {
    cpu::axpby_backward(dx, dy, dout, n, a, b);
  }
  void rope_table(T* cos, T* sin, int max_pos, int D, const double* inv_freq) override {
    cpu::rope_table(cos, sin, max_pos, D, inv_freq);
  }
  void rope_forward(T* x, const T* cos, const T* sin, int B, int T_, int H, int D,
                    int64_t row_stride, int pos0) override {
    cpu::rope_forward(x, cos, sin, B, T_, H, D, row_stride, pos0);
  }
  void rope_backward(T* dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                     int64_t row_stride, int pos0) override {
    cpu::rope_backward(dx, cos, sin, B, T_, H, D, row_stride, pos0);
  }
  void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv,
                         int D) override {
    cpu::attention_forward(out, lse, qkv, B, T_, Hq, Hkv, D);
  }
  void attention_cached_forward(T* out, const T* q, int64_t q_stride, const T* kc, const T* vc,
                                int n, int pos0, int Hq, int Hkv, int D, int max_len) override {
    cpu::attention_cached_forward(out, q, q_stride, kc, vc, n, pos0, Hq, Hkv, D, max_len);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                          int T_, int Hq, int Hkv, int D) override {
    cpu::attention_backward(dqkv, dout, qkv, out, lse, B, T_, Hq, Hkv, D);
  }
  void swiglu_forward(T* h, const T* gateup, int64_t N, int F) override {
    cpu::swiglu_forward(h, gateup, N, F);
  }
  void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) override {
    cpu::swiglu_backward(dgateup, dh, gateup, N, F);
  }
  void residual_forward(T* out, const T* a, const T* b, int64_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void residual_backward(T* da, T* db, const T* dout, int64_t n) override {
    cpu::residual_backward(da, db, dout, n);
  }
  double head_ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, const T* x,
                         const T* wn, const T* wout, const int32_t* targets, int64_t N, int C,
                         int V, double eps, const VocabShard<T>* shard) override {
    return cpu::head_ce_forward(xn, rstd, lse, token_nll, n_valid, x, wn, wout, targets, N, C, V,
                                eps, shard);
  }
  void head_ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd,
                        const T* lse, const T* wn, const T* wout, const int32_t* targets, int64_t N,
                        int C, int V, double dloss, const VocabShard<T>* shard) override {
    cpu::head_ce_backward(dx, dwn, dwout, x, xn, rstd, lse, wn, wout, targets, N, C, V, dloss,
                          shard);
  }
  double head_ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd, int64_t* n_valid,
                                  const T* x, const T* wn, const T* wout, const int32_t* targets,
                                  int64_t N, int C, int V, double eps, double dloss,
                                  const VocabShard<T>* shard) override {
    return cpu::head_ce_forward_backward(dx, dwn, dwout, xn, rstd, n_valid, x, wn, wout, targets, N,
                                         C, V, eps, dloss, shard);
  }
  void head_logits(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout, int64_t N,
                   int C, int V, double eps) override {
    cpu::head_logits(logits, xn_scratch, x, wn, wout, N, C, V, eps);
  }
  double mse_forward(const T* a, const T* b, int64_t n) override {
    return cpu::mse_forward(a, b, n);
  }
  void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss) override {
    cpu::mse_backward(da, db, a, b, n, dloss);
  }
  void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& s) override {
    cpu::adamw_update(p, g, m, v, n, s);
  }
  void sum_squares(double* acc, const T* x, int64_t n) override { *acc += cpu::sum_squares(x, n); }
  void scale_inplace(T* x, int64_t n, double s) override { cpu::scale_inplace(x, n, s); }
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend() {
  return std::make_unique<CpuBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_cpu_backend<float>();
template std::unique_ptr<Backend<double>> make_cpu_backend<double>();

}  // namespace strata::ops
