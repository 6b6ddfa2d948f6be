// `strata bench comm` (under mpirun): how much of an async all-reduce stays
// exposed after compute of a given length, with and without progress polls
// between the compute kernels (the measurement: parallel/overlap_bench.h).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "ops/backend.h"
#include "parallel/grid.h"
#include "parallel/overlap_bench.h"

namespace strata::cli {
namespace {

std::vector<double> parse_sizes(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    STRATA_CHECK(!item.empty() && end && *end == '\0' && v > 0 && v <= 4096,
                 "strata bench comm: --sizes: '", item,
                 "' is not a size in MiB in (0, 4096] (e.g. --sizes 1,4,16)");
    out.push_back(v);
  }
  STRATA_CHECK(!out.empty(), "strata bench comm: --sizes is empty");
  return out;
}

// The compute: 256x512 @ 512x512 linears (67 MFLOP each) on the CPU backend.
struct GemmKernel {
  std::unique_ptr<ops::Backend<float>> be = ops::make_backend<float>();
  static constexpr int64_t N = 256;
  static constexpr int C = 512;
  ops::DeviceBuffer<float> x{be.get(), size_t(N) * C}, w{be.get(), size_t(C) * C},
      y{be.get(), size_t(N) * C};
  GemmKernel() {
    std::vector<float> h(size_t(C) * C);
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(int(i % 7) - 3) * 0.01f;
    be->from_host(w.data(), h.data(), int64_t(h.size()));
    be->from_host(x.data(), h.data(), N * C);
  }
  void operator()() { be->linear_forward(y.data(), x.data(), w.data(), nullptr, N, C, C, {}); }
};

}  // namespace

int bench_comm(int argc, char** argv, int first) {
  Args args("strata bench comm",
            "Under mpirun (2 or more processes): times an all-reduce alone, then the same "
            "all-reduce started asynchronously before a block of compute (GEMM kernels), with and "
            "without progress polls between the kernels, and prints the time still exposed in "
            "the final wait. The data-parallel gradient all-reduces of `strata train` run this "
            "way (polls between backward kernels; STRATA_PROGRESS_POLLS=0 turns them off).");
  args.option("sizes", "LIST", "all-reduce sizes in MiB, comma-separated", "1,4,16,28")
      .option("compute-ms", "MS", "compute per trial in milliseconds", "100")
      .option("repeat", "R", "trials per case (the median is printed)", "5")
      .option("threads", "N", "OpenMP threads per process (0: OMP_NUM_THREADS or all cores)", "0")
      .flag("bf16",
            "send the same values as bf16 (half the bytes: the tensor-parallel sums of bf16 "
            "activations); sizes still count fp32 MiB");
  if (!args.parse(argc, argv, first)) return 0;
  const std::vector<double> sizes = parse_sizes(args.get("sizes"));
  const double compute_target = args.get_double("compute-ms") / 1e3;
  STRATA_CHECK(compute_target > 0 && compute_target <= 60,
               "strata bench comm: --compute-ms must be in (0, 60000]");
  const int repeat = std::max(1, args.get_int("repeat"));
  apply_threads(args.get_int("threads"));
  ProcessGrid grid = make_grid(1, 0);
  STRATA_CHECK(grid.world_size >= 2,
               "strata bench comm measures collectives between processes: start it under "
               "mpirun (mpirun -np 2 strata bench comm)");
  Communicator& comm = *grid.world;
  const bool root = grid.is_root();
  if (root) print_bench_machine();
  GemmKernel gemm;
  const std::function<void()> kernel = [&] { gemm(); };
  // As many kernels as fill the target on average (every rank runs the same count).
  const double per_kernel = time_kernel(comm, kernel);
  const int kernels = std::max(1, int(compute_target / per_kernel + 0.5));
  if (root) {
    std::printf(
        "%d processes; compute: %d GEMM kernels of %.2f ms (256x512x512) per trial; median of "
        "%d trials; times are the mean over processes%s\n\n",
        comm.size(), kernels, per_kernel * 1e3, repeat,
        args.has("bf16") ? "; the values sent as bf16 (half the MiB of each size)" : "");
    std::printf("%10s %12s %13s %18s %18s %10s\n", "size (MiB)", "alone (ms)", "compute (ms)",
                "exposed, no polls", "exposed, polls", "in polls");
  }
  for (double mib : sizes) {
    const OverlapTimes t = measure_overlap(comm, mib, kernel, kernels, repeat, args.has("bf16"));
    if (root)
      std::printf("%10.2f %12.2f %13.1f %18.2f %18.2f %10.2f\n", mib, t.alone * 1e3,
                  t.compute * 1e3, t.exposed_without_polls * 1e3, t.exposed_with_polls * 1e3,
                  t.polls * 1e3);
  }
  if (root)
    std::printf(
        "\nexposed (ms): time outside compute that the all-reduce cost (the final wait, plus "
        "the polls themselves when polling); in polls (ms): the latter.\n");
  return 0;
}

}  // namespace strata::cli
