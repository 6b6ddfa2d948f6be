// OrderedComm: a communicator that issues every collective of another
// through the process's CollectiveOrder (collective_order.h), on the one
// communication queue, as NcclComm does. The SIMT device's tensor- and
// data-parallel groups run on MPI wrapped in it (use_device_comms), so a
// training run on the CPU checks and traces the same order rule the GPU's
// NCCL communicators follow.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "parallel/collective_order.h"
#include "parallel/comm.h"

namespace strata {

class OrderedComm final : public Communicator {
 public:
  // The SIMT device's one communication queue (any non-host key).
  static constexpr uintptr_t kQueue = 1;

  OrderedComm(std::unique_ptr<Communicator> inner, const std::string& label)
      : inner_(std::move(inner)), id_(order().join(label)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  Communicator& inner() { return *inner_; }

  void allreduce_sum(float* buf, int64_t n) override {
    blocking("allreduce_sum", kQueue, [&] { inner_->allreduce_sum(buf, n); });
  }
  int64_t allreduce_sum_async(float* buf, int64_t n) override {
    return async("allreduce_sum_async", [&] { return inner_->allreduce_sum_async(buf, n); });
  }
  bool bf16_sums() const override { return inner_->bf16_sums(); }
  void allreduce_sum_bf16(uint16_t* buf, int64_t n) override {
    blocking("allreduce_sum_bf16", kQueue, [&] { inner_->allreduce_sum_bf16(buf, n); });
  }
  int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n) override {
    return async("allreduce_sum_bf16_async",
                 [&] { return inner_->allreduce_sum_bf16_async(buf, n); });
  }
  void wait(int64_t handle) override {
    inner_->wait(handle);
    auto it = tickets_.find(handle);
    if (it == tickets_.end()) return;
    order().complete(it->second);
    tickets_.erase(it);
  }
  void progress() override { inner_->progress(); }
  void allgather(const float* in, float* out, int64_t n) override {
    blocking("allgather", kQueue, [&] { inner_->allgather(in, out, n); });
  }
  int64_t allgather_async(const float* in, float* out, int64_t n) override {
    return async("allgather_async", [&] { return inner_->allgather_async(in, out, n); });
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    blocking("reduce_scatter_sum", kQueue, [&] { inner_->reduce_scatter_sum(in, out, n); });
  }
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override {
    return async("reduce_scatter_sum_async",
                 [&] { return inner_->reduce_scatter_sum_async(in, out, n); });
  }
  void broadcast(float* buf, int64_t n, int root) override {
    blocking("broadcast", kQueue, [&] { inner_->broadcast(buf, n, root); });
  }
  void broadcast_bytes(std::string& bytes, int root) override {
    blocking("broadcast_bytes", CollectiveOrder::kHostQueue,
             [&] { inner_->broadcast_bytes(bytes, root); });
  }
  double allreduce_sum(double x) override {
    double r = 0;
    blocking("allreduce_sum_double", CollectiveOrder::kHostQueue,
             [&] { r = inner_->allreduce_sum(x); });
    return r;
  }
  int64_t allreduce_sum(int64_t x) override {
    int64_t r = 0;
    blocking("allreduce_sum_int64", CollectiveOrder::kHostQueue,
             [&] { r = inner_->allreduce_sum(x); });
    return r;
  }
  void barrier() override {
    blocking("barrier", CollectiveOrder::kHostQueue, [&] { inner_->barrier(); });
  }
  [[noreturn]] void abort(const std::string& why) override {
    inner_->abort(why);
    std::abort();  // not reached: the inner abort does not return
  }

 private:
  static CollectiveOrder& order() { return CollectiveOrder::process(); }
  template <typename F>
  void blocking(const char* op, uintptr_t queue, F&& f) {
    const int64_t ticket = order().issue(id_, op, queue, false);
    f();
    order().complete(ticket);
  }
  template <typename F>
  int64_t async(const char* op, F&& f) {
    const int64_t ticket = order().issue(id_, op, kQueue, true);
    const int64_t handle = f();
    tickets_[handle] = ticket;
    return handle;
  }

  std::unique_ptr<Communicator> inner_;
  int id_;
  std::map<int64_t, int64_t> tickets_;  // async handle -> its CollectiveOrder ticket
};

}  // namespace strata
