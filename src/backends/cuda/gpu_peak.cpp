#include "backends/cuda/gpu_peak.h"

#include <cstdio>

#include "core/text.h"

namespace strata::cuda {
namespace {

// Datasheet figures (dense tensor-core rates, i.e. without the 2:4 sparsity
// the datasheets also quote). The first row whose every needle is in the
// device name wins, so the more specific rows come first.
struct KnownChip {
  const char* needles[2];
  const char* label;
  double fp32_tflops, bf16_tflops, dram_gbs;
};
constexpr KnownChip kKnown[] = {
    {{"H200", "NVL"}, "H200 NVL", 60.0, 835.5, 4800},
    {{"H200", nullptr}, "H200 SXM", 66.9, 989.4, 4800},
    {{"H100", "NVL"}, "H100 NVL", 60.0, 835.5, 3900},
    {{"H100", "PCIe"}, "H100 PCIe", 51.2, 756.5, 2000},
    {{"H100", nullptr}, "H100 SXM5", 66.9, 989.4, 3350},
    {{"A100", "40GB"}, "A100 40GB", 19.5, 312.0, 1555},
    {{"A100", nullptr}, "A100 80GB", 19.5, 312.0, 2039},
    {{"L40S", nullptr}, "L40S", 91.6, 362.1, 864},
    {{"L4", nullptr}, "L4", 30.3, 121.0, 300},
};

bool matches(const KnownChip& k, const std::string& name) {
  for (const char* n : k.needles)
    if (n && name.find(n) == std::string::npos) return false;
  return true;
}

// Per multiprocessor and clock: fp32 FMA lanes and dense bf16 tensor-core
// FLOPs (with fp32 accumulation), by architecture.
void per_sm_rates(int major, int minor, double* fp32_flops, double* bf16_flops) {
  *fp32_flops = 2 * 128.0;
  *bf16_flops = 1024;
  if (major == 7 || (major == 8 && minor == 0)) *fp32_flops = 2 * 64.0;
  if (major == 8 && minor == 0) *bf16_flops = 2048;  // A100
  if (major == 8 && minor != 0) *bf16_flops = 1024;  // A10, L4, L40S
  if (major == 9) *bf16_flops = 4096;                // H100, H200
  if (major >= 10) *bf16_flops = 8192;               // Blackwell
}

}  // namespace

GpuPeak gpu_peak(const GpuProperties& p) {
  GpuPeak r;
  for (const KnownChip& k : kKnown) {
    if (!matches(k, p.name)) continue;
    r.fp32_gflops = k.fp32_tflops * 1e3;
    r.bf16_gflops = k.bf16_tflops * 1e3;
    r.dram_gbs = k.dram_gbs;
    r.source = cat("known chip: ", k.label, " datasheet");
    return r;
  }
  double fp32 = 0, bf16 = 0;
  per_sm_rates(p.major, p.minor, &fp32, &bf16);
  const double ghz = p.clock_khz * 1e-6;
  r.fp32_gflops = p.multiprocessors * fp32 * ghz;
  r.bf16_gflops = p.multiprocessors * bf16 * ghz;
  // Double data rate: two transfers per memory clock over the bus.
  r.dram_gbs = 2.0 * p.memory_clock_khz * 1e3 * (p.memory_bus_bits / 8.0) * 1e-9;
  r.source = cat("computed from ", p.multiprocessors, " SMs at ", p.clock_khz / 1000, " MHz (sm_",
                 p.major, p.minor, ")");
  return r;
}

std::string describe_gpu(const GpuProperties& p) {
  const GpuPeak k = gpu_peak(p);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s, sm_%d%d, %d SMs at %d MHz, %.1f GiB, L2 %.0f MiB; peak fp32 %.1f TFLOP/s, "
                "bf16 %.1f TFLOP/s, memory %.0f GB/s (%s)",
                p.name.c_str(), p.major, p.minor, p.multiprocessors, p.clock_khz / 1000,
                double(p.memory_bytes) / (1 << 30), double(p.l2_bytes) / (1 << 20),
                k.fp32_gflops * 1e-3, k.bf16_gflops * 1e-3, k.dram_gbs, k.source.c_str());
  return buf;
}

}  // namespace strata::cuda
