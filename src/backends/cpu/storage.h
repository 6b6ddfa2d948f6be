// Activation storage of the CPU kernels (ops/dtype.h): a kernel's body is a
// template on its storage type S (T itself, or bf16 where T is float) and the
// op dispatches on the storage its activations arrived in.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cpu/workspace.h"
#include "ops/dtype.h"

namespace strata::cpu {

using ops::Act;
using ops::ActIn;
using ops::bf16;

using ops::with_storage;

// Staging, for kernels whose bf16 path runs their float kernel on fp32
// copies (attention and the GEMMs until they read bf16 themselves): widen is
// exact, narrow rounds to nearest even. Both parallel.
void widen(float* dst, const bf16* src, int64_t n);
void narrow(bf16* dst, const float* src, int64_t n);

// What a staged kernel reads and writes in place of activation `a` of n
// elements: a itself where its storage is T; else an fp32 copy in workspace
// slot `Slot` of the kernel `Tag`, filled from a when `in` (an input, or a
// gradient the kernel adds to) and rounded back into a when the Staged goes
// out of scope, for a mutable a (`out`).
template <typename T, int Slot, typename Tag, typename A = Act<T>>
class Staged {
  static constexpr bool kConst = std::is_same_v<A, ActIn<T>>;
  using P = std::conditional_t<kConst, const T*, T*>;

 public:
  Staged(A a, int64_t n, bool in = true) : a_(a), n_(n) {
    if (!a) return;
    if constexpr (std::is_same_v<T, float>)
      if (a.is_bf16()) {
        float* f = workspace<float, Slot, Tag>(size_t(n));
        if (in) widen(f, a.template as<const bf16>(), n);
        p_ = f;
        staged_ = true;
        return;
      }
    p_ = a;
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  ~Staged() {
    if constexpr (std::is_same_v<T, float> && !kConst)
      if (staged_) narrow(a_.template as<bf16>(), p_, n_);
  }
  P get() const { return p_; }

 private:
  A a_;
  int64_t n_;
  P p_ = nullptr;
  bool staged_ = false;
};
template <typename T, int Slot, typename Tag>
using StagedIn = Staged<T, Slot, Tag, ActIn<T>>;

}  // namespace strata::cpu