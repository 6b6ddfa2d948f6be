#include "core/threads.h"

#include <omp.h>

#include "core/error.h"

namespace strata {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  STRATA_CHECK(n >= 1, "thread count must be >= 1, got ", n);
  omp_set_num_threads(n);
}

int thread_index() { return omp_get_thread_num(); }

}  // namespace strata
