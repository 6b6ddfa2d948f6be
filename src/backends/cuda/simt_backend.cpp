// The "simt" backend: KernelBackend compiled with the host compiler, so every
// CUDA kernel runs on the CPU SIMT executor; the CPU GEMM library stands in
// for cuBLASLt. Memory is host memory, but the backend reports is_host() =
// false, so the model, trainer and generation take their device paths.
#include "backends/cuda/kernel_backend.h"

#include <map>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cuda/backends.h"
#include "backends/cuda/kernels/gemm.cuh"

namespace strata::cuda {
namespace {

// cuBLASLt's stand-in. BF16 rounds the operands with the SIMT kernel
// k_round_bf16 (the CUDA path's bf16 conversion rule) and multiplies in fp32:
// bf16 products are exact in fp32, so this is the numerics of a bf16 GEMM
// with fp32 accumulation. The operands the CUDA engine keeps from cuBLASLt
// (lt_gemm_ok, gemm_engine.h) run here as there: on strata's tiled GEMM
// kernel, through the SIMT executor.
template <typename T>
class CpuGemm final : public GemmEngine<T> {
 public:
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, ops::ActIn<T> A,
            int64_t lda, ops::ActIn<T> B, int64_t ldb, T beta, ops::Act<T> C,
            int64_t ldc) override {
    if (M == 0 || N == 0) return;
    const bool bf16 = std::is_same_v<T, float> && precision_ == ops::MatmulPrecision::BF16;
    // The CUDA engine's rule on the operands as stored (bf16 ones too), then
    // bf16 activations widened: the CPU GEMM reads fp32 (the numbers of a
    // bf16 cuBLASLt GEMM with a bf16 C: fp32 accumulation, rounded once).
    const bool lt = K == 0 || lt_gemm_ok(A.raw(), lda, B.raw(), ldb, C.raw(), ldc,
                                         bf16 ? 2 : sizeof(T), ops::dtype_size(C.dtype()));
    if (A.is_bf16() || B.is_bf16() || C.is_bf16()) {
      auto scratch = [&](int slot, int64_t n) { return grown(f32_[slot], n); };
      // (A bf16 operand is bf16 already: as cuBLASLt, no conversion.)
      const Exact exact{A.is_bf16(), B.is_bf16()};
      return gemm_on_fp32_copies<T>(nullptr, scratch, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc,
                                    [&](const T* a, const T* b, T* c) {
                                      run(lt, exact, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta,
                                          c, ldc);
                                    });
    }
    run(lt, Exact{}, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void set_precision(ops::MatmulPrecision p) override { precision_ = p; }
  ops::MatmulPrecision precision() const override { return precision_; }
  bool native_bf16() const override { return false; }
  std::string path(ops::MatmulPrecision p) const override {
    return std::string(p == ops::MatmulPrecision::FP32
                           ? "SIMT executor; GEMMs on the CPU GEMM library (cuBLASLt stand-in)"
                           : "SIMT executor; operands rounded to bf16 by k_round_bf16, fp32 CPU "
                             "GEMM") +
           "; strata's tiled GEMM kernel where cuBLASLt would not be given the operands";
  }

 private:
  // Operands that hold bf16 values already (widened bf16 activations).
  struct Exact {
    bool a = false, b = false;
  };
  // `lt`: cuBLASLt would be given these operands (else the tiled kernel).
  void run(bool lt, Exact exact, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
           const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    const bool bf16 = std::is_same_v<T, float> && precision_ == ops::MatmulPrecision::BF16;
    if (!lt) {
      this->note_fallback();
      gemm_tiled<T>(nullptr, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (precision_ == ops::MatmulPrecision::BF16) {
        if (!exact.a) A = operand(0, A, ta ? K : M, ta ? M : K, lda);
        if (!exact.b) B = operand(1, B, tb ? N : K, tb ? K : N, ldb);
      }
    }
    // The product is a command on the stream: recorded while a graph is
    // captured (the rounding launches above are recorded too).
    const auto product = [=] {
      ::strata::simt::DeviceAccess access;  // the stand-in reads device memory on the host
      const ops::MatmulPrecision saved = cpu::matmul_precision();
      if (saved != ops::MatmulPrecision::FP32)
        cpu::set_matmul_precision(ops::MatmulPrecision::FP32);
      {
        gpu::LaunchTimer timer("gemm (the CPU GEMM standing in for cuBLASLt)", nullptr);
        cpu::gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      }
      if (saved != ops::MatmulPrecision::FP32) cpu::set_matmul_precision(saved);
    };
    if (!::strata::simt::record("gemm (the CPU GEMM standing in for cuBLASLt)", product)) product();
  }
  // v with room for n values; a move of its storage is a move of the
  // engine's memory (GemmEngine::memory_epoch).
  float* grown(std::vector<float>& v, int64_t n) {
    const float* before = v.data();
    v.resize(size_t(n));
    if (v.data() != before) this->note_memory_moved();
    return v.data();
  }
  const float* rounded(int slot, const float* src, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = rows > 0 ? (rows - 1) * ld + cols : 0;
    if (this->converted_already(src, n, slot)) return buf_[slot].data();  // pinned (gemm_engine.h)
    float* buf = grown(buf_[slot], n);
    if (n) STRATA_LAUNCH(k_round_bf16<float>, blocks_for(n, 256), 256, 0, nullptr, buf, src, n);
    return buf;
  }
  // Operand `slot` (0: A, 1: B) rounded to bf16: a kept copy for frozen or
  // held weights (GemmEngine::freeze, hold), else into the slot's buffer.
  const float* operand(int slot, const float* src, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = rows > 0 ? (rows - 1) * ld + cols : 0;
    return this->keeps_copy(src, n, slot == 1) ? frozen_rounded(src, rows, cols, ld)
                                               : rounded(slot, src, rows, cols, ld);
  }
  // A frozen or held weight's bf16 copy, made on first use.
  const float* frozen_rounded(const float* src, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = rows > 0 ? (rows - 1) * ld + cols : 0;
    std::vector<float>& copy = frozen_copies_[{src, rows, cols, ld}];
    if (copy.empty() && n) {
      this->note_conversion();
      this->note_memory_moved();
      copy.resize(size_t(n));
      STRATA_LAUNCH(k_round_bf16<float>, blocks_for(n, 256), 256, 0, nullptr, copy.data(), src, n);
    }
    return copy.data();
  }
  void release_frozen() override {
    this->note_memory_moved();
    frozen_copies_.clear();
  }

  ops::MatmulPrecision precision_ = ops::MatmulPrecision::FP32;
  std::map<typename GemmEngine<T>::FrozenKey, std::vector<float>> frozen_copies_;
  std::vector<float> buf_[3];  // A, B, the pinned operand
  std::vector<float> f32_[3];  // fp32 copies of bf16 A, B, C
};

}  // namespace

template <typename T>
std::unique_ptr<ops::Backend<T>> make_simt_backend() {
  auto be = std::make_unique<KernelBackend<T>>("simt", nullptr, std::make_unique<CpuGemm<T>>());
  be->set_external_attention(nullptr,
                             "device simt runs strata's kernels only (cuDNN's attention "
                             "needs device cuda)");
  return be;
}

template std::unique_ptr<ops::Backend<float>> make_simt_backend<float>();
template std::unique_ptr<ops::Backend<double>> make_simt_backend<double>();

}  // namespace strata::cuda
