// CPU feature detection and the start-up check (see cpu.h). Compiled for the
// x86-64 baseline; the check uses only C library calls, so nothing compiled
// for a newer instruction set runs before it.
#include "core/cpu.h"

#include <cpuid.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef STRATA_BUILD_ISA
#define STRATA_BUILD_ISA ""
#endif
#ifndef STRATA_BUILD_ARCH
#define STRATA_BUILD_ARCH "unknown"
#endif

namespace strata {
namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

void detect(CpuFeatures& f) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  const unsigned max_leaf = a;
  std::memcpy(f.vendor, &b, 4);
  std::memcpy(f.vendor + 4, &d, 4);
  std::memcpy(f.vendor + 8, &c, 4);
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
  f.family = int(base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family);
  f.model_id = int(base_family == 0x6 || base_family == 0xF ? base_model + (((a >> 16) & 0xF) << 4)
                                                            : base_model);
  const bool osxsave = bit(c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;          // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;     // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  f.sse4_2 = bit(c, 20);
  f.popcnt = bit(c, 23);
  f.movbe = bit(c, 22);
  f.avx = bit(c, 28) && os_avx;
  f.fma = bit(c, 12) && os_avx;
  f.f16c = bit(c, 29) && os_avx;
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    f.bmi1 = bit(b, 3);
    f.bmi2 = bit(b, 8);
    f.avx2 = bit(b, 5) && os_avx;
    f.avx512f = bit(b, 16) && os_avx512;
    f.avx512dq = bit(b, 17) && os_avx512;
    f.avx512cd = bit(b, 28) && os_avx512;
    f.avx512bw = bit(b, 30) && os_avx512;
    f.avx512vl = bit(b, 31) && os_avx512;
    f.avx512_vnni = bit(c, 11) && os_avx512;
    f.amx_bf16 = bit(d, 22) && os_amx;
    f.amx_tile = bit(d, 24) && os_amx;
    f.amx_int8 = bit(d, 25) && os_amx;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (a >= 1) __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    f.avx512_bf16 = bit(a1, 5) && os_avx512;
  }
  __get_cpuid(0x80000000, &a, &b, &c, &d);
  if (a >= 0x80000001) {
    unsigned a2 = 0, b2 = 0, c2 = 0, d2 = 0;
    __get_cpuid(0x80000001, &a2, &b2, &c2, &d2);
    f.lzcnt = bit(c2, 5);
  }
  if (a >= 0x80000004) {
    unsigned regs[12];
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2],
                  &regs[4 * i + 3]);
    char brand[49] = {};
    std::memcpy(brand, regs, 48);
    const char* s = brand;
    while (*s == ' ') ++s;  // some CPUs pad the brand string on the left
    std::snprintf(f.model, sizeof f.model, "%s", s);
    for (int i = int(std::strlen(f.model)) - 1; i >= 0 && f.model[i] == ' '; --i) f.model[i] = 0;
  }
  if (!f.model[0]) std::snprintf(f.model, sizeof f.model, "unknown x86-64 CPU");
}

CpuFeatures detect_once() {
  CpuFeatures f;
  detect(f);
  return f;
}

// Features this build's code was compiled to use (from -march at configure
// time; see CMakeLists.txt): a space-separated list of CpuFeatures names.
constexpr const char* kBuildIsa = STRATA_BUILD_ISA;

// Runs before every other constructor of the program (shared libraries'
// constructors run earlier, but they are built for the baseline): a CPU that
// lacks an instruction set the build uses gets one line instead of SIGILL.
__attribute__((constructor(101))) void check_cpu_can_run_this_build() {
  const CpuFeatures& f = cpu_features();
  char missing[256] = {};
  const char* p = kBuildIsa;
  while (*p) {
    while (*p == ' ') ++p;
    const char* end = p;
    while (*end && *end != ' ') ++end;
    if (end == p) break;
    char name[32] = {};
    const size_t n = size_t(end - p) < sizeof name - 1 ? size_t(end - p) : sizeof name - 1;
    std::memcpy(name, p, n);
    if (!f.has(name) && std::strlen(missing) + n + 2 < sizeof missing) {
      if (missing[0]) std::strcat(missing, " ");
      std::strcat(missing, name);
    }
    p = end;
  }
  if (!missing[0]) return;
  char line[768];
  std::snprintf(line, sizeof line,
                "strata: error: this build (-march=%s) needs instruction sets the CPU (%s) lacks: "
                "%s; rebuild strata for it (cmake -DSTRATA_ARCH=native, or x86-64-v2)\n",
                STRATA_BUILD_ARCH, f.model, missing);
  (void)!write(2, line, std::strlen(line));
  _exit(1);
}

std::atomic<int> g_max_level{-1};  // -1: not set (environment or CPU decide)

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect_once();
  return f;
}

bool CpuFeatures::x86_64_v3() const {
  return avx && avx2 && fma && f16c && bmi1 && bmi2 && lzcnt && movbe;
}

bool CpuFeatures::x86_64_v4() const {
  return x86_64_v3() && avx512f && avx512bw && avx512dq && avx512vl && avx512cd;
}

bool CpuFeatures::has(const char* name) const {
  struct Entry {
    const char* name;
    bool value;
  };
  const Entry table[] = {
      {"sse4_2", sse4_2},
      {"popcnt", popcnt},
      {"avx", avx},
      {"avx2", avx2},
      {"fma", fma},
      {"f16c", f16c},
      {"bmi1", bmi1},
      {"bmi2", bmi2},
      {"lzcnt", lzcnt},
      {"movbe", movbe},
      {"avx512f", avx512f},
      {"avx512bw", avx512bw},
      {"avx512dq", avx512dq},
      {"avx512vl", avx512vl},
      {"avx512cd", avx512cd},
      {"avx512_vnni", avx512_vnni},
      {"avx512_bf16", avx512_bf16},
      {"amx_tile", amx_tile},
      {"amx_bf16", amx_bf16},
      {"amx_int8", amx_int8},
  };
  for (const Entry& e : table)
    if (!std::strcmp(e.name, name)) return e.value;
  return false;
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string s = std::string(f.model) + " (" + f.vendor + " family " + std::to_string(f.family) +
                  " model " + std::to_string(f.model_id) + ");";
  for (const char* name : {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"})
    if (f.has(name)) s += std::string(" ") + name;
  if (!f.avx2) s += " no avx2";
  return s;
}

bool build_has_avx512_kernels() {
#if defined(STRATA_AVX512_VARIANT) || defined(STRATA_NATIVE_AVX512)
  return true;
#else
  return false;
#endif
}

bool build_chooses_kernels() {
#ifdef STRATA_AVX512_VARIANT
  return true;
#else
  return false;
#endif
}

std::string kernel_summary() {
  if (!build_chooses_kernels()) return std::string("built for -march=") + STRATA_BUILD_ARCH;
  const CpuLevel level = cpu_level();
  std::string s = cpu_level_name(level);
  if (level == CpuLevel::Avx512)
    s += " (chosen at run time; STRATA_MAX_CPU_ISA=avx2 caps it)";
  else if (cpu_features().x86_64_v4())
    s += " (capped by STRATA_MAX_CPU_ISA)";
  else
    s += " (no AVX-512 on this CPU)";
  return s;
}

const char* build_arch() { return STRATA_BUILD_ARCH; }
const char* build_isa() { return kBuildIsa; }

const char* cpu_level_name(CpuLevel level) { return level == CpuLevel::Avx512 ? "avx512" : "avx2"; }

void set_max_cpu_level(CpuLevel level) { g_max_level.store(int(level)); }

CpuLevel cpu_level() {
  int cap = g_max_level.load();
  if (cap < 0) {
    static const int env_cap = [] {
      const char* v = std::getenv("STRATA_MAX_CPU_ISA");
      if (v && (!std::strcmp(v, "avx2") || !std::strcmp(v, "AVX2"))) return int(CpuLevel::Avx2);
      return int(CpuLevel::Avx512);
    }();
    cap = env_cap;
  }
  const bool avx512 = build_has_avx512_kernels() && cpu_features().x86_64_v4();
  return avx512 && cap >= int(CpuLevel::Avx512) ? CpuLevel::Avx512 : CpuLevel::Avx2;
}

}  // namespace strata
