// `strata bench comm` (under mpirun): how much of an async all-reduce stays
// exposed after compute of a given length, with and without progress polls
// between the compute kernels. On the CPU only the calling thread drives a
// non-blocking MPI collective (MPI_THREAD_FUNNELED, no progress thread), so
// without polls most of the work happens in the final wait.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/timer.h"
#include "ops/backend.h"
#include "parallel/grid.h"

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

struct Trial {
  double compute_s = 0, wait_s = 0, poll_s = 0;
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
      .option("threads", "N", "OpenMP threads per process (0: OMP_NUM_THREADS or all cores)", "0");
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

  // The compute: 256x512 @ 512x512 linears (67 MFLOP each), as many as fill
  // the target on rank 0 (every rank runs the same count).
  auto be = ops::make_backend<float>();
  const int64_t N = 256;
  const int C = 512;
  ops::DeviceBuffer<float> x(be.get(), size_t(N) * C), w(be.get(), size_t(C) * C),
      y(be.get(), size_t(N) * C);
  {
    std::vector<float> h(size_t(C) * C);
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(int(i % 7) - 3) * 0.01f;
    be->from_host(w.data(), h.data(), int64_t(h.size()));
    be->from_host(x.data(), h.data(), N * C);
  }
  auto kernel = [&] { be->linear_forward(y.data(), x.data(), w.data(), nullptr, N, C, C, {}); };
  for (int i = 0; i < 3; ++i) kernel();  // warm-up
  Timer calib;
  for (int i = 0; i < 10; ++i) kernel();
  double per_kernel = calib.seconds() / 10;
  per_kernel = comm.allreduce_sum(per_kernel) / comm.size();
  const int kernels = std::max(1, int(compute_target / per_kernel + 0.5));
  if (root)
    std::printf(
        "%d processes; compute: %d GEMM kernels of %.2f ms (256x512x512) per trial; median of "
        "%d trials; times are the mean over processes\n\n",
        comm.size(), kernels, per_kernel * 1e3, repeat);

  auto mean = [&](double v) { return comm.allreduce_sum(v) / comm.size(); };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (root)
    std::printf("%10s %12s %13s %18s %18s %10s\n", "size (MiB)", "alone (ms)", "compute (ms)",
                "exposed, no polls", "exposed, polls", "in polls");
  for (double mib : sizes) {
    const int64_t n = std::max<int64_t>(1, int64_t(mib * 1024 * 1024 / sizeof(float)));
    std::vector<float> buf(size_t(n), 1.0f);
    // Blocking all-reduce alone.
    std::vector<double> alone;
    for (int r = 0; r < repeat; ++r) {
      comm.barrier();
      Timer t;
      comm.allreduce_sum(buf.data(), n);
      alone.push_back(mean(t.seconds()));
    }
    // Async all-reduce behind the compute, with and without polls.
    auto trial = [&](bool polls) {
      comm.barrier();
      Trial tr;
      Timer t;
      const int64_t h = comm.allreduce_sum_async(buf.data(), n);
      for (int k = 0; k < kernels; ++k) {
        kernel();
        if (polls) {
          Timer p;
          comm.progress();
          tr.poll_s += p.seconds();
        }
      }
      tr.compute_s = t.seconds() - tr.poll_s;
      Timer wt;
      comm.wait(h);
      tr.wait_s = wt.seconds();
      return Trial{mean(tr.compute_s), mean(tr.wait_s), mean(tr.poll_s)};
    };
    std::vector<double> compute, exposed_off, exposed_on, polls;
    for (int r = 0; r < repeat; ++r) {
      const Trial off = trial(false), on = trial(true);
      compute.push_back(off.compute_s);
      exposed_off.push_back(off.wait_s);
      exposed_on.push_back(on.wait_s + on.poll_s);
      polls.push_back(on.poll_s);
    }
    if (root)
      std::printf("%10.2f %12.2f %13.1f %18.2f %18.2f %10.2f\n", mib, median(alone) * 1e3,
                  median(compute) * 1e3, median(exposed_off) * 1e3, median(exposed_on) * 1e3,
                  median(polls) * 1e3);
  }
  if (root)
    std::printf(
        "\nexposed (ms): time outside compute that the all-reduce cost (the final wait, plus "
        "the polls themselves when polling); in polls (ms): the latter.\n");
  return 0;
}

}  // namespace strata::cli
