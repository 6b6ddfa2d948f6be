// fp32 staging of bf16 activations for the kernel backends' ops whose
// kernels have no bf16 path of their own yet (the GEMMs, attention, the head,
// MSE): the op runs its fp32 kernels on fp32 copies, and what it writes is
// rounded back. The numbers are those of the fp32 kernels on the bf16 values
// (widening is exact), rounded once when stored; the cost is a copy each way,
// which a native bf16 path removes (backends/cpu/storage.h is the CPU's twin).
#pragma once

#include <exception>
#include <type_traits>

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/gemm.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// What an fp32 kernel reads and writes in place of activation `a` of n
// elements: a itself where its storage is T; else an fp32 copy in scratch
// slot `slot`, filled from a when `in` (an input, or a buffer the kernel adds
// to or writes only part of) and, for a mutable a, rounded back into it when
// the DeviceStaged goes out of scope (on the stream, after the op's kernels).
template <typename T, typename A = ops::Act<T>>
class DeviceStaged {
  static constexpr bool kConst = std::is_same_v<A, ops::ActIn<T>>;
  using P = std::conditional_t<kConst, const T*, T*>;

 public:
  DeviceStaged(KernelContext<T>& k, Slot slot, A a, int64_t n, bool in = true)
      : k_(k), a_(a), n_(n) {
    if (!a) return;
    if constexpr (std::is_same_v<T, float>)
      if (a.is_bf16()) {
        k.note_staged();
        auto* f = static_cast<float*>(k.scratch(slot, size_t(n) * sizeof(float)));
        if (in && n)
          STRATA_LAUNCH(k_from_bf16<float>, blocks_for(n, 256), 256, 0, k.stream(), f,
                        static_cast<const uint16_t*>(a.raw()), n);
        p_ = f;
        staged_ = true;
        return;
      }
    p_ = a;
  }
  DeviceStaged(const DeviceStaged&) = delete;
  DeviceStaged& operator=(const DeviceStaged&) = delete;
  // Rounds back unless an exception is on its way (the op failed).
  ~DeviceStaged() noexcept(false) {
    if constexpr (std::is_same_v<T, float> && !kConst)
      if (staged_ && n_ && std::uncaught_exceptions() == 0)
        STRATA_LAUNCH(k_to_bf16<float>, blocks_for(n_, 256), 256, 0, k_.stream(),
                      static_cast<uint16_t*>(a_.raw()), static_cast<const float*>(p_), n_);
  }
  P get() const { return p_; }

 private:
  KernelContext<T>& k_;
  A a_;
  int64_t n_;
  P p_ = nullptr;
  bool staged_ = false;
};
template <typename T>
using DeviceStagedIn = DeviceStaged<T, ops::ActIn<T>>;

// Elements of a view of N rows ld apart, `width` wide: (N - 1) ld + width.
inline int64_t view_elements(int64_t N, int64_t ld, int64_t width) {
  return N ? (N - 1) * ld + width : 0;
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
