// One thread pool for everything: OpenMP. oneDNN (the GEMM library) runs on the
// same OpenMP pool, so no second set of threads competes for the cores.
#pragma once

#include <string>

namespace strata {

// Number of threads parallel regions use. Starts from OMP_NUM_THREADS (or the
// number of cores) and can be changed by a recipe key or --threads.
int num_threads();
void set_num_threads(int n);  // 1..max_threads()

// The most threads a thread count may ask for: 8 per CPU this process may run
// on, and at least 16. More only oversubscribes the cores, and far more makes
// the OpenMP runtime fail to create its threads (100000 crashed in libgomp).
int max_threads();
// "" when n (a count given by the user: 0 means the default) is in
// [0, max_threads()], else what is wrong with it.
std::string thread_count_problem(long long n);

// Index of the calling thread inside a parallel region (0 outside).
int thread_index();

}  // namespace strata
