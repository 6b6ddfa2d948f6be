#include "core/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

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

int processes_on_this_node() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE",
                        "SLURM_NTASKS_PER_NODE"}) {
    const char* s = std::getenv(v);
    if (s && *s) {
      const int n = std::atoi(s);
      if (n >= 1) return n;
    }
  }
  return 1;
}

bool machine_busy(int others, int mine, int cpus) {
  return others > 0 && others + mine > std::max(cpus, 1);
}

namespace {

std::string g_wait = "spin, then sleep (libgomp's default; the machine was idle at start)";

// CPUs this process may run on (its affinity mask).
int cpus_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return int(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

void settle_threads(char** argv) {
  const int local = processes_on_this_node();
  const char* user_threads = std::getenv("OMP_NUM_THREADS");
  const int mine = user_threads && std::atoi(user_threads) > 0
                       ? std::atoi(user_threads)
                       : std::max(1, cpus_allowed() / local);
  if (const char* decided = std::getenv("STRATA_WAIT_DECIDED")) {
    g_wait = decided;
    unsetenv("STRATA_WAIT_DECIDED");  // a strata this one starts decides for itself
  } else if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) {
    g_wait = "as OMP_WAIT_POLICY / GOMP_SPINCOUNT say";
  } else {
    // /proc/loadavg: "0.52 0.40 0.31 3/512 12345": the runnable threads now
    // (this one among them). Three looks 2 ms apart, the fewest counted: a
    // kernel worker that runs for a moment is not a busy machine, another
    // process's spinning threads are. STRATA_LOADAVG names another file (tests).
    const char* path = std::getenv("STRATA_LOADAVG");
    int running = 1 << 20;
    double load1 = 0;
    for (int look = 0; look < 3; ++look) {
      if (look) usleep(2000);
      std::ifstream f(path && *path ? path : "/proc/loadavg");
      double l5 = 0, l15 = 0;
      int r = 0, total = 0;
      char slash = 0;
      if (!(f >> load1 >> l5 >> l15 >> r >> slash >> total)) {
        running = 1;
        break;
      }
      running = std::min(running, r);
    }
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (machine_busy(running - 1, mine, int(cpus))) {
      char why[160];
      std::snprintf(why, sizeof why,
                    "passive (the machine was busy at start: %d other runnable threads, load "
                    "%.2f, on %ld CPUs)",
                    running - 1, load1, cpus);
      setenv("OMP_WAIT_POLICY", "passive", 1);
      setenv("STRATA_WAIT_DECIDED", why, 1);
      // The binary's own path, read from the link (under qemu-user the link
      // reads as the emulated program's path, not the emulator's).
      char self[4096];
      const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      if (n > 0) {
        self[n] = 0;
        execv(self, argv);
      }
      unsetenv("OMP_WAIT_POLICY");  // no exec: carry on as we are
      unsetenv("STRATA_WAIT_DECIDED");
    }
  }
  if (local > 1 && !user_threads) omp_set_num_threads(mine);
}

std::string wait_policy_summary() { return g_wait; }

}  // namespace strata
