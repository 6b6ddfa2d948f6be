// `strata info`: what this build is and what the machine offers.
#include <dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/threads.h"
#ifdef STRATA_HAVE_CUDA
#include "backends/cuda/device.h"
#endif

namespace strata::cli {

void apply_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

namespace {

std::string cpu_summary() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown";
  std::set<std::string> flags;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 && model == "unknown")
      model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && flags.empty()) {
      std::istringstream ss(line.substr(line.find(':') + 1));
      std::string w;
      while (ss >> w) flags.insert(w);
    }
  }
  std::string out = model + "; SIMD:";
  for (const char* f :
       {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"})
    if (flags.count(f)) out += std::string(" ") + f;
  return out;
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace

int cmd_info(int argc, char** argv, int first) {
  Args args("strata info",
            "Prints the build configuration, thread count, CPU features, the GEMM "
            "library and CUDA devices.");
  args.option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
  const dnnl_version_t* v = dnnl_version();
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  std::printf("strata %s\n", STRATA_VERSION);
#ifdef NDEBUG
  std::printf("build:   optimised (NDEBUG)\n");
#else
  std::printf("build:   debug\n");
#endif
  std::printf("threads: %d (OpenMP; OMP_NUM_THREADS=%s)\n", num_threads(),
              omp_env ? omp_env : "unset");
  std::printf("cpu:     %s\n", cpu_summary().c_str());
  std::printf("gemm:    oneDNN %d.%d.%d, kernels for %s\n", v->major, v->minor, v->patch,
              isa_name(dnnl_get_effective_cpu_isa()));
#ifdef STRATA_HAVE_CUDA
  const int rt = cuda::runtime_version();
  std::printf("cuda:    backend built (runtime %d.%d); %d device(s) visible\n", rt / 1000,
              (rt % 1000) / 10, cuda::device_count());
#else
  std::printf("cuda:    backend not built (nvcc not found at configure time)\n");
#endif
  return 0;
}

}  // namespace strata::cli
