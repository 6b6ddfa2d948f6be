// Compares CPU GEMM libraries on strata's training-shaped GEMMs, to justify the
// choice of GEMM library (docs/performance.md, "GEMM library"). Each library is loaded with
// dlopen so they can sit in one binary without symbol clashes; libraries that
// are not installed are reported and skipped.
//
//   ./build/bench/gemm_libraries [--tokens N] [--repeat R]
//
// Libraries: oneDNN dnnl_sgemm (what strata uses), oneDNN's matmul primitive,
// and the cblas_sgemm of OpenBLAS (pthread build) and BLIS (OpenMP build), as
// Debian ships them, with no environment variables set.
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
    it = cache
             .emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(a_md, b_md, c_md), eng)))
             .first;
  dnnl::memory am(a_md, eng, const_cast<float*>(a)), bm(b_md, eng, const_cast<float*>(b)),
      cm(c_md, eng, c);
  it->second.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
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
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc)
      tokens = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gemm_libraries [--tokens N] [--repeat R]\n");
      return 2;
    }
  }

  struct Lib {
    std::string name;
    std::function<void(const Shape&, const float*, const float*, float*)> run;
  };
  std::vector<Lib> libs;
  libs.push_back({"onednn-sgemm", [](const Shape& s, const float* a, const float* b, float* c) {
                    strata::cpu::gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a, s.ta ? s.M : s.K,
                                             b, s.tb ? s.K : s.N, 0.0f, c, s.N);
                  }});
  libs.push_back({"onednn-matmul", [](const Shape& s, const float* a, const float* b, float* c) {
                    matmul_primitive(s, a, b, c);
                  }});
  const char* candidates[][2] = {{"openblas-pthread", "libopenblas.so.0"},
                                 {"blis-openmp", "libblis.so.4"}};
  for (auto& cand : candidates) {
    void* h = dlopen(cand[1], RTLD_NOW | RTLD_LOCAL);
    auto fn = h ? reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm")) : nullptr;
    if (!fn) {
      std::printf("# %s: not installed (%s), skipped\n", cand[0], cand[1]);
      continue;
    }
    libs.push_back({cand[0], [fn](const Shape& s, const float* a, const float* b, float* c) {
                      fn(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.M),
                         int(s.N), int(s.K), 1.0f, a, int(s.ta ? s.M : s.K), b,
                         int(s.tb ? s.K : s.N), 0.0f, c, int(s.N));
                    }});
  }

  struct Model {
    const char* name;
    int64_t c, f, v;
  };
  const Model models[] = {{"6L-288 (F=768, V=32000)", 288, 768, 32000},
                          {"12L-768 (F=2048, V=32000)", 768, 2048, 32000}};
  std::printf("# cpu: %s\n", strata::cpu_summary().c_str());
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
    std::printf("\n%s\n%-12s", m.name, "shape");
    for (auto& l : libs) std::printf(" %16s", l.name.c_str());
    std::printf("\n");
    std::vector<double> total_t(libs.size(), 0.0);
    double total_flop = 0;
    for (auto& s : shapes) {
      const double flop = 2.0 * s.M * s.N * s.K;
      total_flop += flop;
      std::printf("%-12s", s.name);
      for (size_t li = 0; li < libs.size(); ++li) {
        const double t = time_it([&] { libs[li].run(s, a.data(), b.data(), c.data()); }, repeat);
        total_t[li] += t;
        std::printf(" %16.1f", flop / t * 1e-9);
      }
      std::printf("\n");
    }
    std::printf("%-12s", "all");
    for (size_t li = 0; li < libs.size(); ++li)
      std::printf(" %16.1f", total_flop / total_t[li] * 1e-9);
    std::printf("\n");
  }
  return 0;
}
