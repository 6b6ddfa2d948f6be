// `strata info`: what this build is and what the machine offers.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "ops/backend.h"

#include "cli/args.h"
#include "cli/commands.h"
#include "core/threads.h"

namespace strata::cli {

void apply_threads(int threads) {
  const std::string problem = thread_count_problem(threads);
  STRATA_USAGE_CHECK(problem.empty(), "--threads ", problem);
  if (threads > 0) set_num_threads(threads);
}

void print_bench_machine() {
  std::printf("cpu: %s\nkernels: %s; build -march=%s; %d threads\nthreads wait: %s\n",
              cpu_summary().c_str(), kernel_summary().c_str(), build_arch(), num_threads(),
              wait_policy_summary().c_str());
}

int cmd_info(int argc, char** argv, int first) {
  Args args("strata info",
            "Prints the build configuration, thread count, CPU features, the GEMM "
            "library and CUDA devices.");
  args.option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
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
  std::printf("threads wait: %s\n", wait_policy_summary().c_str());
  std::printf("cpu:     %s\n", cpu_summary().c_str());
  std::printf("kernels: %s\n", kernel_summary().c_str());
  const ops::BackendsInfo b = ops::describe_backends();
  std::printf("gemm:    %s\n", b.gemm.c_str());
  std::printf("matmul fp32: %s\n", b.matmul_fp32.c_str());
  std::printf("matmul bf16: %s\n", b.matmul_bf16.c_str());
  std::printf("precision auto: %s\n", b.native_bf16 ? "bf16" : "fp32");
  std::printf("activations auto: fp32 on cpu and simt, bf16 on cuda when the matmuls are bf16\n");
  std::printf("cuda:    %s\n", b.cuda.c_str());
  for (const std::string& g : b.gpus) std::printf("gpu:     %s\n", g.c_str());
  std::printf("devices: %s\n", b.devices.c_str());
#ifdef STRATA_MISSING_FEATURES  // set by CMake on this file in a build without them
  std::printf("missing: %s (see docs/build.md, \"Optional features\")\n", STRATA_MISSING_FEATURES);
#endif
  return 0;
}

}  // namespace strata::cli
