// Element types of activations. A backend's parameters, their gradients, the
// optimizer's state and the statistics ops save (RMSNorm's rstd, attention's
// and the head's log-sum-exp) are its type T (float, or double for the
// gradient checks). Activations and their gradients (the streams, normed
// inputs, q|k|v, attention outputs, MLP states and the gradients of all of
// these) may instead be stored in bf16 where T is float: half the bytes, and
// what tensor cores and AMX read. Kernels load bf16, compute in fp32 and
// round to nearest even when they store.
//
// An op receives activations as Act<T> (Act<const T> for inputs): a pointer
// and its element type. A plain T* converts to one implicitly (storage T), so
// callers with fp32 activations pass their pointers as before; an Act
// converts back to a T* only when its storage is T (a kernel that has no bf16
// path yet says so instead of reading bf16 bits as floats). Pointer
// arithmetic on an Act counts elements of its own type.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/error.h"

namespace strata::ops {

enum class Dtype : uint8_t { F32, F64, BF16 };

inline size_t dtype_size(Dtype d) { return d == Dtype::F64 ? 8 : d == Dtype::F32 ? 4 : 2; }
inline const char* dtype_name(Dtype d) {
  return d == Dtype::F64 ? "fp64" : d == Dtype::F32 ? "fp32" : "bf16";
}

// bfloat16 in host memory: the upper half of an IEEE float. Converts from
// float by rounding to nearest even (a NaN stays a quiet NaN, infinities
// stay), to float exactly; both implicitly, so kernels written for T compile
// for bf16 storage with T arithmetic.
struct bf16 {
  uint16_t bits;  // trivial: value-initialisation (bf16{}, vectors) zeroes it
  bf16() = default;
  bf16(float f) : bits(round(f)) {}  // NOLINT: implicit by design (see above)
  operator float() const { return bf16_widen_bits(bits); }
  static bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  static uint16_t round(float f) { return bf16_round_bits(f); }
};
static_assert(sizeof(bf16) == 2);

template <typename E>
constexpr Dtype dtype_of() {
  using B = std::remove_const_t<E>;
  static_assert(std::is_same_v<B, float> || std::is_same_v<B, double> || std::is_same_v<B, bf16>);
  return std::is_same_v<B, float>    ? Dtype::F32
         : std::is_same_v<B, double> ? Dtype::F64
                                     : Dtype::BF16;
}

// An activation of a Backend<T>: T = float or double, const-qualified for
// inputs. Storage is T's own type, or bf16 where T is float.
template <typename T>
class Act {
  using Base = std::remove_const_t<T>;
  static constexpr bool kConst = std::is_const_v<T>;
  using Raw = std::conditional_t<kConst, const void, void>;
  using Bytes = std::conditional_t<kConst, const char, char>;
  using Half = std::conditional_t<kConst, const bf16, bf16>;
  static_assert(std::is_same_v<Base, float> || std::is_same_v<Base, double>);

 public:
  static constexpr Dtype kNative = dtype_of<Base>();

  Act() = default;
  Act(std::nullptr_t) {}                    // NOLINT: implicit, as a pointer
  Act(T* p) : p_(p), dt_(kNative) {}        // NOLINT
  Act(Half* p) : p_(p), dt_(Dtype::BF16) {  // NOLINT
    static_assert(std::is_same_v<Base, float>, "bf16 storage is for float backends");
  }
  Act(Raw* p, Dtype dt) : p_(p), dt_(dt) {
    STRATA_CHECK(dt == kNative || (dt == Dtype::BF16 && kNative == Dtype::F32), "an activation of ",
                 dtype_name(dt), " on a backend of ", dtype_name(kNative));
  }
  // A mutable activation is also an input.
  template <typename U>
  requires(kConst&& std::is_same_v<U, Base>) Act(const Act<U>& o)
      : p_(o.raw()), dt_(o.dtype()) {}  // NOLINT

  // The same element of the same storage (a mutable and a const view alike).
  template <typename U>
  bool operator==(const Act<U>& o) const {
    return p_ == o.raw() && (!p_ || dt_ == o.dtype());
  }

  Dtype dtype() const { return dt_; }
  bool is_bf16() const { return dt_ == Dtype::BF16; }
  bool native() const { return dt_ == kNative; }
  Raw* raw() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  Act operator+(int64_t n) const {
    return p_ ? Act(static_cast<Bytes*>(p_) + n * int64_t(dtype_size(dt_)), dt_) : Act();
  }

  // The pointer as storage E (T's type or bf16); throws if it holds another.
  template <typename E>
  E* as() const {
    static_assert(std::is_const_v<E> == kConst || std::is_const_v<E>);
    STRATA_CHECK(!p_ || dt_ == dtype_of<E>(), "an activation of ", dtype_name(dt_), " read as ",
                 dtype_name(dtype_of<E>()));
    return static_cast<E*>(p_);
  }
  // Storage T only: a kernel without a bf16 path refuses bf16 here.
  operator T*() const {  // NOLINT
    STRATA_CHECK(!p_ || dt_ == kNative,
                 "this kernel has no bf16-storage path (an activation of bf16 reached it)");
    return static_cast<T*>(p_);
  }

 private:
  Raw* p_ = nullptr;
  Dtype dt_ = kNative;
};

// An input activation.
template <typename T>
using ActIn = Act<const T>;

// The storage all non-null activations of one op call share (T's own type if
// all are null); throws if two differ.
template <typename... A>
Dtype common_storage(Dtype native, const A&... acts) {
  Dtype d = native;
  bool seen = false;
  auto one = [&](const auto& a) {
    if (!a) return;
    STRATA_CHECK(!seen || a.dtype() == d, "an op's activations mix ", dtype_name(d), " and ",
                 dtype_name(a.dtype()));
    d = a.dtype();
    seen = true;
  };
  (one(acts), ...);
  return d;
}

// f(S{}) with S = bf16 where the call's non-null activations are bf16 (T =
// float only), T otherwise; returns f's result. Throws if they mix. How a
// kernel dispatches on its activations' storage.
template <typename T, typename F, typename... A>
decltype(auto) with_storage(F&& f, const A&... acts) {
  const Dtype d = common_storage(Act<T>::kNative, acts...);
  if constexpr (std::is_same_v<T, float>)
    if (d == Dtype::BF16) return f(bf16{});
  return f(T{});
}

// f(S{}, KS{}) for the generation ops with a KV cache (ops.def): S the
// storage of `acts` (as with_storage), KS the cache's (kc and vc): S's, or
// bf16 beside fp32 activations (a bf16 KV cache). Throws on another mix.
template <typename T, typename F, typename... A>
void with_cache_storage(F&& f, const Act<const T>& kc, const Act<const T>& vc, const A&... acts) {
  const Dtype c = common_storage(Act<T>::kNative, kc, vc);
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const Dtype sd = std::is_same_v<S, bf16> ? Dtype::BF16 : Act<T>::kNative;
        if constexpr (std::is_same_v<S, float>) {
          if (c == Dtype::BF16) return f(s, bf16{});
        }
        STRATA_CHECK(c == sd, "a KV cache stored in ", dtype_name(c), " beside activations in ",
                     dtype_name(sd), ": the cache is stored as they are, or in bf16 beside fp32");
        return f(s, s);
      },
      acts...);
}

}  // namespace strata::ops
