// The tensor-parallel collectives of the executor, as the conjugate pairs of
// Megatron-LM (unit.h): called by the executor only, never inside a module or
// an op. Without a tp group (or for double models) every call is a no-op.
//
// Activations stored in bf16 (Model::set_activation_storage) go over the
// wire as bf16 where the communicator sums bf16 (MPI, NCCL: half an fp32
// message's bytes; each addition rounds to bf16, as Megatron-LM's bf16
// all-reduces do). Otherwise they are summed in fp32: widened into a staging
// buffer, reduced there, and rounded back once the reduction is done (at
// once, or in wait() for an asynchronous one).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "ops/backend.h"
#include "parallel/comm.h"

namespace strata {

template <typename T>
class TpRegion {
 public:
  // `be` converts bf16 activations to and from the staging buffers.
  explicit TpRegion(Communicator* tp = nullptr, ops::Backend<T>* be = nullptr)
      : tp_(tp && tp->size() > 1 ? tp : nullptr), be_(be) {}
  Communicator* comm() const { return tp_; }
  bool active() const { return tp_ != nullptr; }
  int size() const { return tp_ ? tp_->size() : 1; }
  int rank() const { return tp_ ? tp_->rank() : 0; }

  // reduce_from_tp forward / copy_to_tp backward: the same all-reduce.
  void allreduce(ops::Act<T> buf, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (!tp_) return;
      if (buf.native()) return tp_->allreduce_sum(buf, n);
      if (tp_->bf16_sums()) return tp_->allreduce_sum_bf16(static_cast<uint16_t*>(buf.raw()), n);
      Staging& s = stage(buf, n);
      tp_->allreduce_sum(s.f32.data(), n);
      finish(s);
    }
  }
  // Started asynchronously; a handle of -1 needs no wait (no tp group).
  int64_t allreduce_async(ops::Act<T> buf, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (!tp_) return -1;
      if (buf.native()) return tp_->allreduce_sum_async(buf, n);
      if (tp_->bf16_sums())
        return tp_->allreduce_sum_bf16_async(static_cast<uint16_t*>(buf.raw()), n);
      Staging& s = stage(buf, n);
      s.handle = tp_->allreduce_sum_async(s.f32.data(), n);
      return s.handle;
    }
    return -1;
  }
  void wait(int64_t handle) {
    if (!tp_ || handle < 0) return;
    tp_->wait(handle);
    for (Staging& s : staged_)
      if (s.busy && s.handle == handle) finish(s);
  }
  void progress() {
    if (tp_) tp_->progress();
  }

 private:
  // An fp32 copy of a bf16 activation being reduced.
  struct Staging {
    ops::DeviceBuffer<T> f32;
    ops::Act<T> dst;
    int64_t n = 0, handle = -1;
    bool busy = false;
  };
  Staging& stage(ops::Act<T> buf, int64_t n) {
    STRATA_CHECK(be_, "a tensor-parallel reduction of bf16 activations needs the backend");
    Staging* s = nullptr;
    for (Staging& c : staged_)  // a free buffer, the largest first served
      if (!c.busy && (!s || c.f32.size() > s->f32.size())) s = &c;
    if (!s) s = &staged_.emplace_back();
    if (s->f32.size() < size_t(n)) s->f32 = ops::DeviceBuffer<T>(be_, size_t(n));
    be_->copy(s->f32.data(), buf, n);
    s->dst = buf;
    s->n = n;
    s->handle = -1;
    s->busy = true;
    return *s;
  }
  void finish(Staging& s) {
    be_->copy(s.dst, s.f32.data(), s.n);
    s.busy = false;
  }

  Communicator* tp_ = nullptr;
  ops::Backend<T>* be_ = nullptr;
  std::vector<Staging> staged_;  // (a vector of stable size in steady state)
};

}  // namespace strata
