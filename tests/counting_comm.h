// A communicator that forwards to another and counts the collectives that
// pass through it: which ones run, how many, sync or async, and on how many
// elements. Tests use it to prove which reductions an executor plan issues.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace strata::testing {

class CountingComm : public Communicator {
 public:
  explicit CountingComm(Communicator& inner) : inner_(inner) {}
  struct Counts {
    int allreduce = 0, allreduce_async = 0, wait = 0, allgather = 0, broadcast = 0, scalar = 0;
    int allgather_async = 0, reduce_scatter = 0, reduce_scatter_async = 0;
    int64_t allreduce_elements = 0;
    // Per call of allgather(_async) / reduce_scatter_sum(_async): the count per rank.
    std::vector<int64_t> gathered, scattered;
  };
  const Counts& counts() const { return c_; }
  void reset() {
    c_ = Counts{};
    events_.clear();
  }
  // The order of async starts ('A', handle), waits ('W', handle) and marks
  // ('M', -1) a test adds, e.g. from a model's progress hook after every module.
  struct Event {
    char what;
    int64_t handle;
  };
  const std::vector<Event>& events() const { return events_; }
  void mark() { events_.push_back({'M', -1}); }
  // For each async start, how many marks came before its wait (-1: never waited).
  std::vector<int> marks_before_wait() const {
    std::vector<int> r;
    for (size_t a = 0; a < events_.size(); ++a) {
      if (events_[a].what != 'A') continue;
      int marks = 0, got = -1;
      for (size_t b = a + 1; b < events_.size(); ++b) {
        if (events_[b].what == 'M') ++marks;
        if (events_[b].what == 'W' && events_[b].handle == events_[a].handle) {
          got = marks;
          break;
        }
      }
      r.push_back(got);
    }
    return r;
  }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return "counting(" + inner_.name() + ")"; }
  void allreduce_sum(float* buf, int64_t n) override {
    ++c_.allreduce;
    c_.allreduce_elements += n;
    inner_.allreduce_sum(buf, n);
  }
  int64_t allreduce_sum_async(float* buf, int64_t n) override {
    ++c_.allreduce_async;
    c_.allreduce_elements += n;
    const int64_t h = inner_.allreduce_sum_async(buf, n);
    events_.push_back({'A', h});
    return h;
  }
  // false: report no bf16 sums (the caller's fp32 staging path runs).
  bool bf16_wire = true;
  bool bf16_sums() const override { return bf16_wire && inner_.bf16_sums(); }
  void allreduce_sum_bf16(uint16_t* buf, int64_t n) override {
    ++c_.allreduce;
    c_.allreduce_elements += n;
    inner_.allreduce_sum_bf16(buf, n);
  }
  int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n) override {
    ++c_.allreduce_async;
    c_.allreduce_elements += n;
    const int64_t h = inner_.allreduce_sum_bf16_async(buf, n);
    events_.push_back({'A', h});
    return h;
  }
  void wait(int64_t handle) override {
    ++c_.wait;
    events_.push_back({'W', handle});
    inner_.wait(handle);
  }
  void progress() override { inner_.progress(); }
  void allgather(const float* in, float* out, int64_t n) override {
    ++c_.allgather;
    c_.gathered.push_back(n);
    inner_.allgather(in, out, n);
  }
  int64_t allgather_async(const float* in, float* out, int64_t n) override {
    ++c_.allgather_async;
    c_.gathered.push_back(n);
    const int64_t h = inner_.allgather_async(in, out, n);
    events_.push_back({'A', h});
    return h;
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    ++c_.reduce_scatter;
    c_.scattered.push_back(n);
    inner_.reduce_scatter_sum(in, out, n);
  }
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override {
    ++c_.reduce_scatter_async;
    c_.scattered.push_back(n);
    const int64_t h = inner_.reduce_scatter_sum_async(in, out, n);
    events_.push_back({'A', h});
    return h;
  }
  void broadcast(float* buf, int64_t n, int root) override {
    ++c_.broadcast;
    inner_.broadcast(buf, n, root);
  }
  void broadcast_bytes(std::string& bytes, int root) override {
    ++c_.broadcast;
    inner_.broadcast_bytes(bytes, root);
  }
  double allreduce_sum(double x) override {
    ++c_.scalar;
    return inner_.allreduce_sum(x);
  }
  int64_t allreduce_sum(int64_t x) override {
    ++c_.scalar;
    return inner_.allreduce_sum(x);
  }
  void barrier() override { inner_.barrier(); }
  [[noreturn]] void abort(const std::string& why) override {
    inner_.abort(why);
    std::abort();
  }

 private:
  Communicator& inner_;
  Counts c_;
  std::vector<Event> events_;
};

}  // namespace strata::testing
