// Deterministic parallel reductions: each thread sums a fixed contiguous range
// and the partial sums are combined in thread order, so a result depends only
// on the thread count (OpenMP's reduction clause leaves the order unspecified,
// which would break bit-exact resume).
#pragma once

#include <omp.h>

#include <cstdint>
#include <vector>

namespace strata::cpu {

// f(lo, hi) returns the sum over [lo, hi): one call per thread on a fixed
// contiguous range, the partial sums combined in thread order.
template <typename F>
double parallel_sum_ranges(int64_t n, F&& f) {
  const int nt = omp_get_max_threads();
  std::vector<double> partial(nt, 0.0);
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    partial[t] = f(n * t / team, n * (t + 1) / team);
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// Sum of f(i) for i in [0, n), accumulated in double, in index order within
// each thread's range.
template <typename F>
double parallel_sum(int64_t n, F&& f) {
  return parallel_sum_ranges(n, [&](int64_t lo, int64_t hi) {
    double s = 0;
    for (int64_t i = lo; i < hi; ++i) s += f(i);
    return s;
  });
}

}  // namespace strata::cpu
