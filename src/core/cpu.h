// What the CPU can run, read with CPUID and XGETBV (a feature counts only when
// the operating system also saves its registers). strata's own detection:
// used to pick kernels at run time, to choose the bf16 matmul path, to refuse
// to start on a CPU the build cannot run on, and in every benchmark's header.
//
// This file and cpu.cpp are compiled for the x86-64 baseline (no AVX), so the
// check below can run, and say what is missing, on any x86-64.
#pragma once

#include <string>

namespace strata {

struct CpuFeatures {
  char vendor[13] = {};  // "GenuineIntel", "AuthenticAMD", ...
  char model[49] = {};   // brand string, e.g. "AMD EPYC 7B12"
  int family = 0, model_id = 0;
  bool sse4_2 = false, popcnt = false, avx = false, avx2 = false, fma = false, f16c = false,
       bmi1 = false, bmi2 = false, lzcnt = false, movbe = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false, avx512cd = false,
       avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;

  // x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (the portable build's target).
  bool x86_64_v3() const;
  // x86-64-v4: v3 plus AVX-512 F, BW, DQ, VL, CD.
  bool x86_64_v4() const;
  // A native bf16 dot product for matmuls: AVX512-BF16 or AMX-BF16.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  // Whether the named feature (the names above, as written) is present;
  // false for names this detection does not know.
  bool has(const char* name) const;
};

// Detected once; the same object for the whole process.
const CpuFeatures& cpu_features();

// "AMD EPYC 7B12 (AuthenticAMD family 23 model 49); avx2 fma" ...: the model
// and the vector features that matter here, for benchmark headers and info.
std::string cpu_summary();

// Kernel variants the build can choose between at run time.
enum class CpuLevel { Avx2 = 0, Avx512 = 1 };
// The level kernels run at: the highest the CPU supports and the build has
// kernels for, capped by STRATA_MAX_CPU_ISA (avx2 | avx512) in the
// environment or by set_max_cpu_level (tests).
CpuLevel cpu_level();
const char* cpu_level_name(CpuLevel level);
// Whether this build has AVX-512 kernels (the portable build, as a run-time
// choice; a -march=native build on an AVX-512 CPU, as its only set).
bool build_has_avx512_kernels();
// Whether it chooses between kernel sets at run time (the portable build).
bool build_chooses_kernels();
// The kernels this process runs, for reports: "avx512 (chosen at run time)",
// "avx2 (no AVX-512 on this CPU)", "built for -march=native", ...
std::string kernel_summary();
void set_max_cpu_level(CpuLevel level);

// The -march the build targets ("x86-64-v3", "native", ...) and the
// instruction sets that lets the compiler use (space-separated feature names).
const char* build_arch();
const char* build_isa();

}  // namespace strata
