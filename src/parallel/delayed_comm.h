// A communicator that forwards to another and models a link latency: every
// collective completes no earlier than `delay` after it started. A blocking
// collective returns at max(its real end, start + delay); an async one keeps
// its deadline, and wait() returns at max(its real end, deadline), so the
// latency of an all-reduce started before some compute is hidden behind that
// compute, as on a real link. Benchmarks only (bench generate
// --link-delay-us): no qdisc that adds latency exists on the machines this
// was written on (no tc netem), so the latency part of a slow link is modelled
// here while its bandwidth part can be real (tbf).
#pragma once

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "parallel/comm.h"

namespace strata {

class DelayedComm : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;
  DelayedComm(Communicator& inner, std::chrono::nanoseconds delay) : inner_(inner), delay_(delay) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  void allreduce_sum(float* buf, int64_t n) override {
    delayed([&] { inner_.allreduce_sum(buf, n); });
  }
  int64_t allreduce_sum_async(float* buf, int64_t n) override {
    return deferred(inner_.allreduce_sum_async(buf, n));
  }
  bool bf16_sums() const override { return inner_.bf16_sums(); }
  void allreduce_sum_bf16(uint16_t* buf, int64_t n) override {
    delayed([&] { inner_.allreduce_sum_bf16(buf, n); });
  }
  int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n) override {
    return deferred(inner_.allreduce_sum_bf16_async(buf, n));
  }
  void wait(int64_t handle) override {
    inner_.wait(handle);
    const auto it = deadline_.find(handle);
    if (it == deadline_.end()) return;
    spin_until(it->second);
    deadline_.erase(it);
  }
  void progress() override { inner_.progress(); }
  void allgather(const float* in, float* out, int64_t n) override {
    delayed([&] { inner_.allgather(in, out, n); });
  }
  int64_t allgather_async(const float* in, float* out, int64_t n) override {
    return deferred(inner_.allgather_async(in, out, n));
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    delayed([&] { inner_.reduce_scatter_sum(in, out, n); });
  }
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override {
    return deferred(inner_.reduce_scatter_sum_async(in, out, n));
  }
  void broadcast(float* buf, int64_t n, int root) override {
    delayed([&] { inner_.broadcast(buf, n, root); });
  }
  void broadcast_bytes(std::string& bytes, int root) override {
    delayed([&] { inner_.broadcast_bytes(bytes, root); });
  }
  double allreduce_sum(double x) override {
    double r = 0;
    delayed([&] { r = inner_.allreduce_sum(x); });
    return r;
  }
  int64_t allreduce_sum(int64_t x) override {
    int64_t r = 0;
    delayed([&] { r = inner_.allreduce_sum(x); });
    return r;
  }
  void barrier() override {
    delayed([&] { inner_.barrier(); });
  }
  [[noreturn]] void abort(const std::string& why) override {
    inner_.abort(why);
    std::abort();  // not reached: the inner abort does not return
  }

 private:
  template <typename F>
  void delayed(F&& f) {
    const Clock::time_point deadline = Clock::now() + delay_;
    f();
    spin_until(deadline);
  }
  // An async collective just started: wait() returns no earlier than the
  // delay after now.
  int64_t deferred(int64_t handle) {
    deadline_[handle] = Clock::now() + delay_;
    return handle;
  }
  // Busy-waits, as a polling MPI wait does (a sleep would free the core).
  static void spin_until(Clock::time_point t) {
    while (Clock::now() < t) {
    }
  }
  Communicator& inner_;
  std::chrono::nanoseconds delay_;
  std::map<int64_t, Clock::time_point> deadline_;
};

}  // namespace strata
