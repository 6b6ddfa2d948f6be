#include "backends/cpu/gemm.h"

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cpu/workspace.h"
#include "core/error.h"

namespace strata::cpu {
namespace {

MatmulPrecision g_precision = MatmulPrecision::FP32;

// bf16 x bf16 -> f32 matmul primitives for compact (ld = row length) operands.
class Bf16Matmul {
 public:
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
           const uint16_t* B, float beta, float* C, int64_t ldc) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Key key{ta, tb, M, N, K, ldc, alpha, beta};
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, create(key)).first;
    Entry& e = it->second;
    e.a.set_data_handle(const_cast<uint16_t*>(A));
    e.b.set_data_handle(const_cast<uint16_t*>(B));
    e.c.set_data_handle(C);
    e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
    stream_.wait();
  }

 private:
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory a, b, c;
  };
  Entry create(const Key& k) {
    const auto [ta, tb, M, N, K, ldc, alpha, beta] = k;
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a_md({M, K}, dt::bf16, ta ? dims{1, M} : dims{K, 1});
    const dnnl::memory::desc b_md({K, N}, dt::bf16, tb ? dims{1, K} : dims{N, 1});
    const dnnl::memory::desc c_md({M, N}, dt::f32, dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine_);
    return Entry{dnnl::matmul(pd), dnnl::memory(a_md, engine_, nullptr),
                 dnnl::memory(b_md, engine_, nullptr), dnnl::memory(c_md, engine_, nullptr)};
  }
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, Entry> cache_;
  std::mutex mutex_;
};

// Copies the rows x cols block of a row-major matrix with leading dimension
// ld into a compact bf16 matrix.
void pack_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) float_to_bf16_serial(dst + r * cols, src + r * ld, cols);
}

}  // namespace

void set_matmul_precision(MatmulPrecision p) { g_precision = p; }
MatmulPrecision matmul_precision() { return g_precision; }

float bf16_to_float(uint16_t x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void float_to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 4096)
    float_to_bf16_serial(dst + i, src + i, std::min<int64_t>(4096, n - i));
}

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (g_precision == MatmulPrecision::BF16 && K > 0) {
    struct Tag {};
    static Bf16Matmul matmul;
    // op(A) is M x K: stored as M x K (ta false) or K x M (ta true); same for B.
    uint16_t* a = workspace<uint16_t, 0, Tag>(size_t(M * K));
    uint16_t* b = workspace<uint16_t, 1, Tag>(size_t(K * N));
    pack_bf16(a, A, ta ? K : M, ta ? M : K, lda);
    pack_bf16(b, B, tb ? N : K, tb ? K : N, ldb);
    matmul.run(ta, tb, M, N, K, alpha, a, b, beta, C, ldc);
    return;
  }
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(st == dnnl_success, "oneDNN sgemm failed (status ", int(st), ") for M=", M, " N=", N,
               " K=", K);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      const double a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
      if (tb) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}

}  // namespace strata::cpu
