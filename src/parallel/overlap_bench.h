// How much of an asynchronous all-reduce stays exposed behind compute, with
// and without progress polls between the compute kernels (`strata bench
// comm`). On the CPU only the calling thread drives a non-blocking MPI
// collective (no progress thread; the hang watchdog's 10 calls a second on its
// own communicator hardly advance it), so without polls most
// of its work happens in the final wait. Collective: every rank of `comm`
// calls these with the same arguments; times are means over the ranks.
#pragma once

#include <functional>

#include "parallel/comm.h"

namespace strata {

// The mean time of one call of `kernel` (after 3 warm-up calls, 10 timed).
double time_kernel(Communicator& comm, const std::function<void()>& kernel);

struct OverlapTimes {                // seconds, medians over the trials
  double alone = 0;                  // the all-reduce alone (blocking)
  double compute = 0;                // the kernels behind the async all-reduce, polls excluded
  double exposed_without_polls = 0;  // the final wait
  double exposed_with_polls = 0;     // the final wait plus the polls themselves
  double polls = 0;                  // the polls alone
};

// An all-reduce of `mib` MiB of fp32 values alone, then started
// asynchronously before `kernels` calls of `kernel`, with and without
// comm.progress() after each; `repeat` trials of each. `bf16`: the same
// number of values as bf16 (allreduce_sum_bf16: half the bytes).
OverlapTimes measure_overlap(Communicator& comm, double mib, const std::function<void()>& kernel,
                             int kernels, int repeat, bool bf16 = false);

}  // namespace strata
