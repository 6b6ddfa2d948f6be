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

// The async all-reduce of buf behind the kernels, with or without polls.
Trial trial(Communicator& comm, std::vector<float>& buf, const std::function<void()>& kernel,
            int kernels, bool polls) {
  comm.barrier();
  Trial tr;
  Timer t;
  const int64_t h = comm.allreduce_sum_async(buf.data(), int64_t(buf.size()));
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
                             int kernels, int repeat) {
  const int64_t n = std::max<int64_t>(1, int64_t(mib * 1024 * 1024 / sizeof(float)));
  std::vector<float> buf(size_t(n), 1.0f);
  std::vector<double> alone;
  for (int r = 0; r < repeat; ++r) {
    comm.barrier();
    Timer t;
    comm.allreduce_sum(buf.data(), n);
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
