// MpiComm: the Communicator over an MPI communicator (Open MPI 4.1), for CPU
// buffers. Blocking collectives for the synchronous calls, nonblocking ones
// (MPI_Iallreduce) for allreduce_sum_async.
//
// Open MPI has no asynchronous progress thread by default: an outstanding
// nonblocking collective only advances while the process is inside an MPI
// call. progress() tests the outstanding requests (MPI_Testall), which runs the
// progress engine; call it between compute steps to overlap communication.
//
// Threads: every call on an MpiComm must come from the main thread (never from
// inside an OpenMP parallel region). MPI is initialised with
// MPI_THREAD_MULTIPLE only for the hang watchdog's thread (hang_watch.h),
// which talks on a communicator of its own.
//
// Timeouts: every blocking wait (the blocking collectives, wait() on an async
// one) is numbered per communicator (#1, #2, ... in issue order, the same on
// every member) and marked with a WaitGuard, so a wait longer than the
// collective timeout ends the job with one line naming it and the missing rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/hang_watch.h"

namespace strata {

class MpiComm final : public Communicator {
 public:
  // Wraps `comm`. When `owned`, the communicator is freed (MPI_Comm_free) on
  // destruction, unless MPI has been finalised by then.
  MpiComm(MPI_Comm comm, bool owned);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void allreduce_sum(float* buf, int64_t n) override;
  int64_t allreduce_sum_async(float* buf, int64_t n) override;
  bool bf16_sums() const override { return true; }
  void allreduce_sum_bf16(uint16_t* buf, int64_t n) override;
  int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n) override;
  void wait(int64_t handle) override;
  void progress() override;
  void allgather(const float* in, float* out, int64_t n) override;
  int64_t allgather_async(const float* in, float* out, int64_t n) override;
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override;
  void broadcast(float* buf, int64_t n, int root) override;
  void broadcast_bytes(std::string& bytes, int root) override;
  double allreduce_sum(double x) override;
  int64_t allreduce_sum(int64_t x) override;
  void barrier() override;
  int64_t send_async(const float* buf, int64_t n, int peer) override;
  int64_t recv_async(float* buf, int64_t n, int peer) override;
  [[noreturn]] void abort(const std::string& why) override;

  MPI_Comm handle() const { return comm_; }
  // The group's name in timeout messages ("tp group"; default "world" for a
  // duplicate of the world, else "group of N processes").
  void set_label(const std::string& label) { group_.label = label; }
  const WatchedGroup& watched_group() const { return group_; }
  // The sub-communicator of the processes that pass the same `color`, ranked
  // by `key` (then by rank here). Collective over this communicator.
  std::unique_ptr<MpiComm> split(int color, int key) const;
  // Number of async allreduces started and not yet waited for.
  int64_t outstanding() const;

  // Largest element count passed to one MPI call (MPI counts are int). Counts
  // above it are split into several calls. Default INT_MAX; tests lower it to
  // exercise the chunked paths. Process-wide.
  static void set_max_chunk(int64_t elements);
  static int64_t max_chunk();

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  WatchedGroup group_;  // label and world ranks, for the collective timeout
  int64_t seq_ = 0;     // collectives issued so far (the last one's number)
  // Async operations: handle h lives in pending_[h - first_handle_]; one
  // handle holds several requests when its count was split into chunks, and
  // the staging copies its requests read until they complete. Completed
  // handles at the front are dropped, so the queue stays short.
  struct Pending {
    std::vector<MPI_Request> reqs;
    std::vector<std::vector<float>> staged;
    const char* kind = "";  // "all-reduce", ... (timeout messages)
    int64_t seq = 0;
    bool done() const { return reqs.empty(); }
  };
  std::deque<Pending> pending_;
  int64_t first_handle_ = 0;
  int64_t push(Pending p);
  void finish(Pending p);  // waits for its requests (a blocking call)
  void drop_completed_front();
  // In-place sums of n elements of `bytes` each with `op`, in chunks.
  void allreduce(void* buf, int64_t n, MPI_Datatype type, size_t bytes, MPI_Op op);
  int64_t allreduce_async(void* buf, int64_t n, MPI_Datatype type, size_t bytes, MPI_Op op);
  // The requests of an allgather / reduce-scatter (blocking calls wait on them).
  Pending start_allgather(const float* in, float* out, int64_t n);
  Pending start_reduce_scatter(const float* in, float* out, int64_t n);
  // A nonblocking send (the buffer is only read) or receive.
  int64_t point_to_point(bool send, float* buf, int64_t n, int peer);
};

// A duplicate of MPI_COMM_WORLD (MPI must be initialised; see make_grid).
std::unique_ptr<MpiComm> make_mpi_world_comm();

}  // namespace strata
