// Compares CPU GEMM libraries on strata's training-shaped GEMMs, to justify the
// choice of GEMM library (docs/performance.md, "GEMM library"). Each library
// but the build's own is loaded with dlopen so they can sit in one binary
// without symbol clashes; libraries that are not installed are reported and
// skipped.
//
//   ./build/bench/gemm_libraries [--tokens N] [--repeat R] [--precision fp32|bf16|both]
//
// Libraries, fp32: the build's binding (gemm.h: Debian's oneDNN 2.6 dnnl_sgemm
// by default), oneDNN 2.6's matmul primitive, oneDNN 3.x's dnnl_sgemm and
// oneMKL's cblas_sgemm (both from PyPI into .deps/ by
// cmake/fetch_gemm_libraries.sh), and the cblas_sgemm of OpenBLAS (pthread
// build) and BLIS (OpenMP build) where Debian's are installed; bf16 operands
// with fp32 results: the build's bf16 path (native or emulated, gemm.h) and
// oneMKL's cblas_gemm_bf16bf16f32. No environment variables are set.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_library.h"
#include "core/cpu.h"
#include "core/timer.h"

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
};

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
using CblasGemmBf16 = void (*)(int, int, int, int, int, int, float, const uint16_t*, int,
                               const uint16_t*, int, float, float*, int);
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

std::vector<Shape> training_shapes(int64_t n, int64_t c, int64_t f, int64_t v, int64_t chunk) {
  const int64_t qkv = 3 * c;
  return {
      {"qkv fwd", false, true, n, qkv, c},      {"o fwd", false, true, n, c, c},
      {"gateup fwd", false, true, n, 2 * f, c}, {"down fwd", false, true, n, c, f},
      {"head fwd", false, true, chunk, v, c},   {"qkv dx", false, false, n, c, qkv},
      {"o dx", false, false, n, c, c},          {"gateup dx", false, false, n, c, 2 * f},
      {"down dx", false, false, n, f, c},       {"head dx", false, false, chunk, c, v},
      {"qkv dW", true, false, qkv, c, n},       {"o dW", true, false, c, c, n},
      {"gateup dW", true, false, 2 * f, c, n},  {"down dW", true, false, c, f, n},
      {"head dW", true, false, v, c, chunk},
  };
}

// oneDNN's matmul primitive, created once per shape (creation costs 0.3-2 ms).
void matmul_primitive(const Shape& s, const float* a, const float* b, float* c) {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  static dnnl::stream stream(eng);
  static std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t>, dnnl::matmul> cache;
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md({s.M, s.K}, dnnl::memory::data_type::f32,
                                s.ta ? dims{1, s.M} : dims{s.K, 1});
  const dnnl::memory::desc b_md({s.K, s.N}, dnnl::memory::data_type::f32,
                                s.tb ? dims{1, s.K} : dims{s.N, 1});
  const dnnl::memory::desc c_md({s.M, s.N}, dnnl::memory::data_type::f32, dims{s.N, 1});
  auto key = std::make_tuple(s.ta, s.tb, s.M, s.N, s.K);
  auto it = cache.find(key);
  if (it == cache.end())
#if DNNL_VERSION_MAJOR >= 3
    it =
        cache.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(eng, a_md, b_md, c_md))).first;
#else
    it = cache
             .emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(a_md, b_md, c_md), eng)))
             .first;
#endif
  dnnl::memory am(a_md, eng, const_cast<float*>(a)), bm(b_md, eng, const_cast<float*>(b)),
      cm(c_md, eng, c);
  it->second.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

// dlopen with a message on failure; deps are loaded first, globally, so
// the library finds them by soname without LD_LIBRARY_PATH; lazily, since
// oneMKL's layers refer to each other.
void* open_library(const std::string& dir, const std::vector<std::string>& deps,
                   const std::string& lib, int flags) {
  for (auto& d : deps)
    if (!dlopen((dir + "/" + d).c_str(), RTLD_LAZY | RTLD_GLOBAL)) return nullptr;
  return dlopen((dir + "/" + lib).c_str(), RTLD_LAZY | flags);
}

double time_it(const std::function<void()>& fn, int repeat) {
  fn();  // warm-up (and primitive creation)
  std::vector<double> t;
  for (int r = 0; r < repeat; ++r) {
    strata::Timer timer;
    fn();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 4096;
  int repeat = 5;
  std::string precision = "both";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc)
      tokens = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc)
      precision = argv[++i];
    else {
      std::fprintf(
          stderr, "usage: gemm_libraries [--tokens N] [--repeat R] [--precision fp32|bf16|both]\n");
      return 2;
    }
  }
  if (precision != "fp32" && precision != "bf16" && precision != "both") {
    std::fprintf(stderr, "gemm_libraries: --precision must be fp32, bf16 or both\n");
    return 2;
  }
  const std::string deps = STRATA_SOURCE_DIR "/.deps";

  struct Lib {
    std::string name;
    std::function<void(const Shape&, const float*, const float*, float*)> run;
    std::function<void(const Shape&, const uint16_t*, const uint16_t*, float*)> run_bf16;
  };
  std::vector<Lib> libs;
  libs.push_back(
      {"strata-binding",
       [](const Shape& s, const float* a, const float* b, float* c) {
         strata::cpu::set_matmul_precision(strata::cpu::MatmulPrecision::FP32);
         strata::cpu::gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a, s.ta ? s.M : s.K, b,
                                  s.tb ? s.K : s.N, 0.0f, c, s.N);
       },
       [](const Shape& s, const uint16_t* a, const uint16_t* b, float* c) {
         if (strata::cpu::bf16_path() == strata::cpu::Bf16Path::Native) {
           strata::cpu::library::bf16_matmul(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a, s.ta ? s.M : s.K,
                                             b, s.tb ? s.K : s.N, 0.0f, c, s.N);
           return;
         }
         // Emulated: what gemm.h does, widening both operands, then fp32.
         static std::vector<float> fa, fb;
         fa.resize(size_t(s.M * s.K));
         fb.resize(size_t(s.K * s.N));
#pragma omp parallel for
         for (size_t i = 0; i < fa.size(); ++i) fa[i] = strata::cpu::bf16_to_float(a[i]);
#pragma omp parallel for
         for (size_t i = 0; i < fb.size(); ++i) fb[i] = strata::cpu::bf16_to_float(b[i]);
         strata::cpu::library::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, fa.data(), s.ta ? s.M : s.K,
                                     fb.data(), s.tb ? s.K : s.N, 0.0f, c, s.N);
       }});
  libs.push_back({"onednn2-matmul",
                  [](const Shape& s, const float* a, const float* b, float* c) {
                    matmul_primitive(s, a, b, c);
                  },
                  nullptr});
  if (void* h =
          open_library(deps + "/onednn3/lib",
                       {"libtbb.so.12", "libintlc.so.5", "libimf.so", "libsvml.so", "libsycl.so.9"},
                       "libdnnl.so.3", RTLD_LOCAL | RTLD_DEEPBIND)) {
    auto fn = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
    libs.push_back({"onednn3-sgemm",
                    [fn](const Shape& s, const float* a, const float* b, float* c) {
                      fn(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, a,
                         s.ta ? s.M : s.K, b, s.tb ? s.K : s.N, 0.0f, c, s.N);
                    },
                    nullptr});
  } else {
    std::printf("# onednn3: not in %s/onednn3 (cmake/fetch_gemm_libraries.sh onednn3), skipped\n",
                deps.c_str());
  }
  if (void* h = open_library(deps + "/mkl/lib", {"libmkl_core.so.3", "libmkl_gnu_thread.so.3"},
                             "libmkl_intel_lp64.so.3", RTLD_LOCAL)) {
    auto fn = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
    auto fn16 = reinterpret_cast<CblasGemmBf16>(dlsym(h, "cblas_gemm_bf16bf16f32"));
    libs.push_back({"mkl-sgemm",
                    [fn](const Shape& s, const float* a, const float* b, float* c) {
                      fn(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.M),
                         int(s.N), int(s.K), 1.0f, a, int(s.ta ? s.M : s.K), b,
                         int(s.tb ? s.K : s.N), 0.0f, c, int(s.N));
                    },
                    [fn16](const Shape& s, const uint16_t* a, const uint16_t* b, float* c) {
                      fn16(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.M),
                           int(s.N), int(s.K), 1.0f, a, int(s.ta ? s.M : s.K), b,
                           int(s.tb ? s.K : s.N), 0.0f, c, int(s.N));
                    }});
  } else {
    std::printf("# mkl: not in %s/mkl (cmake/fetch_gemm_libraries.sh mkl), skipped: %s\n",
                deps.c_str(), dlerror());
  }
  const char* candidates[][2] = {{"openblas-pthread", "libopenblas.so.0"},
                                 {"blis-openmp", "libblis.so.4"}};
  for (auto& cand : candidates) {
    void* h = dlopen(cand[1], RTLD_NOW | RTLD_LOCAL);
    auto fn = h ? reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm")) : nullptr;
    if (!fn) {
      std::printf("# %s: not installed (%s), skipped\n", cand[0], cand[1]);
      continue;
    }
    libs.push_back({cand[0],
                    [fn](const Shape& s, const float* a, const float* b, float* c) {
                      fn(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.M),
                         int(s.N), int(s.K), 1.0f, a, int(s.ta ? s.M : s.K), b,
                         int(s.tb ? s.K : s.N), 0.0f, c, int(s.N));
                    },
                    nullptr});
  }

  struct Model {
    const char* name;
    int64_t c, f, v;
  };
  const Model models[] = {{"6L-288 (F=768, V=32000)", 288, 768, 32000},
                          {"12L-768 (F=2048, V=32000)", 768, 2048, 32000}};
  std::printf("# cpu: %s\n# binding: %s; bf16 %s\n", strata::cpu_summary().c_str(),
              strata::cpu::gemm_library().c_str(),
              strata::cpu::matmul_path(strata::cpu::MatmulPrecision::BF16).c_str());
  std::printf("threads=%d tokens=%ld repeat=%d (GFLOP/s, median)\n", omp_get_max_threads(),
              long(tokens), repeat);
  for (const Model& m : models) {
    auto shapes = training_shapes(tokens, m.c, m.f, m.v, 512);
    size_t maxa = 0, maxb = 0, maxc = 0;
    for (auto& s : shapes) {
      maxa = std::max(maxa, size_t(s.M * s.K));
      maxb = std::max(maxb, size_t(s.K * s.N));
      maxc = std::max(maxc, size_t(s.M * s.N));
    }
    std::vector<float> a(maxa), b(maxb), c(maxc);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7919) % 13) / 13.0f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 104729) % 17) / 17.0f - 0.5f;
    std::vector<uint16_t> a16(maxa), b16(maxb);
    for (size_t i = 0; i < a.size(); ++i) a16[i] = strata::cpu::bf16_bits(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = strata::cpu::bf16_bits(b[i]);
    for (const char* prec : {"fp32", "bf16"}) {
      if (precision != "both" && precision != prec) continue;
      const bool bf16 = !std::strcmp(prec, "bf16");
      std::vector<const Lib*> run;
      for (auto& l : libs)
        if (bf16 ? bool(l.run_bf16) : bool(l.run)) run.push_back(&l);
      std::printf("\n%s, %s%s\n%-12s", m.name, prec, bf16 ? " operands, fp32 results" : "",
                  "shape");
      for (auto* l : run) std::printf(" %16s", l->name.c_str());
      std::printf("\n");
      std::vector<double> total_t(run.size(), 0.0);
      double total_flop = 0;
      for (auto& s : shapes) {
        const double flop = 2.0 * s.M * s.N * s.K;
        total_flop += flop;
        std::printf("%-12s", s.name);
        for (size_t li = 0; li < run.size(); ++li) {
          const double t = time_it(
              [&] {
                if (bf16)
                  run[li]->run_bf16(s, a16.data(), b16.data(), c.data());
                else
                  run[li]->run(s, a.data(), b.data(), c.data());
              },
              repeat);
          total_t[li] += t;
          std::printf(" %16.1f", flop / t * 1e-9);
        }
        std::printf("\n");
      }
      std::printf("%-12s", "all");
      for (size_t li = 0; li < run.size(); ++li)
        std::printf(" %16.1f", total_flop / total_t[li] * 1e-9);
      std::printf("\n");
    }
  }
  return 0;
}
