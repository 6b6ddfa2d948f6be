// Aligned, owned, zero-initialised storage. Parameters, gradients, optimizer
// moments and activations each live in one such allocation, carved into named
// tensors by offset (see model/params.h); nothing is allocated on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata {

// Raw aligned allocation (64-byte aligned; large blocks are 2 MiB aligned and
// advised for transparent huge pages). Memory is zeroed and touched once here so
// the hot path never page-faults.
void* aligned_alloc_zeroed(size_t bytes);
void aligned_free(void* p);

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr_(std::move(o.ptr_)), n_(o.n_) { o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    ptr_ = std::move(o.ptr_);
    n_ = o.n_;
    o.n_ = 0;
    return *this;
  }

  // Reallocates (and zeroes) when n differs from the current size.
  void resize(size_t n) {
    if (n == n_ && ptr_) return;
    ptr_.reset(n ? static_cast<T*>(aligned_alloc_zeroed(n * sizeof(T))) : nullptr);
    n_ = n;
  }
  // Grows (never shrinks); contents are not preserved.
  void reserve(size_t n) {
    if (n > n_) resize(n);
  }

  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return ptr_.get()[i]; }
  const T& operator[](size_t i) const { return ptr_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { aligned_free(p); }
  };
  std::unique_ptr<T, Free> ptr_;
  size_t n_ = 0;
};

}  // namespace strata
