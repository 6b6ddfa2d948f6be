// The SIMT executor's launch limits (simt.h): what a GPU refuses to launch,
// refused here too, so a launch that works on the CPU executor also launches
// on an H100. The numbers are the H100's and H200's (compute capability 9.0).
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "backends/cuda/simt/simt.h"
#include "core/error.h"

namespace strata::simt {
namespace {

constexpr unsigned kMaxThreads = 1024;

// Function-local statics: launch bounds are declared during static
// initialisation, in whatever order the translation units run.
std::mutex& limits_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int, std::less<>>& bounds() {
  static std::map<std::string, int, std::less<>> b;
  return b;
}
std::map<KernelId, size_t>& opt_ins() {
  static std::map<KernelId, size_t> o;
  return o;
}

// "cu::k_rmsnorm<float>" -> "k_rmsnorm": what STRATA_LAUNCH passes, less
// namespaces and template arguments.
std::string_view base_name(std::string_view s) {
  s = s.substr(0, s.find('<'));
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  const size_t colon = s.rfind("::");
  if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  while (!s.empty() && (s.front() == ' ' || s.front() == '&' || s.front() == '('))
    s.remove_prefix(1);
  return s;
}

std::string dims(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

void allow_dynamic_shared(KernelId id, size_t bytes) {
  STRATA_CHECK(bytes <= kMaxDynamicShared, "SIMT: allow_dynamic_shared(", bytes,
               " bytes): the device allows at most ", kMaxDynamicShared,
               " bytes of dynamic shared memory per block (CUDA: cudaErrorInvalidValue)");
  std::lock_guard<std::mutex> lock(limits_mutex());
  opt_ins()[id] = bytes;
}

size_t dynamic_shared_limit(KernelId id) {
  std::lock_guard<std::mutex> lock(limits_mutex());
  auto it = opt_ins().find(id);
  return it == opt_ins().end() ? kDefaultDynamicShared : it->second;
}

bool declare_max_threads(const char* name, int max_threads) {
  std::lock_guard<std::mutex> lock(limits_mutex());
  bounds()[std::string(base_name(name))] = max_threads;
  return true;
}

int max_threads(const char* name) {
  std::lock_guard<std::mutex> lock(limits_mutex());
  auto it = bounds().find(base_name(name));
  return it == bounds().end() ? 0 : it->second;
}

void check_launch(const char* name, KernelId id, Dim3 grid, Dim3 block, size_t dynamic_shared) {
  const uint64_t nthreads = uint64_t(block.x) * block.y * block.z;
  STRATA_CHECK(nthreads >= 1 && nthreads <= kMaxThreads, "SIMT launch of ", name, ": block ",
               dims(block), " has ", nthreads, " threads (CUDA allows 1..1024)");
  STRATA_CHECK(block.z <= 64, "SIMT launch of ", name, ": block.z ", block.z, " > 64");
  STRATA_CHECK(grid.y <= 65535 && grid.z <= 65535, "SIMT launch of ", name, ": grid ", dims(grid),
               " exceeds CUDA's limits");
  const int bound = max_threads(name);
  STRATA_CHECK(bound == 0 || nthreads <= uint64_t(bound), "SIMT launch of ", name, ": block ",
               dims(block), " has ", nthreads, " threads, more than its __launch_bounds__ (", bound,
               "); a GPU refuses the launch (cudaErrorInvalidValue)");
  STRATA_CHECK(dynamic_shared <= kMaxDynamicShared, "SIMT launch of ", name, ": ", dynamic_shared,
               " bytes of dynamic shared memory, over the device's ", kMaxDynamicShared,
               " bytes (227 KiB) per block even with gpu::allow_dynamic_shared");
  // The attribute is the kernel's limit either way: an opt-in below 48 KiB
  // lowers it, as on a GPU.
  if (dynamic_shared > 0) {
    const size_t limit = dynamic_shared_limit(id);
    STRATA_CHECK(dynamic_shared <= limit, "SIMT launch of ", name, ": ", dynamic_shared,
                 " bytes of dynamic shared memory, over the ", limit, " bytes it may use (",
                 limit == kDefaultDynamicShared ? "48 KiB without an opt-in"
                                                : "its gpu::allow_dynamic_shared opt-in",
                 "); call gpu::allow_dynamic_shared(kernel, ", dynamic_shared,
                 ") before launching, as a GPU needs");
  }
}

}  // namespace strata::simt
