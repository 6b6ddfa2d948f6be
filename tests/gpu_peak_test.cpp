// The GPU peak table and rates (backends/cuda/gpu_peak.h) and the per-kernel
// timing of the benchmarks (backends/cuda/kernel_times.h), checked without a
// GPU: the table is pure host code, the timing runs on the SIMT executor.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/gpu_peak.h"
#include "backends/cuda/kernel_times.h"
#include "ops/backend.h"

namespace strata {
namespace {

cuda::GpuProperties h100(const std::string& name) {
  cuda::GpuProperties p;
  p.name = name;
  p.major = 9;
  p.minor = 0;
  p.multiprocessors = 132;
  p.clock_khz = 1980000;
  p.memory_clock_khz = 2619000;
  p.memory_bus_bits = 5120;
  p.memory_bytes = 85520809984LL;
  p.l2_bytes = 52428800;
  return p;
}

TEST(GpuPeak, KnownChipsUseTheirDatasheet) {
  // The name the H100 of the device machines reports (nvidia-smi, 2026-11).
  const cuda::GpuPeak sxm = cuda::gpu_peak(h100("NVIDIA H100 80GB HBM3"));
  EXPECT_DOUBLE_EQ(sxm.bf16_gflops, 989400);
  EXPECT_DOUBLE_EQ(sxm.fp32_gflops, 66900);
  EXPECT_DOUBLE_EQ(sxm.dram_gbs, 3350);
  EXPECT_NE(sxm.source.find("H100 SXM5"), std::string::npos) << sxm.source;
  // More specific rows win over the generic H100 row.
  EXPECT_DOUBLE_EQ(cuda::gpu_peak(h100("NVIDIA H100 PCIe")).bf16_gflops, 756500);
  EXPECT_DOUBLE_EQ(cuda::gpu_peak(h100("NVIDIA H100 NVL")).bf16_gflops, 835500);
  EXPECT_DOUBLE_EQ(cuda::gpu_peak(h100("NVIDIA H200")).dram_gbs, 4800);
}

TEST(GpuPeak, UnknownChipsAreComputedFromTheirProperties) {
  cuda::GpuProperties p = h100("Some Future Hopper");
  p.multiprocessors = 100;
  p.clock_khz = 1500000;
  const cuda::GpuPeak k = cuda::gpu_peak(p);
  EXPECT_DOUBLE_EQ(k.fp32_gflops, 100 * 256 * 1.5);   // 128 FMA lanes per SM
  EXPECT_DOUBLE_EQ(k.bf16_gflops, 100 * 4096 * 1.5);  // dense bf16 tensor cores, sm_90
  // Two transfers per memory clock over a 5120-bit bus: the H100's 3.35 TB/s.
  EXPECT_NEAR(k.dram_gbs, 3352.3, 0.1);
  EXPECT_NE(k.source.find("computed from 100 SMs at 1500 MHz (sm_90)"), std::string::npos)
      << k.source;
  p.major = 8;  // an A100-class chip: half the fp32 lanes and tensor rate
  EXPECT_DOUBLE_EQ(cuda::gpu_peak(p).fp32_gflops, 100 * 128 * 1.5);
  EXPECT_DOUBLE_EQ(cuda::gpu_peak(p).bf16_gflops, 100 * 2048 * 1.5);
}

TEST(GpuPeak, DescribeNamesTheChipAndItsPeaks) {
  const std::string d = cuda::describe_gpu(h100("NVIDIA H100 80GB HBM3"));
  EXPECT_NE(d.find("NVIDIA H100 80GB HBM3, sm_90, 132 SMs at 1980 MHz, 79.6 GiB"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("bf16 989.4 TFLOP/s"), std::string::npos) << d;
}

TEST(KernelTimes, SimtLaunchesAreTimedOnlyWhileTimingIsOn) {
  auto be = ops::make_backend<float>("simt");
  const int64_t N = 4;
  const int F = 64;
  std::vector<float> host(size_t(N) * 2 * F, 0.5f);
  float* gateup = be->alloc(host.size());
  float* h = be->alloc(size_t(N) * F);
  be->from_host(gateup, host.data(), int64_t(host.size()));
  gpu::take_kernel_times();
  be->swiglu_forward(h, gateup, N, F);
  EXPECT_TRUE(gpu::take_kernel_times().empty()) << "timed while timing was off";
  gpu::set_kernel_timing(true);
  be->swiglu_forward(h, gateup, N, F);
  be->swiglu_forward(h, gateup, N, F);
  gpu::set_kernel_timing(false);
  const std::vector<gpu::KernelTime> k = gpu::take_kernel_times();
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NE(k[0].name.find("swiglu"), std::string::npos) << k[0].name;
  EXPECT_EQ(k[0].launches, 2);
  EXPECT_GT(k[0].ms, 0);
  EXPECT_TRUE(gpu::take_kernel_times().empty()) << "take did not clear the totals";
  be->free(gateup);
  be->free(h);
}

}  // namespace
}  // namespace strata
