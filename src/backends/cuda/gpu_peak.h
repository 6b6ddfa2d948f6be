// The peak rates a GPU's figures are divided by: read off the device's
// properties and a table of known chips (vendor datasheet figures, dense, no
// sparsity), or, for a chip the table does not know, computed from its
// multiprocessor count and clock with the per-multiprocessor rates of its
// architecture. Pure host code: compiled in every build, so the table is
// tested without a GPU.
#pragma once

#include <string>

namespace strata::cuda {

// What cudaGetDeviceProperties / cudaDeviceGetAttribute report.
struct GpuProperties {
  std::string name;            // e.g. "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;    // compute capability
  int multiprocessors = 0;
  int clock_khz = 0;           // peak SM clock
  int memory_clock_khz = 0;    // peak memory clock
  int memory_bus_bits = 0;
  long long memory_bytes = 0;
  int l2_bytes = 0;
  int shared_per_block_optin = 0;  // the largest dynamic shared memory a block may opt in to
};

struct GpuPeak {
  double fp32_gflops = 0;  // CUDA cores, FMA counted as 2 FLOPs
  double bf16_gflops = 0;  // tensor cores, dense, fp32 accumulation
  double dram_gbs = 0;     // memory bandwidth
  std::string source;      // "known chip: H100 SXM5" or "computed from 132 SMs at 1980 MHz (sm_90)"
};

GpuPeak gpu_peak(const GpuProperties& p);

// One line for `strata info` and the benchmarks: name, sm_XY, SMs, memory, peaks.
std::string describe_gpu(const GpuProperties& p);

}  // namespace strata::cuda
