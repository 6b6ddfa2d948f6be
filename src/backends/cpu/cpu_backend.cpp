// The CPU implementation of ops::Backend: forwards each op of ops/ops.def to
// the kernel of the same name in backends/cpu/<op>.cpp.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/storage.h"
#include "core/arena.h"
#include "core/error.h"
#include "ops/backend.h"

namespace strata::ops {
namespace {

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  const char* name() const override { return "cpu"; }

  T* alloc(size_t n) override { return static_cast<T*>(aligned_alloc_zeroed(n * sizeof(T))); }
  void free(T* p) override { aligned_free(p); }
  // Small copies and fills run on the calling thread: an OpenMP region costs
  // microseconds, and decoding copies each head's key and value row (a few
  // hundred floats) into the KV cache, hundreds of times per token.
  static constexpr int64_t kSerialBelow = 1 << 16;
  void zero(Act<T> p, int64_t n) override {
    fill(static_cast<char*>(p.raw()), nullptr, size_t(n) * dtype_size(p.dtype()));
  }
  void copy(Act<T> dst, ActIn<T> src, int64_t n) override {
    if (dst.dtype() != src.dtype()) {  // (Act allows bf16 beside float only)
      if constexpr (std::is_same_v<T, float>) {
        if (dst.is_bf16())
          cpu::narrow(dst.template as<bf16>(), src.template as<const float>(), n);
        else
          cpu::widen(dst.template as<float>(), src.template as<const bf16>(), n);
      }
      return;
    }
    fill(static_cast<char*>(dst.raw()), static_cast<const char*>(src.raw()),
         size_t(n) * dtype_size(dst.dtype()));
  }
  void to_host(T* dst, const T* src, int64_t n) override { copy(dst, src, n); }
  void from_host(T* dst, const T* src, int64_t n) override { copy(dst, src, n); }
  bool is_host() const override { return true; }
  void* stream() const override { return nullptr; }
  void synchronize() override {}  // every call has finished when it returns
  double* alloc_scalars(int n) override {
    return static_cast<double*>(aligned_alloc_zeroed(size_t(n) * sizeof(double)));
  }
  void free_scalars(double* p) override { aligned_free(p); }
  void zero_scalars(double* p, int n) override { std::fill(p, p + n, 0.0); }
  void read_scalars(double* dst, const double* p, int n) override { std::copy(p, p + n, dst); }
  int32_t* alloc_ints(size_t n) override { return new int32_t[n ? n : 1](); }
  void free_ints(int32_t* p) override { delete[] p; }
  void ints_from_host(int32_t* dst, const int32_t* src, size_t n) override {
    std::copy(src, src + n, dst);
  }

  void set_matmul_precision(MatmulPrecision p) override { cpu::set_matmul_precision(p); }
  bool native_bf16() const override { return cpu::native_bf16_available(); }
  std::string matmul_path(MatmulPrecision p) const override { return cpu::matmul_path(p); }
  void freeze_weights(bool frozen) override { cpu::set_frozen_weights(frozen); }
  void hold_weights(const T* base, int64_t n) override {
    if constexpr (std::is_same_v<T, float>) cpu::set_held_weights(base, n);
  }

  // Every op of ops/ops.def: the kernel of the same name.
#define STRATA_DEFAULT(...)
#define STRATA_OP(role, name, ret, params, args) \
  ret name params override { return cpu::name<T> args; }
#include "ops/ops.def"
#undef STRATA_OP
#undef STRATA_DEFAULT

 private:
  // bytes of src into dst (zeros where src is null), in parallel above
  // kSerialBelow elements' worth.
  static void fill(char* dst, const char* src, size_t bytes) {
    auto part = [&](size_t at, size_t len) {
      if (src)
        std::memcpy(dst + at, src + at, len);
      else
        std::memset(dst + at, 0, len);
    };
    constexpr size_t kBlock = 16384;
    if (bytes < kSerialBelow * sizeof(float)) return part(0, bytes);
#pragma omp parallel for schedule(static)
    for (size_t at = 0; at < bytes; at += kBlock) part(at, std::min(kBlock, bytes - at));
  }
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend() {
  return std::make_unique<CpuBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_cpu_backend<float>();
template std::unique_ptr<Backend<double>> make_cpu_backend<double>();

}  // namespace strata::ops
