// Scratch memory for kernels: grown on first use, then reused, so the hot path
// never allocates. One buffer per (kernel, element type, slot).
#pragma once

#include <cstddef>

#include "core/arena.h"

namespace strata::cpu {

template <typename T, int Slot, typename Tag>
T* workspace(size_t n) {
  static Buffer<T> buf;
  buf.reserve(n);
  return buf.data();
}

}  // namespace strata::cpu
