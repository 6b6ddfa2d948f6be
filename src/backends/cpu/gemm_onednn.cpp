// The oneDNN binding under gemm.cpp (gemm_library.h): dnnl_sgemm for fp32,
// bf16 matmul primitives (created once per shape) where the CPU multiplies
// bf16 natively. Compiled in builds with oneDNN: Debian's 2.6 (libdnnl-dev)
// or a 3.x (STRATA_ONEDNN_ROOT, e.g. .deps/onednn3 from
// cmake/fetch_gemm_libraries.sh); the two differ in how a matmul is created
// and scaled (DNNL_VERSION_MAJOR below).
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backends/cpu/gemm_library.h"
#include "core/cpu.h"
#include "core/error.h"

namespace strata::cpu {
namespace {

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
#if DNNL_VERSION_MAJOR >= 3
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl_cpu_isa_avx10_1_512:
      return "avx10_1_512";
    case dnnl_cpu_isa_avx10_1_512_amx_fp16:
      return "avx10_1_512_amx_fp16";
#endif
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "baseline";
  }
}

// What a failed oneDNN call should tell the user: the op, shapes and types,
// the CPU and what oneDNN runs on it, and what to do.
std::string gemm_context(const char* op, bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  return cat(op, " M=", M, " N=", N, " K=", K, ta ? " A^T" : "", tb ? " B^T" : "", " on ",
             cpu_summary(), " (oneDNN kernels for ", isa_name(dnnl_get_effective_cpu_isa()), ")");
}

// bf16 x bf16 -> f32 matmul primitives, one per shape, leading dimensions
// and scaling.
class Bf16Matmul {
 public:
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
           int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    STRATA_CHECK(library::leading_dims_fit(ta, tb, M, N, K, lda, ldb, ldc),
                 "bf16 matmul: a leading dimension is too small for ",
                 gemm_context("bf16 x bf16 -> f32", ta, tb, M, N, K), " (lda=", lda, " ldb=", ldb,
                 " ldc=", ldc, ")");
    std::lock_guard<std::mutex> lock(mutex_);
    const Key key{ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, create(key)).first;
    Entry& e = it->second;
    e.a.set_data_handle(const_cast<uint16_t*>(A));
    e.b.set_data_handle(const_cast<uint16_t*>(B));
    e.c.set_data_handle(C);
    try {
      e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
      stream_.wait();
    } catch (const dnnl::error& err) {
      fail(cat("bf16 matmul: oneDNN failed (", err.what(), ") for ",
               gemm_context("bf16 x bf16 -> f32", ta, tb, M, N, K),
               "; run with training.precision = \"fp32\""));
    }
  }

 private:
  using Key =
      std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory a, b, c;
  };
  Entry create(const Key& k) {
    const auto [ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = k;
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a_md({M, K}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
    const dnnl::memory::desc b_md({K, N}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c_md({M, N}, dt::f32, dims{ldc, 1});
    // C = alpha A B + beta C: oneDNN 2 scales the output; oneDNN 3 has no
    // output scales, so alpha is a linear post-op applied before the sum.
    dnnl::primitive_attr attr;
    dnnl::post_ops ops;
#if DNNL_VERSION_MAJOR >= 3
    if (alpha != 1.0f) ops.append_eltwise(dnnl::algorithm::eltwise_linear, alpha, 0.0f);
#else
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
#endif
    if (beta != 0.0f) ops.append_sum(beta);
    if (ops.len() > 0) attr.set_post_ops(ops);
    try {
#if DNNL_VERSION_MAJOR >= 3
      const dnnl::matmul::primitive_desc pd(engine_, a_md, b_md, c_md, attr);
#else
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine_);
#endif
      return Entry{dnnl::matmul(pd), dnnl::memory(a_md, engine_, nullptr),
                   dnnl::memory(b_md, engine_, nullptr), dnnl::memory(c_md, engine_, nullptr)};
    } catch (const dnnl::error& e) {
      fail(cat("bf16 matmul: oneDNN cannot create it (", e.what(), ") for ",
               gemm_context("bf16 x bf16 -> f32", ta, tb, M, N, K),
               "; run with training.precision = \"fp32\" or \"auto\", or report this with "
               "`strata info`"));
    }
  }
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, Entry> cache_;
  std::mutex mutex_;
};

}  // namespace

namespace library {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(st == dnnl_success, "fp32 matmul: oneDNN sgemm failed (status ", int(st), ") for ",
               gemm_context("f32", ta, tb, M, N, K), " (lda=", lda, " ldb=", ldb, " ldc=", ldc,
               "); report this with `strata info`");
}

// oneDNN runs its bf16 kernels (DNNL_MAX_CPU_ISA may hold them back) and
// creates a bf16 matmul. The PyPI oneDNN 3 is a SYCL build: its CPU engine
// needs a SYCL CPU device (an OpenCL CPU runtime), so without one only its
// engine-free dnnl_sgemm runs and bf16 is emulated.
bool native_bf16() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) return false;
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc a({16, 16}, dt::bf16, tag::ab), c({16, 16}, dt::f32, tag::ab);
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc(engine, a, a, c);
#else
    dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine);
#endif
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

void bf16_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                 int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  static Bf16Matmul matmul;
  matmul.run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string name() {
  const dnnl_version_t* v = dnnl_version();
  return cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

std::string describe(Path p) {
  const char* isa = isa_name(dnnl_get_effective_cpu_isa());
  if (p == Path::FP32) return cat("oneDNN sgemm, kernels for ", isa);
  if (p == Path::BF16Native) return cat("native: oneDNN bf16 matmul, kernels for ", isa);
  return cat("emulated (no AVX512-BF16 or AMX-BF16): operands rounded to bf16, oneDNN sgemm (", isa,
             "); same numerics, fp32 speed");
}

}  // namespace library
}  // namespace strata::cpu
