// Time per kernel, for the benchmarks' "top kernels" table. Off by default;
// while on, every STRATA_LAUNCH (and every GEMM of the GPU backends) adds its
// time under its name: on a GPU, CUDA events recorded around the launch on
// its stream, read when the times are taken (no synchronisation per launch,
// so the stream keeps its overlap); on the SIMT executor, the host time of the
// launch. The per-launch events cost a few microseconds of host time, so a
// benchmark times its steps with this off and profiles one extra step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::gpu {

struct KernelTime {
  std::string name;
  double ms = 0;
  int64_t launches = 0;
};

void set_kernel_timing(bool on);
bool kernel_timing();
// Adds one launch's time (the SIMT executor, or resolved events).
void add_kernel_time(const std::string& name, double ms);
// Every kernel's total since the last call, slowest first; waits for the
// GPU's pending events first. Clears the totals.
std::vector<KernelTime> take_kernel_times();

// Set by the CUDA build: resolves the events recorded so far into
// add_kernel_time (backends/cuda/device.cu).
using PendingFlush = void (*)();
void set_pending_flush(PendingFlush f);

}  // namespace strata::gpu
