// `strata info`: what this build is and what the machine offers.
#include <dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "ops/backend.h"

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

void print_bench_machine() {
  std::printf("cpu: %s\nkernels: %s; build -march=%s; %d threads\n", cpu_summary().c_str(),
              kernel_summary().c_str(), build_arch(), num_threads());
}

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
  const char* kind = "optimised (NDEBUG)";
#else
  const char* kind = "debug";
#endif
  std::printf("build:   %s, -march=%s (%s)\n", kind, build_arch(), build_isa());
  std::printf("threads: %d (OpenMP; OMP_NUM_THREADS=%s)\n", num_threads(),
              omp_env ? omp_env : "unset");
  std::printf("cpu:     %s\n", cpu_summary().c_str());
  std::printf("kernels: %s\n", kernel_summary().c_str());
  std::printf("gemm:    oneDNN %d.%d.%d\n", v->major, v->minor, v->patch);
  const auto backend = ops::make_backend<float>();
  std::printf("matmul fp32: %s\n", backend->matmul_path(ops::MatmulPrecision::FP32).c_str());
  std::printf("matmul bf16: %s\n", backend->matmul_path(ops::MatmulPrecision::BF16).c_str());
  std::printf("precision auto: %s\n", backend->native_bf16() ? "bf16" : "fp32");
#ifdef STRATA_HAVE_CUDA
  const int rt = cuda::runtime_version();
  std::printf("cuda:    backend built (runtime %d.%d); %d device(s) visible\n", rt / 1000,
              (rt % 1000) / 10, cuda::device_count());
#else
  std::printf("cuda:    backend not built (nvcc not found at configure time)\n");
#endif
  std::printf("devices: %s; %s (simt: the CUDA kernels on the CPU SIMT executor)\n",
              ops::backend_names().c_str(), ops::device_choice("auto").c_str());
  return 0;
}

}  // namespace strata::cli
