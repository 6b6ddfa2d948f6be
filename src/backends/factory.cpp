// ops::make_backend: the one place a backend is chosen by name.
#include <cstdlib>
#include <string>

#include <algorithm>
#include "backends/cpu/gemm.h"
#include "backends/cuda/backends.h"

#include "core/error.h"
#include "ops/backend.h"
#if defined(STRATA_HAVE_CUDA)
#include "backends/cuda/device.h"
#endif

namespace strata::ops {

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend();  // backends/cpu/cpu_backend.cpp

std::string backend_names() {
#if defined(STRATA_HAVE_CUDA)
  return "cpu, cuda, simt, auto";
#else
  return "cpu, simt, auto (this build has no CUDA: configure with nvcc for cuda)";
#endif
}

std::string resolve_device(const std::string& name) {
  bool known = name == "cpu" || name == "simt" || name == "auto";
#if defined(STRATA_HAVE_CUDA)
  known = known || name == "cuda";
#endif
  STRATA_CHECK(known, "unknown device '", name, "' (this build has: ", backend_names(), ")");
#if defined(STRATA_HAVE_CUDA)
  STRATA_CHECK(name != "cuda" || cuda::device_count() > 0,
               "device 'cuda': no CUDA device is visible here (no driver or no GPU); choose cpu "
               "or auto");
#endif
  if (name != "auto") return name;
#if defined(STRATA_HAVE_CUDA)
  if (cuda::device_count() > 0) return "cuda";
#endif
  return "cpu";
}

std::string device_choice(const std::string& requested) {
  const std::string d = resolve_device(requested);
  if (requested != "auto") return cat("device ", d);
#if defined(STRATA_HAVE_CUDA)
  if (d == "cuda")
    return cat("device cuda (auto: ", cuda::device_count(), " CUDA device(s) visible)");
  return "device cpu (auto: no CUDA device visible)";
#else
  return "device cpu (auto: this build has no CUDA backend)";
#endif
}

int local_cuda_device() {
#if defined(STRATA_HAVE_CUDA)
  for (const char* v :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"})
    if (const char* e = std::getenv(v)) return std::atoi(e) % std::max(1, cuda::device_count());
#endif
  return 0;
}

MemoryLimit memory_available(const std::string& device) {
#if defined(STRATA_HAVE_CUDA)
  const char* env = std::getenv("STRATA_MEMORY_LIMIT");
  if (device == "cuda" && !(env && *env)) {
    const int gpu = local_cuda_device();
    const int64_t free_bytes = cuda::free_memory(gpu);
    if (free_bytes >= 0) return {free_bytes, cat("GPU ", gpu, " free memory")};
  }
#else
  (void)device;
#endif
  return host_memory_available();
}

BackendsInfo describe_backends() {
  BackendsInfo b;
  b.gemm = cpu::gemm_library();
  const auto cpu = make_cpu_backend<float>();
  b.matmul_fp32 = cpu->matmul_path(MatmulPrecision::FP32);
  b.matmul_bf16 = cpu->matmul_path(MatmulPrecision::BF16);
  b.native_bf16 = cpu->native_bf16();
#if defined(STRATA_HAVE_CUDA)
  const int rt = cuda::runtime_version();
  b.cuda = cat("backend built (runtime ", rt / 1000, ".", (rt % 1000) / 10, "); ",
               cuda::device_count(), " device(s) visible; attention: strata's (tensor-core "
               "flash with bf16)",
#if defined(STRATA_HAVE_CUDNN)
               ", cuDNN's (model.attention = \"cudnn\")"
#else
               ", no cuDNN (cmake/fetch_cudnn_frontend.sh, docs/gpu.md)"
#endif
  );
  for (int i = 0; i < cuda::device_count(); ++i) {
    cuda::GpuProperties p;
    if (cuda::device_properties(i, &p)) b.gpus.push_back(cat("GPU ", i, ": ", cuda::describe_gpu(p)));
  }
#else
  b.cuda = "backend not built (nvcc not found at configure time)";
#endif
  b.devices = cat(backend_names(), "; ", device_choice("auto"),
                  " (simt: the CUDA kernels on the CPU SIMT executor)");
  return b;
}

AcceleratorPeak accelerator_peak(const std::string& device) {
  AcceleratorPeak r;
#if defined(STRATA_HAVE_CUDA)
  cuda::GpuProperties p;
  if (resolve_device(device) != "cuda" || !cuda::device_properties(local_cuda_device(), &p))
    return r;
  const cuda::GpuPeak k = cuda::gpu_peak(p);
  r.fp32_gflops = k.fp32_gflops;
  r.bf16_gflops = k.bf16_gflops;
  r.dram_gbs = k.dram_gbs;
  r.what = cat(p.name, " (", k.source, ")");
#else
  (void)device;
#endif
  return r;
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& requested) {
  const std::string name = resolve_device(requested);
  if (name == "cpu") return make_cpu_backend<T>();
  if (name == "simt") return cuda::make_simt_backend<T>();
#if defined(STRATA_HAVE_CUDA)
  if (name == "cuda") return cuda::make_cuda_backend<T>(local_cuda_device());
#endif
  fail(cat("unknown device '", name, "'"));
}

template std::unique_ptr<Backend<float>> make_backend<float>(const std::string&);
template std::unique_ptr<Backend<double>> make_backend<double>(const std::string&);

}  // namespace strata::ops
