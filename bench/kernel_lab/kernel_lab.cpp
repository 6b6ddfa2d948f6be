// The kernel lab: every numbered variant of an op (variants.cuh; variant 1 is
// the production kernel) runs on the same inputs, is checked against the CPU
// backend and timed. Built twice from this one source: strata-kernel-lab runs
// the kernels on the CPU SIMT executor (validation; its times measure the
// executor, not a GPU), strata-kernel-lab-cuda (CUDA builds) on the GPU.
//
//   strata-kernel-lab [--op rmsnorm|column_sums|attention] [--repeat R] [--size small|model|1b]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/kernel_lab/variants.cuh"
#include "ops/backend.h"

namespace {

using strata::cuda::AttnView;
namespace gpu = strata::gpu;
namespace cu = strata::cuda;
namespace lab = strata::lab;

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = float(double(seed >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

struct Dev {
  std::vector<void*> ptrs;
  ~Dev() {
    for (void* p : ptrs) gpu::free_device(p);
  }
  float* put(const std::vector<float>& h) {
    auto* p = static_cast<float*>(gpu::malloc_device(h.size() * sizeof(float)));
    gpu::copy_async(p, h.data(), h.size() * sizeof(float), nullptr);
    ptrs.push_back(p);
    return p;
  }
  float* zeros(size_t n) { return put(std::vector<float>(n, 0.0f)); }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> h(n);
    gpu::copy_async(h.data(), p, n * sizeof(float), nullptr);
    gpu::sync(nullptr);
    return h;
  }
};

double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, err = 0;
  for (float x : b) scale = std::max(scale, double(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::fabs(a[i] - b[i])));
  return err / scale;
}

// Runs fn `repeat` times after one warm-up; median milliseconds.
double time_ms(const std::function<void()>& fn, int repeat) {
  fn();
  gpu::sync(nullptr);
  std::vector<double> t;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    gpu::sync(nullptr);
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int failures = 0;
void report(const char* op, int variant, const char* what, const std::string& shape, double err,
            double ms, double tol) {
  const bool ok = err <= tol;
  failures += !ok;
  std::printf("%-12s v%-2d %-40s %-26s %10.2e %s %10.3f ms\n", op, variant, what, shape.c_str(),
              err, ok ? "ok  " : "FAIL", ms);
}

// The shapes of a run: small (CI, the SIMT executor), model (the 6L-288
// training shapes, 4096 tokens), 1b (Llama-3.2-1B: 2048 wide, 32 query and 8
// key/value heads of 64; 16384 tokens, attention over 8 sequences of 2048).
struct LabSize {
  int64_t rows_norm, rows_sums;  // tokens of the rmsnorm and column-sum runs
  int C;                         // their width
  int B, T, Hq, Hkv, D;          // attention
  double sums_tol;               // longer columns: more fp32 rounding in any order
};
LabSize lab_size(const std::string& name) {
  if (name == "model") return {4096, 4096, 288, 16, 256, 6, 6, 48, 1e-5};
  if (name == "1b") return {16384, 16384, 2048, 8, 2048, 32, 8, 64, 1e-4};
  return {256, 512, 288, 2, 93, 6, 6, 48, 1e-5};
}

void lab_rmsnorm(const LabSize& z, int repeat) {
  const int64_t N = z.rows_norm;
  const int C = z.C;
  const auto x = random_vec(size_t(N) * C, 1), w = random_vec(C, 2);
  std::vector<float> want(x.size()), want_r(static_cast<size_t>(N));
  strata::ops::make_backend<float>("cpu")->rmsnorm_forward(want.data(), want_r.data(), x.data(),
                                                           w.data(), N, C, 1e-5);
  Dev d;
  float *dx = d.put(x), *dw = d.put(w), *out = d.zeros(x.size()), *r = d.zeros(size_t(N));
  const std::string shape = std::to_string(N) + "x" + std::to_string(C);
  const bool packs = cu::rows_in_packs<float>(C, out, dx);
  double ms = time_ms(
      [&] {
        STRATA_LAUNCH(cu::k_rmsnorm<float>, cu::blocks_for(N, 1, 8192),
                      cu::row_threads(packs ? C / cu::kPack<float> : C), 0, nullptr, out, r, dx, dw,
                      N, C, 1e-5f, packs);
      },
      repeat);
  report("rmsnorm", 1, "block per row, 16-byte packs (production)", shape,
         max_rel_err(d.get(out, x.size()), want), ms, 1e-5);
  ms = time_ms(
      [&] {
        STRATA_LAUNCH(cu::k_rmsnorm<float>, cu::blocks_for(N, 1, 8192), 256, 0, nullptr, out, r, dx,
                      dw, N, C, 1e-5f, false);
      },
      repeat);
  report("rmsnorm", 3, "block per row, element by element", shape,
         max_rel_err(d.get(out, x.size()), want), ms, 1e-5);
  ms = time_ms(
      [&] {
        STRATA_LAUNCH(lab::rmsnorm_v2<float>, unsigned((N + 3) / 4), 128, 0, nullptr, out, r, dx,
                      dw, N, C, 1e-5f);
      },
      repeat);
  report("rmsnorm", 2, "warp per row, shuffles only", shape,
         max_rel_err(d.get(out, x.size()), want), ms, 1e-5);
}

void lab_column_sums(const LabSize& z, int repeat) {
  const int64_t N = z.rows_sums;
  const int OC = z.C;
  const auto src = random_vec(size_t(N) * OC, 3);
  std::vector<float> want(OC, 0.0f);
  strata::ops::make_backend<float>("cpu")->bias_add_backward(want.data(), src.data(), N, OC);
  Dev d;
  float *ds = d.put(src), *dst = d.zeros(OC);
  const std::string shape = std::to_string(N) + "x" + std::to_string(OC);
  auto check = [&] {
    // Each timed call added into dst: compare one call's worth.
    gpu::zero_async(dst, OC * sizeof(float), nullptr);
  };
  const int64_t chunk = cu::column_chunk_rows(N);
  const int chunks = int((N + chunk - 1) / chunk);
  float* partial = d.zeros(size_t(chunks) * OC);
  auto v1 = [&] {
    STRATA_LAUNCH(cu::k_column_partials<float>, dim3(cu::blocks_for(OC, 128), unsigned(chunks)),
                  128, 0, nullptr, partial, ds, N, OC, int64_t(OC), chunk);
    STRATA_LAUNCH(cu::k_finish_columns<float>, cu::blocks_for(OC, 128), 128, 0, nullptr, dst,
                  static_cast<const float*>(partial), chunks, OC);
  };
  double ms = time_ms(v1, repeat);
  check();
  v1();
  report("column_sums", 1, "row chunks + partials (production)", shape,
         max_rel_err(d.get(dst, OC), want), ms, z.sums_tol);
  auto v2 = [&] {
    STRATA_LAUNCH(lab::column_sums_v2<float>, cu::blocks_for(OC, 128), 128, 0, nullptr, dst, ds, N,
                  OC);
  };
  ms = time_ms(v2, repeat);
  check();
  v2();
  report("column_sums", 2, "thread per column (old baseline)", shape,
         max_rel_err(d.get(dst, OC), want), ms, z.sums_tol);
}

void lab_attention(const LabSize& z, int repeat) {
  const int B = z.B, T = z.T, Hq = z.Hq, Hkv = z.Hkv, D = z.D;
  const int64_t W = int64_t(Hq + 2 * Hkv) * D;
  const auto qkv = random_vec(size_t(B) * T * W, 4);
  std::vector<float> want(size_t(B) * T * Hq * D), want_l(size_t(B) * Hq * T);
  strata::ops::make_backend<float>("cpu")->attention_forward(want.data(), want_l.data(), qkv.data(),
                                                             B, T, Hq, Hkv, D);
  Dev d;
  float *dq = d.put(qkv), *out = d.zeros(want.size()), *lse = d.zeros(want_l.size());
  AttnView<float> v{dq,
                    dq + int64_t(Hq) * D,
                    dq + int64_t(Hq + Hkv) * D,
                    W,
                    int64_t(T) * W,
                    W,
                    D,
                    B,
                    T,
                    Hq,
                    Hkv,
                    D,
                    0};
  const unsigned blocks = unsigned((int64_t(B) * Hq * T + cu::kAttnWarps - 1) / cu::kAttnWarps);
  const std::string shape = std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(Hq) +
                            "x" + std::to_string(D);
  double ms = time_ms(
      [&] {
        STRATA_LAUNCH(cu::k_attention_forward<float>, blocks, cu::kAttnThreads,
                      cu::kAttnWarps * (D + cu::kWarp) * sizeof(float), nullptr, out, lse, v);
      },
      repeat);
  report("attention", 1, "lanes over 32 keys, shared p (production)", shape,
         max_rel_err(d.get(out, want.size()), want), ms, 2e-5);
  ms = time_ms(
      [&] {
        STRATA_LAUNCH(lab::attention_v2<float>, blocks, cu::kAttnThreads, 0, nullptr, out, lse, v);
      },
      repeat);
  report("attention", 2, "lanes over D, a reduction per key", shape,
         max_rel_err(d.get(out, want.size()), want), ms, 2e-5);
  const size_t smem3 = (2 * cu::kWarp * (D + 1) + cu::kAttnWarps * (D + cu::kWarp)) * sizeof(float);
  gpu::allow_dynamic_shared(lab::attention_v3<float>, smem3);  // past 48 KiB from D = 178
  ms = time_ms(
      [&] {
        STRATA_LAUNCH(lab::attention_v3<float>,
                      dim3(unsigned((T + cu::kAttnWarps - 1) / cu::kAttnWarps), unsigned(B * Hq)),
                      cu::kAttnThreads, smem3, nullptr, out, lse, v);
      },
      repeat);
  report("attention", 3, "v1 with K/V chunks shared by the block", shape,
         max_rel_err(d.get(out, want.size()), want), ms, 2e-5);
}

}  // namespace

int main(int argc, char** argv) {
  std::string op, size = gpu::kSimulated ? "small" : "model";
  int repeat = gpu::kSimulated ? 1 : 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--op" && i + 1 < argc) {
      op = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--size" && i + 1 < argc) {
      size = argv[++i];
    } else {
      std::printf(
          "usage: %s [--op rmsnorm|column_sums|attention] [--repeat R] [--size small|model|1b]\n"
          "Runs every numbered kernel variant, checks it against the CPU backend, times it.\n",
          argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (size != "small" && size != "model" && size != "1b") {
    std::fprintf(stderr, "strata-kernel-lab: --size must be small, model or 1b, got '%s'\n",
                 size.c_str());
    return 2;
  }
  std::printf("kernel lab on %s (%s shapes, median of %d)%s\n",
              gpu::kSimulated ? "the CPU SIMT executor" : "the GPU", size.c_str(), repeat,
              gpu::kSimulated ? ": times measure the executor, not a GPU" : "");
  std::printf("%-12s %-3s %-40s %-26s %10s %-4s %13s\n", "op", "var", "variant", "shape", "max err",
              "", "time");
  const LabSize z = lab_size(size);
  bool any = false;
  if (op.empty() || op == "rmsnorm") any = true, lab_rmsnorm(z, repeat);
  if (op.empty() || op == "column_sums") any = true, lab_column_sums(z, repeat);
  if (op.empty() || op == "attention") any = true, lab_attention(z, repeat);
  if (!any) {
    std::fprintf(stderr, "strata-kernel-lab: unknown --op '%s' (rmsnorm, column_sums, attention)\n",
                 op.c_str());
    return 2;
  }
  return failures ? 1 : 0;
}
