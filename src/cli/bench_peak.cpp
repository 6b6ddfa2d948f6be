// `strata bench peak`: the machine's own limits, measured: the fp32 FMA peak
// (register-only loops of independent fused multiply-adds, AVX2 and AVX-512),
// the bf16 peak where the CPU has a native bf16 dot product (AVX512-BF16's
// vdpbf16ps, AMX's tdpbf16ps) and the DRAM read bandwidth (vector loads over a
// buffer far larger than the last-level cache). The other benchmarks divide
// their rates by these figures ("% of peak", "% of the bandwidth bound").
//
// The loops run on every OpenMP thread at once, so the figures are those of
// the sustained all-core clock, the one a training step runs at.
#include <immintrin.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "core/threads.h"
#include "core/timer.h"

namespace strata::cli {
namespace {

// Each loop keeps independent accumulators in flight to cover the FMA latency
// (4-5 cycles) on two pipes: 12 for AVX2, whose 16 ymm registers must also
// hold the two operands (16 accumulators spill and run at a third of the
// rate), 16 for AVX-512's 32 zmm registers. The inputs are ordinary numbers
// (not zeros or denormals) so that no shortcut applies.
constexpr int kAccYmm = 12, kAcc = 16;

// Runs `body(iterations)` on every thread until `seconds` have passed (in
// chunks), and returns the best chunk's total FLOP rate in GFLOP/s.
template <typename Body>
double all_threads_rate(double flops_per_iteration, double seconds, Body body) {
  const int64_t chunk = 1 << 20;
  double best = 0;
  Timer total;
  do {
    double elapsed = 0;
    const int nt = num_threads();
#pragma omp parallel num_threads(nt)
    {
#pragma omp barrier
      Timer t;
      body(chunk);
#pragma omp barrier
#pragma omp master
      elapsed = t.seconds();
    }
    best = std::max(best, flops_per_iteration * double(chunk) * nt / elapsed * 1e-9);
  } while (total.seconds() < seconds);
  return best;
}

// GCC 12 warns about _mm512_undefined_ps inside the AVX-512 set1 intrinsics
// when they are compiled through a target attribute; the value is defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

float sink_value = 0;  // keeps the accumulators alive
#pragma omp threadprivate(sink_value)

void fma_ymm(int64_t n) {
  __m256 acc[kAccYmm];
  for (int i = 0; i < kAccYmm; ++i)
    acc[i] = _mm256_set1_ps(0.001f * float(i + omp_get_thread_num()));
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-4f);
  for (int64_t it = 0; it < n; ++it)
    for (int i = 0; i < kAccYmm; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < kAccYmm; ++i) s = _mm256_add_ps(s, acc[i]);
  sink_value += _mm_cvtss_f32(_mm256_castps256_ps128(s));
}

__attribute__((target("avx512f"))) void fma_zmm(int64_t n) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(0.001f * float(i + omp_get_thread_num()));
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-4f);
  for (int64_t it = 0; it < n; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  sink_value += _mm512_reduce_add_ps(s);
}

// vdpbf16ps: 32 bf16 products summed pairwise into 16 fp32 lanes, 64 FLOPs.
__attribute__((target("avx512f,avx512bf16"))) void dot_bf16_zmm(int64_t n) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(0.001f * float(i + omp_get_thread_num()));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  for (int64_t it = 0; it < n; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  sink_value += _mm512_reduce_add_ps(s);
}

// AMX: Linux hands out the tile data state only on request, per process.
bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// tdpbf16ps on 16x16 fp32 accumulator tiles from 16x32 bf16 tiles:
// 16 * 16 * 32 * 2 = 16384 FLOPs per instruction; four accumulators
// (tmm0-3) fed by two A tiles (tmm4-5) and two B tiles (tmm6-7).
__attribute__((target("amx-tile,amx-bf16"))) void dot_bf16_amx(int64_t n) {
  alignas(64) uint8_t config[64] = {};
  config[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    const uint16_t colsb = 64;
    std::memcpy(config + 16 + 2 * t, &colsb, 2);
    config[48 + t] = 16;  // rows
  }
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3f00;  // 0.5 in bf16
    b[i] = 0x3a83;  // ~1e-3
  }
  _tile_loadconfig(config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (int64_t it = 0; it < n; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  _tile_release();
  sink_value += c[0];
}

// Sums every float of [p, p + n) with 256-bit loads (8 independent sums).
float read_sum(const float* p, int64_t n) {
  __m256 s[8];
  for (auto& v : s) v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 8; ++k) s[k] = _mm256_add_ps(s[k], _mm256_loadu_ps(p + i + 8 * k));
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  __m256 t = s[0];
  for (int k = 1; k < 8; ++k) t = _mm256_add_ps(t, s[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, t);
  for (float v : lanes) tail += v;
  return tail;
}

int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

}  // namespace

double settled_peak(double first, double rate, const std::function<double()>& again) {
  if (rate <= first) return first;
  return std::max(first, again());
}

FmaPeak measure_fma_peak(double seconds) {
  const auto& cpu = cpu_features();
  FmaPeak p;
  p.fp32_ymm = all_threads_rate(2.0 * 8 * kAccYmm, seconds, fma_ymm);
  p.fp32 = p.fp32_ymm;
  p.fp32_path = "AVX2 FMA (ymm)";
  if (cpu.avx512f) {
    p.fp32_zmm = all_threads_rate(2.0 * 16 * kAcc, seconds, fma_zmm);
    if (p.fp32_zmm > p.fp32) {
      p.fp32 = p.fp32_zmm;
      p.fp32_path = "AVX-512 FMA (zmm)";
    }
  }
  if (cpu.avx512_bf16) {
    p.bf16 = all_threads_rate(64.0 * kAcc, seconds, dot_bf16_zmm);
    p.bf16_path = "AVX512-BF16 vdpbf16ps (zmm)";
  }
  if (cpu.amx_bf16) {
    bool permitted = true;
#pragma omp parallel num_threads(num_threads())
    {
      if (!amx_permitted()) {
#pragma omp atomic write
        permitted = false;
      }
    }
    if (permitted) {
      // One chunk runs n / 16 iterations of four tdpbf16ps (each about 16
      // cycles), so a chunk stays in the millisecond range like the others.
      const double rate =
          all_threads_rate(4 * 16384.0 / 16, seconds, [](int64_t n) { dot_bf16_amx(n / 16); });
      if (rate > p.bf16) {
        p.bf16 = rate;
        p.bf16_path = "AMX tdpbf16ps";
      }
    } else {
      p.bf16_path += p.bf16_path.empty() ? "AMX not granted by the kernel (arch_prctl)"
                                         : "; AMX not granted by the kernel (arch_prctl)";
    }
  }
  return p;
}

BandwidthPeak measure_read_bandwidth(int64_t bytes, int passes) {
  BandwidthPeak b;
  b.llc_bytes = last_level_cache_bytes();
  bytes = std::max<int64_t>(bytes, 8 * b.llc_bytes);
  const int64_t n = bytes / int64_t(sizeof(float));
  // Uninitialised: each thread's pages are first touched by that thread below.
  const std::unique_ptr<float[]> buf(new float[size_t(n)]);
  const int nt = num_threads();
  float* p = buf.get();
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) p[i] = float(i & 7);  // each thread touches its own share
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    Timer t;
    float total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      const int me = omp_get_thread_num(), k = omp_get_num_threads();
      const int64_t lo = n * me / k, hi = n * (me + 1) / k;
      total += read_sum(p + lo, hi - lo);
    }
    const double s = t.seconds();
    sink_value += total;
    best = std::max(best, double(n) * sizeof(float) / s * 1e-9);
  }
  b.bytes = n * int64_t(sizeof(float));
  b.read_gbs = best;
  return b;
}

double peak_rss_mib() { return double(peak_rss_bytes()) / double(1 << 20); }

int bench_peak(int argc, char** argv, int first) {
  Args args("strata bench peak",
            "Measures this machine's limits on all threads: the fp32 FMA peak (AVX2 and "
            "AVX-512 register-only loops), the bf16 peak where the CPU has a native bf16 dot "
            "product (AVX512-BF16, AMX), and the DRAM read bandwidth. The last line is "
            "machine-readable.");
  args.option("seconds", "S", "time per FMA loop (the best chunk counts)", "0.5")
      .option("buffer", "MIB", "bandwidth buffer in MiB (at least 8x the last-level cache)", "1024")
      .option("passes", "N", "bandwidth passes (the best counts)", "5");
  add_threads_option(args);
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
  STRATA_USAGE_CHECK(args.get_double("seconds") > 0 && args.get_double("seconds") <= 60,
                     "strata bench peak: --seconds must be in (0, 60], got ", args.get("seconds"));
  STRATA_USAGE_CHECK(args.get_int("buffer") >= 1 && args.get_int("passes") >= 1,
                     "strata bench peak: --buffer and --passes must be at least 1");
  print_bench_machine();
  const int nt = num_threads();
  const FmaPeak f = measure_fma_peak(args.get_double("seconds"));
  std::printf("fp32 FMA peak, %d threads: %.1f GFLOP/s (%.1f per thread) with %s\n", nt, f.fp32,
              f.fp32 / nt, f.fp32_path.c_str());
  std::printf("  AVX2 (ymm): %.1f GFLOP/s", f.fp32_ymm);
  if (f.fp32_zmm > 0) std::printf("; AVX-512 (zmm): %.1f GFLOP/s", f.fp32_zmm);
  std::printf("\n");
  if (f.bf16 > 0)
    std::printf("bf16 peak, %d threads: %.1f GFLOP/s (%.2fx fp32) with %s\n", nt, f.bf16,
                f.bf16 / f.fp32, f.bf16_path.c_str());
  else
    std::printf("bf16 peak: none native (no AVX512-BF16 or AMX-BF16%s%s)\n",
                f.bf16_path.empty() ? "" : "; ", f.bf16_path.c_str());
  const BandwidthPeak b =
      measure_read_bandwidth(int64_t(args.get_int("buffer")) << 20, args.get_int("passes"));
  std::printf(
      "DRAM read bandwidth, %d threads: %.1f GB/s (%.0f MiB buffer, last-level cache %.0f MiB)\n",
      nt, b.read_gbs, double(b.bytes) / (1 << 20), double(b.llc_bytes) / (1 << 20));
  std::printf("result: fp32_gflops=%.1f bf16_gflops=%.1f read_gbs=%.2f threads=%d\n", f.fp32,
              f.bf16, b.read_gbs, nt);
  return 0;
}

}  // namespace strata::cli
