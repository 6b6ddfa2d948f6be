// The tensor-parallel collectives of the executor, as the conjugate pairs of
// Megatron-LM (unit.h): called by the executor only, never inside a module or
// an op. Without a tp group (or for double models) every call is a no-op.
#pragma once

#include <cstdint>
#include <type_traits>

#include "parallel/comm.h"

namespace strata {

template <typename T>
class TpRegion {
 public:
  explicit TpRegion(Communicator* tp = nullptr) : tp_(tp && tp->size() > 1 ? tp : nullptr) {}
  Communicator* comm() const { return tp_; }
  bool active() const { return tp_ != nullptr; }
  int size() const { return tp_ ? tp_->size() : 1; }
  int rank() const { return tp_ ? tp_->rank() : 0; }

  // reduce_from_tp forward / copy_to_tp backward: the same all-reduce.
  void allreduce(T* buf, int64_t n) {
    if constexpr (std::is_same_v<T, float>)
      if (tp_) tp_->allreduce_sum(buf, n);
  }
  // Started asynchronously; a handle of -1 needs no wait (no tp group).
  int64_t allreduce_async(T* buf, int64_t n) {
    if constexpr (std::is_same_v<T, float>)
      if (tp_) return tp_->allreduce_sum_async(buf, n);
    return -1;
  }
  void wait(int64_t handle) {
    if (tp_ && handle >= 0) tp_->wait(handle);
  }
  void progress() {
    if (tp_) tp_->progress();
  }

 private:
  Communicator* tp_ = nullptr;
};

}  // namespace strata
