// All-reduce exposure behind compute (overlap_bench.h).
#include "parallel/overlap_bench.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"

namespace strata {
namespace {

struct Trial {
  double compute_s = 0, wait_s = 0, poll_s = 0;
};

double mean(Communicator& comm, double v) { return comm.allreduce_sum(v) / comm.size(); }

// The all-reduce under test: n fp32 values, or the same n as bf16 (half the bytes).
struct Message {
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  void run(Communicator& comm) {
    if (!b16.empty()) return comm.allreduce_sum_bf16(b16.data(), int64_t(b16.size()));
    comm.allreduce_sum(f32.data(), int64_t(f32.size()));
  }
  int64_t start(Communicator& comm) {
    if (!b16.empty()) return comm.allreduce_sum_bf16_async(b16.data(), int64_t(b16.size()));
    return comm.allreduce_sum_async(f32.data(), int64_t(f32.size()));
  }
};

// The async all-reduce of buf behind the kernels, with or without polls.
Trial trial(Communicator& comm, Message& buf, const std::function<void()>& kernel, int kernels,
            bool polls) {
  comm.barrier();
  Trial tr;
  Timer t;
  const int64_t h = buf.start(comm);
  for (int k = 0; k < kernels; ++k) {
    kernel();
    if (polls) {
      Timer p;
      comm.progress();
      tr.poll_s += p.seconds();
    }
  }
  tr.compute_s = t.seconds() - tr.poll_s;
  Timer wt;
  comm.wait(h);
  tr.wait_s = wt.seconds();
  return Trial{mean(comm, tr.compute_s), mean(comm, tr.wait_s), mean(comm, tr.poll_s)};
}

}  // namespace

double time_kernel(Communicator& comm, const std::function<void()>& kernel) {
  for (int i = 0; i < 3; ++i) kernel();  // warm-up
  Timer calib;
  for (int i = 0; i < 10; ++i) kernel();
  double per_kernel = calib.seconds() / 10;
  per_kernel = comm.allreduce_sum(per_kernel) / comm.size();
  return per_kernel;
}

OverlapTimes measure_overlap(Communicator& comm, double mib, const std::function<void()>& kernel,
                             int kernels, int repeat, bool bf16) {
  const int64_t n = std::max<int64_t>(1, int64_t(mib * 1024 * 1024 / sizeof(float)));
  Message buf;
  if (bf16)
    buf.b16.assign(size_t(n), uint16_t(0x3F80));  // 1.0
  else
    buf.f32.assign(size_t(n), 1.0f);
  std::vector<double> alone;
  for (int r = 0; r < repeat; ++r) {
    comm.barrier();
    Timer t;
    buf.run(comm);
    alone.push_back(mean(comm, t.seconds()));
  }
  std::vector<double> compute, exposed_off, exposed_on, polls;
  for (int r = 0; r < repeat; ++r) {
    const Trial off = trial(comm, buf, kernel, kernels, false);
    const Trial on = trial(comm, buf, kernel, kernels, true);
    compute.push_back(off.compute_s);
    exposed_off.push_back(off.wait_s);
    exposed_on.push_back(on.wait_s + on.poll_s);
    polls.push_back(on.poll_s);
  }
  return {median(alone), median(compute), median(exposed_off), median(exposed_on), median(polls)};
}

}  // namespace strata
