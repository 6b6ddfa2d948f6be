// The "cuda" backend: KernelBackend compiled by nvcc, on its own stream, with
// GEMMs on cuBLASLt (fp32, or bf16 operands with fp32 accumulation; double
// for completeness), and on strata's tiled GEMM kernel for the operands
// gemm_engine.h's rule keeps from cuBLASLt or shapes it has no algorithm for.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "backends/cuda/backends.h"
#include "backends/cuda/cudnn_attention.h"
#include "backends/cuda/kernel_backend.h"
#include "backends/cuda/kernels/gemm.cuh"
#include "core/log.h"

namespace strata::cuda {
namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(cat("cuBLASLt: ", what, " failed: ", cublasLtGetStatusString(s)));
}

// Largest power of two (<= 16) dividing the address: cuBLASLt picks kernels
// by operand alignment, and views into larger matrices may be less aligned.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t r = 16;
  while (r > 1 && a % r) r /= 2;
  return r;
}

template <typename T>
class LtGemm final : public GemmEngine<T> {
 public:
  explicit LtGemm(cudaStream_t s) : stream_(s) {
    check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
    workspace_ = gpu::malloc_device(kWorkspace);
    int dev = 0, major = 0;
    gpu::check(cudaGetDevice(&dev), "cudaGetDevice");
    gpu::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
               "cudaDeviceGetAttribute");
    native_bf16_ = major >= 8;
  }
  ~LtGemm() override {
    cudaStreamSynchronize(stream_);
    for (auto& e : plans_) destroy(e.second);
    gpu::free_device(workspace_);
    for (void* b : bf16_) gpu::free_device(b);
    for (void* b : f32_) gpu::free_device(b);
    for (auto& e : frozen_copies_) gpu::free_device(e.second);
    cublasLtDestroy(handle_);
  }

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, ops::ActIn<T> A,
            int64_t lda, ops::ActIn<T> B, int64_t ldb, T beta, ops::Act<T> C,
            int64_t ldc) override {
    if (M == 0 || N == 0) return;
    const bool bf16 = std::is_same_v<T, float> && precision_ == ops::MatmulPrecision::BF16;
    const size_t c_bytes = ops::dtype_size(C.dtype());
    const bool lt = K > 0 && lt_gemm_ok(A.raw(), lda, B.raw(), ldb, C.raw(), ldc,
                                        bf16 ? 2 : sizeof(T), c_bytes);
    // bf16 activations go to cuBLASLt as they are with bf16 precision; every
    // other path reads fp32 (gemm_engine.h).
    const bool any_bf16 = A.is_bf16() || B.is_bf16() || C.is_bf16();
    auto scratch = [&](int slot, int64_t n) { return f32(slot, n); };
    if (any_bf16 && !(bf16 && lt)) {
      return gemm_on_fp32_copies<T>(stream_, scratch, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc,
                                    [&](const T* a, const T* b, T* c) {
                                      gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
                                    });
    }
    if (K == 0) {
      STRATA_LAUNCH(k_scale_matrix<T>, blocks_for(M * N, 256), 256, 0, stream_, static_cast<T*>(C),
                    M, N, ldc, beta);
      return;
    }
    if (!lt) return fallback(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
    const void* a = A.raw();
    const void* b = B.raw();
    if constexpr (std::is_same_v<T, float>) {
      if (bf16 && !A.is_bf16()) a = operand(0, A, (ta ? K : M), (ta ? M : K), lda);
      if (bf16 && !B.is_bf16()) b = operand(1, B, (tb ? N : K), (tb ? K : N), ldb);
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's
    // first operand is B, its second A.
    const Key key{ta,
                  tb,
                  M,
                  N,
                  K,
                  lda,
                  ldb,
                  ldc,
                  bf16,
                  alignment(a),
                  alignment(b),
                  alignment(C.raw()),
                  C.is_bf16()};
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make_plan(key)).first;
    const Plan& p = it->second;
    if (!p.found) {
      if (any_bf16)  // (strata's tiled kernel is fp32)
        return gemm_on_fp32_copies<T>(stream_, scratch, ta, tb, M, N, K, A, lda, B, ldb, beta, C,
                                      ldc, [&](const T* a32, const T* b32, T* c32) {
                                        fallback(ta, tb, M, N, K, alpha, a32, lda, b32, ldb, beta,
                                                 c32, ldc, bf16);
                                      });
      return fallback(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
    }
    gpu::LaunchTimer timer(bf16 ? "gemm (cuBLASLt, bf16 operands)" : "gemm (cuBLASLt)", stream_);
    check_lt(cublasLtMatmul(handle_, p.desc, &alpha, b, p.first, a, p.second, &beta, C.raw(), p.out,
                            C.raw(), p.out, &p.algo, workspace_, kWorkspace, stream_),
             "cublasLtMatmul");
  }
  void set_precision(ops::MatmulPrecision p) override { precision_ = p; }
  ops::MatmulPrecision precision() const override { return precision_; }
  bool native_bf16() const override { return native_bf16_ && std::is_same_v<T, float>; }
  std::string path(ops::MatmulPrecision p) const override {
    return std::string(p == ops::MatmulPrecision::FP32
                           ? "cuBLASLt fp32 (CUBLAS_COMPUTE_32F, no TF32)"
                           : "cuBLASLt bf16 operands, fp32 accumulation and output") +
           "; strata's tiled GEMM where cuBLASLt is not given the operands or has no algorithm";
  }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  // (..., bf16 operands, alignments of A, B, C, bf16 C)
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                         uint32_t, uint32_t, uint32_t, bool>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;  // false: the heuristic had no algorithm (the fallback runs)
  };

  // strata's tiled GEMM (kernels/gemm.cuh) for what cuBLASLt is not given or
  // cannot do; it reads the original operands (bf16: rounds them itself).
  void fallback(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                const T* B, int64_t ldb, T beta, T* C, int64_t ldc, bool bf16) {
    this->note_fallback();
    gemm_tiled<T>(stream_, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
  }

  Plan make_plan(const Key& k) {
    const auto [ta, tb, M, N, K, lda, ldb, ldc, bf16, al_a, al_b, al_c, c_bf16] = k;
    constexpr bool dbl = std::is_same_v<T, double>;
    const cudaDataType_t scale_t = dbl ? CUDA_R_64F : CUDA_R_32F;
    const cudaDataType_t in_t = bf16 ? CUDA_R_16BF : scale_t;
    // A bf16 C (and D): the fp32 accumulator, alpha and beta * C rounded to
    // bf16 by cuBLASLt's epilogue.
    const cudaDataType_t out_t = c_bf16 ? CUDA_R_16BF : scale_t;
    Plan p;
    check_lt(
        cublasLtMatmulDescCreate(&p.desc, dbl ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, scale_t),
        "cublasLtMatmulDescCreate");
    const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                            sizeof(op_first)),
             "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                            sizeof(op_second)),
             "set TRANSB");
    // Column-major shapes: B is (tb ? K x N : N x K), A is (ta ? M x K : K x M).
    check_lt(
        cublasLtMatrixLayoutCreate(&p.first, in_t, uint64_t(tb ? K : N), uint64_t(tb ? N : K), ldb),
        "layout B");
    check_lt(cublasLtMatrixLayoutCreate(&p.second, in_t, uint64_t(ta ? M : K), uint64_t(ta ? K : M),
                                        lda),
             "layout A");
    check_lt(cublasLtMatrixLayoutCreate(&p.out, out_t, uint64_t(N), uint64_t(M), ldc), "layout C");
    cublasLtMatmulPreference_t pref;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = kWorkspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_b,
                                         sizeof(al_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_a,
                                         sizeof(al_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                         sizeof(al_c));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                         sizeof(al_c));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.first, p.second, p.out, p.out, pref,
                                            1, &result, &found),
             "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm: the plan says so and the fallback runs this shape (a GEMM
    // is never the reason a run stops).
    p.found = found > 0;
    if (p.found) {
      p.algo = result.algo;
    } else {
      log::warn("cuBLASLt has no algorithm for a ", M, "x", N, "x", K, " GEMM (",
                bf16 ? "bf16" : (dbl ? "fp64" : "fp32"), ", ld ", lda, "/", ldb, "/", ldc,
                "): strata's tiled GEMM runs it");
    }
    return p;
  }
  static void destroy(Plan& p) {
    cublasLtMatrixLayoutDestroy(p.first);
    cublasLtMatrixLayoutDestroy(p.second);
    cublasLtMatrixLayoutDestroy(p.out);
    cublasLtMatmulDescDestroy(p.desc);
  }
  // A rows x cols operand (leading dimension ld) as bf16 with the same ld.
  // The two staging buffers stay on CUDA's stream-ordered allocator rather
  // than the backend's DevicePool: they only grow (after the first step of a
  // shape nothing is allocated), cudaFreeAsync neither synchronises nor
  // waits for other streams, and the engine stays usable without a backend.
  const void* to_bf16(int slot, const T* src, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = (rows - 1) * ld + cols;
    if (this->converted_already(src, n, slot)) return bf16_[slot];  // pinned (gemm_engine.h)
    if (bf16_n_[slot] < n) {
      this->note_memory_moved();
      gpu::free_async(bf16_[slot], stream_);
      bf16_[slot] = gpu::malloc_async(size_t(n) * 2, stream_);
      bf16_n_[slot] = n;
    }
    STRATA_LAUNCH(k_to_bf16<float>, blocks_for(n, 256), 256, 0, stream_,
                  static_cast<uint16_t*>(bf16_[slot]), reinterpret_cast<const float*>(src), n);
    return bf16_[slot];
  }

  // Operand `slot` (0: A, 1: B) as bf16: a kept copy for frozen or held
  // weights (GemmEngine::freeze, hold), else converted into the slot's buffer.
  const void* operand(int slot, const T* src, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t n = (rows - 1) * ld + cols;
    return this->keeps_copy(src, n, slot == 1) ? frozen_bf16(src, rows, cols, ld)
                                               : to_bf16(slot, src, rows, cols, ld);
  }
  // A frozen or held weight's bf16 copy, made on first use in a block of its
  // own (the backend's stream orders its use after the copy).
  const void* frozen_bf16(const T* src, int64_t rows, int64_t cols, int64_t ld) {
    void*& copy = frozen_copies_[{src, rows, cols, ld}];
    if (!copy) {
      const int64_t n = (rows - 1) * ld + cols;
      this->note_conversion();
      this->note_memory_moved();
      copy = gpu::malloc_async(size_t(n) * 2, stream_);
      STRATA_LAUNCH(k_to_bf16<float>, blocks_for(n, 256), 256, 0, stream_,
                    static_cast<uint16_t*>(copy), reinterpret_cast<const float*>(src), n);
    }
    return copy;
  }
  void release_frozen() override {
    this->note_memory_moved();
    for (auto& e : frozen_copies_) gpu::free_async(e.second, stream_);
    frozen_copies_.clear();
  }

  // n floats of fp32 staging slot `slot` (gemm_on_fp32_copies), grown like
  // the bf16 slots.
  float* f32(int slot, int64_t n) {
    if (f32_n_[slot] < n) {
      this->note_memory_moved();
      gpu::free_async(f32_[slot], stream_);
      f32_[slot] = gpu::malloc_async(size_t(n) * sizeof(float), stream_);
      f32_n_[slot] = n;
    }
    return static_cast<float*>(f32_[slot]);
  }

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* f32_[3] = {nullptr, nullptr, nullptr};  // A, B, C
  int64_t f32_n_[3] = {0, 0, 0};
  void* workspace_ = nullptr;
  void* bf16_[3] = {nullptr, nullptr, nullptr};  // A, B, the pinned operand
  int64_t bf16_n_[3] = {0, 0, 0};
  bool native_bf16_ = false;
  ops::MatmulPrecision precision_ = ops::MatmulPrecision::FP32;
  std::map<Key, Plan> plans_;
  std::map<typename GemmEngine<T>::FrozenKey, void*> frozen_copies_;
};

}  // namespace

template <typename T>
std::unique_ptr<ops::Backend<T>> make_cuda_backend(int device) {
  if (device >= 0) gpu::check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  gpu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::shared_ptr<void> owner(static_cast<void*>(s),
                              [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  auto be = std::make_unique<KernelBackend<T>>("cuda", s, std::make_unique<LtGemm<T>>(s),
                                               std::move(owner));
  if constexpr (!std::is_same_v<T, float>) {
    be->set_external_attention(nullptr, "cuDNN's attention runs float models only");
  } else {
#if defined(STRATA_HAVE_CUDNN)
    be->set_external_attention(make_cudnn_attention(), "");
#else
    be->set_external_attention(nullptr,
                               "this build has no cuDNN attention (cuDNN 9 or the cuDNN frontend "
                               "headers were not found when it was configured: docs/gpu.md)");
#endif
  }
  return be;
}

template std::unique_ptr<ops::Backend<float>> make_cuda_backend<float>(int);
template std::unique_ptr<ops::Backend<double>> make_cuda_backend<double>(int);

}  // namespace strata::cuda
