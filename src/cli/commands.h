// Subcommands of the `strata` executable. Each takes the full argv and the
// index of its first own argument, and returns the process exit code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/config.h"

namespace strata::cli {

int cmd_info(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int bench_generate(int argc, char** argv, int first);  // cli/bench_generate.cpp
int bench_comm(int argc, char** argv, int first);      // cli/bench_comm.cpp
int bench_peak(int argc, char** argv, int first);      // cli/bench_peak.cpp
int cmd_train(int argc, char** argv, int first);       // cli/train.cpp
int cmd_generate(int argc, char** argv, int first);    // cli/generate.cpp
int cmd_inspect(int argc, char** argv, int first);     // cli/inspect.cpp
int cmd_tokenizer(int argc, char** argv, int first);   // cli/tokenizer_cmd.cpp
int cmd_data(int argc, char** argv, int first);        // cli/data_cmd.cpp
int cmd_convert(int argc, char** argv, int first);     // cli/convert.cpp
int cmd_export(int argc, char** argv, int first);      // cli/convert.cpp
int cmd_eval(int argc, char** argv, int first);        // cli/eval_cmd.cpp
int cmd_lp(int argc, char** argv, int first);          // cli/lp_cmd.cpp
int cmd_spd(int argc, char** argv, int first);         // cli/spd_cmd.cpp
int cmd_plan(int argc, char** argv, int first);        // cli/plan_cmd.cpp
int cmd_report(int argc, char** argv, int first);      // cli/report_cmd.cpp

// Applies --threads (0 = keep OMP_NUM_THREADS / all cores).
void apply_threads(int threads);

// Prints the machine a benchmark runs on: CPU model and instruction sets, the
// kernel level, the build's -march and the thread count (cli/info.cpp).
void print_bench_machine();

// The configuration of a benchmark shape ("288": 6L-288, "768": 12L-768;
// context 256 and 1024) with the given vocabulary (cli/bench_ops.cpp).
LlamaConfig bench_model_config(const std::string& which, int vocab, bool tied);

// The machine's measured limits (cli/bench_peak.cpp), on all OpenMP threads.
struct FmaPeak {
  double fp32 = 0;                    // GFLOP/s: the better of the two below
  double fp32_ymm = 0, fp32_zmm = 0;  // AVX2 and AVX-512 (0 without it) FMA loops
  std::string fp32_path;
  double bf16 = 0;  // GFLOP/s of the native bf16 dot product; 0 where there is none
  std::string bf16_path;
};
// Register-only FMA / bf16 dot-product loops, `seconds` each (best chunk).
FmaPeak measure_fma_peak(double seconds);
// The peak to divide a measured rate by, given the peak measured before it:
// a rate above that peak means the first measurement was disturbed (another
// process, a core still busy), so `again` measures once more and the larger
// of the two is the peak; otherwise the first stands and `again` is not run.
double settled_peak(double first, double rate, const std::function<double()>& again);
struct BandwidthPeak {
  double read_gbs = 0;    // best pass, GB/s (1e9 bytes)
  int64_t bytes = 0;      // buffer read per pass
  int64_t llc_bytes = 0;  // largest cache level of cpu0 (0 if unknown)
};
// Reads a buffer of at least `bytes` (and at least 8x the last-level cache)
// `passes` times on all threads with vector loads; the best pass counts.
BandwidthPeak measure_read_bandwidth(int64_t bytes, int passes);
// Peak resident set of this process so far, MiB (getrusage).
double peak_rss_mib();
// Where the task definitions are (eval_cmd.cpp): eval/ in the working
// directory, else the one of the source tree strata was built from.
std::string default_eval_dir();

}  // namespace strata::cli
