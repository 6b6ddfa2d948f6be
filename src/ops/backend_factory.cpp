// ops::make_backend: the one place a backend is chosen by name.
#include <string>

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
  if (name != "auto") return name;
#if defined(STRATA_HAVE_CUDA)
  if (cuda::device_count() > 0) return "cuda";
#endif
  return "cpu";
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& requested) {
  const std::string name = resolve_device(requested);
  if (name == "cpu") return make_cpu_backend<T>();
  if (name == "simt") return cuda::make_simt_backend<T>();
#if defined(STRATA_HAVE_CUDA)
  if (name == "cuda") {
    STRATA_CHECK(cuda::device_count() > 0,
                 "device 'cuda': no CUDA device is visible here (driver or GPU missing); "
                 "use --device cpu");
    return cuda::make_cuda_backend<T>();
  }
#endif
  fail(cat("unknown device '", name, "' (this build has: ", backend_names(), ")"));
}

template std::unique_ptr<Backend<float>> make_backend<float>(const std::string&);
template std::unique_ptr<Backend<double>> make_backend<double>(const std::string&);

}  // namespace strata::ops
