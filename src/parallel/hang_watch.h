// The collective timeout: a process whose collective waits longer than
// `collective_timeout()` seconds ends the job with one line naming the
// collective and the rank(s) it waited for, instead of waiting forever for a
// rank that is stopped, hung or busy elsewhere.
//
// How it works (under MPI, more than one process):
//   - The communicators (MpiComm, NcclComm) bracket every blocking wait (a
//     blocking collective, wait() on an async one, a NCCL stream sync) with a
//     WaitGuard on the main thread. The guard only records, under a mutex,
//     which collective of which group is waiting and since when: a few tens of
//     nanoseconds; the collective itself is the library's own blocking call,
//     as fast as before.
//   - A watchdog thread (the process's only other MPI caller: MPI is
//     initialised with MPI_THREAD_MULTIPLE) wakes every 100 ms. It answers
//     the other ranks' status queries on a communicator of its own (a
//     duplicate of the world), and when this process's wait passes the
//     timeout it asks every other rank where it is (2 s for the answers): in
//     the same collective, in another one (which), busy outside collectives,
//     just resumed from a stop, or silent (stopped, hung, dead). It prints
//       strata: error: rank 0: all-reduce #57 of the tp group waited 30 s for
//       rank 1, which does not answer (stopped, hung or dead); ending the job ...
//     (naming the group's members that are not there, then any other rank
//     that does not answer), tells the other ranks it is ending the job, and
//     calls MPI_Abort. A rank asked by a reporting rank holds back its own
//     report for a while, of two reporting at once the lower one speaks, and
//     a wait that completes while asking is not reported: the job prints one
//     line.
//   - A stop signal (mpirun's SIGTERM after a rank died) that comes while
//     training waits in a collective: the watchdog asks the ranks (0.7 s) and
//     names the ones that do not answer, in one line.
//   - Timeout 0 turns the watch off. Alone (no MPI) there is nothing to wait for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// The default: 30 minutes. Long on purpose: rank 0 alone prepares a missing
// dataset, writes checkpoints and evaluates while the other ranks wait in a
// collective (docs/distributed.md, "Hung and dead ranks").
inline constexpr double kDefaultCollectiveTimeout = 1800;

// The timeout in seconds (0: none). Precedence: a value `given` explicitly
// (the recipe's parallelism.collective_timeout, --set), then the environment
// variable STRATA_COLLECTIVE_TIMEOUT, then `seconds` (the default). Throws
// strata::Error for a negative or non-numeric value or environment variable.
void set_collective_timeout(double seconds, bool given);
double collective_timeout();

// A group of processes as the watch knows it: its name in messages ("tp
// group") and the world ranks of its members, in group-rank order.
struct WatchedGroup {
  std::string label;
  std::vector<int> world_ranks;
};

// Marks a blocking wait of the main thread: `kind` ("all-reduce") number
// `seq` of `group`. Both must outlive the guard (a string literal, the
// communicator's group).
class WaitGuard {
 public:
  WaitGuard(const WatchedGroup& group, const char* kind, int64_t seq);
  ~WaitGuard();
  WaitGuard(const WaitGuard&) = delete;
  WaitGuard& operator=(const WaitGuard&) = delete;
};

// This process's rank in MPI_COMM_WORLD (0 without MPI).
int watch_world_rank();

// Starts the watchdog (collective over MPI_COMM_WORLD: every rank calls it,
// from make_grid; once per process; nothing alone) and stops it (before
// MPI_Finalize).
void start_hang_watch();
void stop_hang_watch();

}  // namespace strata
