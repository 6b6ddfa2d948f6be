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

// Processes of this job on this machine, from the launcher's environment
// (Open MPI, MPICH, SLURM, PMIx); 1 when run alone.
int processes_on_this_node();

// Called first in main (strata's and the tests'), before anything starts a
// thread. On a machine that is busy when the process starts (other runnable
// threads plus ours exceed the CPUs, in three looks at /proc/loadavg 2 ms
// apart), OpenMP threads wait passively: the process re-executes itself with
// OMP_WAIT_POLICY=passive (libgomp reads it only at start), because spinning
// threads on a shared core make every parallel region wait for a descheduled
// peer (25-300x slower). An idle machine keeps libgomp's default short spin,
// which small regions need (passive waiting alone is up to 20x slower on
// them). OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user are kept. Under a
// launcher with several processes on the node and no OMP_NUM_THREADS, each
// gets its share of the CPUs it may run on (at least one thread).
void settle_threads(char** argv);

// How OpenMP threads wait, and why: for `strata info` and run logs.
std::string wait_policy_summary();

// The decision of settle_threads, for tests: `others` runnable threads
// besides the caller, `mine` the threads this process will run, `cpus` the
// CPUs online. (The load average is not asked: this machine's own earlier
// work, an oversubscribed MPI test say, keeps it high for minutes.)
bool machine_busy(int others, int mine, int cpus);

}  // namespace strata
