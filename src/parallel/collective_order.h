// CollectiveOrder: the rule that keeps two device communicators of one
// process (the tensor-parallel and the data-parallel group) from waiting on
// each other, in code shared by NcclComm and by the communicators of the SIMT
// device (OrderedComm, parallel/ordered_comm.h), so the CPU tests check what
// the GPU path runs.
//
// The hazard (NCCL's "Using multiple NCCL communicators concurrently"): a
// NCCL collective is a kernel that spins until every rank of its group has
// joined. If rank A's GPU runs a tp collective while rank B's runs a dp one
// and each waits for a peer that is busy with the other, neither finishes.
// NCCL's advice: operations of different communicators in separate epochs,
// issued in the same order on every rank.
//
// The rule, by construction:
//   1. Every device communicator of a process issues on one queue: NcclComm
//      shares one CUDA stream among all its instances (comm_nccl.h), so the
//      device runs the collectives of tp and dp one after the other, in the
//      order the host issued them.
//   2. That host order is the program order of the training step: every
//      member of a group issues the group's collectives in the same order,
//      and the processes' orders fit one global order (no cycle such as "A:
//      tp then dp" against "B, A's dp peer: dp then tp" with B's tp peer
//      waiting on A's). The trainer issues collectives at fixed points of
//      forward, backward and the optimizer; the one rank-dependent part,
//      the first dp rank's tp groups gathering a checkpoint, involves whole
//      groups and happens before the next collective of the other group.
//      With one queue per process the device then runs every group's
//      collectives in an order all ranks agree on.
// issue() checks (1) at run time: a collective of one communicator issued on
// a queue other than that of an async collective of another communicator
// still in flight throws strata::Error. (2) is checked by tests: with
// STRATA_COLLECTIVE_TRACE=<prefix> in the environment every process appends
// "<communicator> <collective> q<queue>|host" per issued collective to
// <prefix>.<rank>, and tests/collective_order_check.cpp checks a job's files
// (tests/mpi_train_test.sh, phase order); start_trace/trace do the same in
// memory for unit tests.
//
// Host collectives (scalar sums, byte broadcasts, barriers) are recorded on
// queue kHostQueue and never conflict: they run on the CPU, not as kernels.
// Not thread-safe: collectives come from the one host thread that drives the
// communicators (the hang watchdog's thread talks on a communicator of its own).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace strata {

class CollectiveOrder {
 public:
  static constexpr uintptr_t kHostQueue = 0;

  // The one instance of this process.
  static CollectiveOrder& process();

  // A communicator joins under its role ("tp", "dp"); returns its id.
  int join(const std::string& label);
  // A collective of communicator `comm` about to be queued on `queue` (an
  // opaque key: the CUDA stream, or 1 for the SIMT model). Throws when it
  // would run beside an in-flight async collective of another communicator
  // on another device queue. Returns a ticket: pass it to complete() once
  // the collective is finished or ordered (blocking ones: right after).
  int64_t issue(int comm, const char* op, uintptr_t queue, bool async);
  void complete(int64_t ticket);
  // issue() and complete() of a blocking collective.
  void blocking(int comm, const char* op, uintptr_t queue) {
    complete(issue(comm, op, queue, false));
  }

  // In-memory trace for tests: lines as in the trace file.
  void start_trace();
  std::vector<std::string> trace() const { return trace_; }
  void stop_trace();

 private:
  struct InFlight {
    int64_t ticket;
    int comm;
    std::string op;
    uintptr_t queue;
  };
  void record(int comm, const char* op, uintptr_t queue);

  std::vector<std::string> labels_;
  std::vector<uintptr_t> queues_;  // index in the trace: order of first use
  std::vector<InFlight> in_flight_;
  int64_t next_ticket_ = 1;
  bool tracing_ = false;
  std::vector<std::string> trace_;
  std::FILE* file_ = nullptr;
  bool file_checked_ = false;
};

}  // namespace strata
