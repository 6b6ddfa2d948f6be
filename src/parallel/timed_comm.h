// A communicator that forwards to another and adds up the wall time spent in
// its calls: the communication time that was not hidden behind compute (a
// blocking collective, or the part of an async one that wait() still had to
// wait for). The trainer reports step time as compute + this.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/timer.h"
#include "parallel/comm.h"

namespace strata {

class TimedComm : public Communicator {
 public:
  explicit TimedComm(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  double seconds() const { return seconds_; }
  // Of which: in wait() (the tail of async collectives still running when
  // their result is needed) and in progress() (polls that advance them).
  double wait_seconds() const { return wait_seconds_; }
  double progress_seconds() const { return progress_seconds_; }
  void reset() { seconds_ = wait_seconds_ = progress_seconds_ = 0; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void allreduce_sum(float* buf, int64_t n) override {
    timed([&] { inner_->allreduce_sum(buf, n); });
  }
  int64_t allreduce_sum_async(float* buf, int64_t n) override {
    int64_t h = 0;
    timed([&] { h = inner_->allreduce_sum_async(buf, n); });
    return h;
  }
  bool bf16_sums() const override { return inner_->bf16_sums(); }
  void allreduce_sum_bf16(uint16_t* buf, int64_t n) override {
    timed([&] { inner_->allreduce_sum_bf16(buf, n); });
  }
  int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n) override {
    int64_t h = 0;
    timed([&] { h = inner_->allreduce_sum_bf16_async(buf, n); });
    return h;
  }
  void wait(int64_t handle) override {
    const double before = seconds_;
    timed([&] { inner_->wait(handle); });
    wait_seconds_ += seconds_ - before;
  }
  void progress() override {
    const double before = seconds_;
    timed([&] { inner_->progress(); });
    progress_seconds_ += seconds_ - before;
  }
  void allgather(const float* in, float* out, int64_t n) override {
    timed([&] { inner_->allgather(in, out, n); });
  }
  int64_t allgather_async(const float* in, float* out, int64_t n) override {
    int64_t h = 0;
    timed([&] { h = inner_->allgather_async(in, out, n); });
    return h;
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    timed([&] { inner_->reduce_scatter_sum(in, out, n); });
  }
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override {
    int64_t h = 0;
    timed([&] { h = inner_->reduce_scatter_sum_async(in, out, n); });
    return h;
  }
  void broadcast(float* buf, int64_t n, int root) override {
    timed([&] { inner_->broadcast(buf, n, root); });
  }
  void broadcast_bytes(std::string& bytes, int root) override {
    timed([&] { inner_->broadcast_bytes(bytes, root); });
  }
  double allreduce_sum(double x) override {
    double r = 0;
    timed([&] { r = inner_->allreduce_sum(x); });
    return r;
  }
  int64_t allreduce_sum(int64_t x) override {
    int64_t r = 0;
    timed([&] { r = inner_->allreduce_sum(x); });
    return r;
  }
  void barrier() override {
    timed([&] { inner_->barrier(); });
  }
  [[noreturn]] void abort(const std::string& why) override {
    inner_->abort(why);
    std::abort();  // not reached: the inner abort does not return
  }

 private:
  template <typename F>
  void timed(F&& f) {
    Timer t;
    f();
    seconds_ += t.seconds();
  }
  std::unique_ptr<Communicator> inner_;
  double seconds_ = 0, wait_seconds_ = 0, progress_seconds_ = 0;
};

}  // namespace strata
