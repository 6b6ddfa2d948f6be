// One thread pool for everything: OpenMP. oneDNN (the GEMM library) runs on the
// same OpenMP pool, so no second set of threads competes for the cores.
#pragma once

namespace strata {

// Number of threads parallel regions use. Starts from OMP_NUM_THREADS (or the
// number of cores) and can be changed by a recipe key or --threads.
int num_threads();
void set_num_threads(int n);

// Index of the calling thread inside a parallel region (0 outside).
int thread_index();

}  // namespace strata
