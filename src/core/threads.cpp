#include "core/threads.h"

#include <omp.h>

#include <algorithm>

#include "core/error.h"

namespace strata {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  STRATA_CHECK(n >= 1 && n <= max_threads(), "thread count must be in [1, ", max_threads(),
               "], got ", n);
  omp_set_num_threads(n);
}

int max_threads() { return std::max(16, 8 * omp_get_num_procs()); }

std::string thread_count_problem(long long n) {
  if (n >= 0 && n <= max_threads()) return "";
  if (n < 0) return cat("must be >= 0 (0: OMP_NUM_THREADS or all cores), got ", n);
  return cat("must be at most ", max_threads(), " (8 per CPU, ", omp_get_num_procs(),
             " CPUs here), got ", n);
}

int thread_index() { return omp_get_thread_num(); }

}  // namespace strata
