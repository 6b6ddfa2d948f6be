// NcclComm: the Communicator for DEVICE float buffers, over NCCL. Built only
// when CMake finds CUDA and libnccl (STRATA_HAVE_NCCL); strata has no GPU in
// CI, so this compiles and links there but runs only on a GPU machine.
//
// - Bootstrap: rank 0 of the host communicator (an MpiComm, or a LocalComm for
//   one process) makes the ncclUniqueId and broadcasts it over the host
//   communicator; every rank then joins with ncclCommInitRank(host size,
//   host rank). The NCCL ranks equal the host ranks.
// - Streams: collectives run on the process's one communication stream, a
//   non-blocking stream SHARED by every NcclComm of the process (the tp and
//   the dp group alike). Each one is ordered after the work already queued on
//   the compute stream (set_compute_stream; default the legacy default
//   stream) through an event, so buffers produced by kernels are complete
//   before they are sent.
// - Two communicators never wait on each other (NCCL's "Using multiple NCCL
//   communicators concurrently"): a NCCL collective is a kernel that spins
//   until all its peers join, so if one GPU ran a tp collective while its dp
//   peer ran a dp one, each could wait for a rank busy with the other. On the
//   one shared stream the device runs the collectives of all communicators
//   one at a time, in host issue order; the host order is the training
//   step's program order, in which every group's members issue its
//   collectives alike and the ranks' orders fit one global order (no
//   cycle). So an operation of one communicator is never in flight beside
//   one of another, and all GPUs agree on the order of every group's
//   operations. The rule lives in CollectiveOrder (collective_order.h), which
//   every collective here goes through: it throws if a collective would be
//   issued on another queue than an in-flight async one of another
//   communicator, and traces the issue order for tests. The SIMT device's
//   MPI communicators go through the same code (OrderedComm), which is how
//   CI checks it without a GPU (tests/mpi_train_test.sh, phase order).
//   The price: an async dp all-reduce queued before a blocking tp all-reduce
//   delays it on the device (they no longer overlap each other; both still
//   overlap compute).
// - allreduce_sum, allgather and broadcast return when the result is in the
//   buffer (the NCCL stream is synchronised); allreduce_sum_async returns at
//   once and wait(handle) makes the compute stream wait for the event recorded
//   after the operation (cudaStreamWaitEvent): a stream wait, not a host
//   sync, so the host goes on queueing the next module's kernels (Ladder
//   Residual's overlap, spec L5). Work queued on the compute stream after
//   wait() sees the result; so does a host copy ordered after it (with the
//   default legacy compute stream, any cudaMemcpy).
//   progress() only releases finished handles: NCCL advances on the device.
// - The scalar sums, broadcast_bytes and barrier are host operations and go
//   through the host communicator. abort() aborts NCCL, then the host job.
// - Calls come from one host thread whose current device is the
//   communicator's. Errors throw strata::Error naming the call and NCCL's or
//   CUDA's message.
// - Timeouts: the host waits of the blocking collectives (the stream
//   synchronisation) are marked with a WaitGuard and numbered like MpiComm's,
//   so a collective that has not completed after the collective timeout ends
//   the job with one line naming it and the rank(s) it waits for
//   (hang_watch.h; the watchdog asks the ranks over MPI). The job ends by
//   MPI_Abort, which ends the processes and with them their NCCL kernels;
//   ncclCommAbort is not called (a second thread aborting a communicator the
//   main thread is blocked on is one more thing that could hang). An async
//   collective is watched only when a blocking call waits behind it.
//   Untested on a GPU so far.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/hang_watch.h"

namespace strata {

class NcclComm final : public Communicator {
 public:
  // Collective over `host`. `device` >= 0 selects the CUDA device first
  // (cudaSetDevice); -1 keeps the current one (the caller picked it, e.g. the
  // node-local rank modulo the device count). `label` names the group in
  // CollectiveOrder's errors and trace ("tp", "dp").
  explicit NcclComm(std::unique_ptr<Communicator> host, int device = -1,
                    const std::string& label = "nccl");
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

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
  [[noreturn]] void abort(const std::string& why) override;

  // The stream whose queued work every collective waits for (default 0, the
  // legacy default stream).
  void set_compute_stream(cudaStream_t s) { compute_stream_ = s; }
  // The process's communication stream (cudaStreamNonBlocking), shared by
  // every NcclComm.
  cudaStream_t stream() const { return stream_; }
  Communicator& host() { return *host_; }
  ncclComm_t handle() const { return comm_; }

 private:
  void order_after_compute();
  // Waits for stream_; `kind` non-null: marked as blocking collective #seq_.
  void sync_stream(const char* what, const char* kind = nullptr);
  cudaEvent_t take_event();
  void release_event(cudaEvent_t e);
  void drop_completed_front();
  // Queues a collective (enqueue) on stream_ after the compute stream's work,
  // through CollectiveOrder; n == 0 queues nothing. Returns its order ticket
  // (0: nothing queued).
  int64_t queue(int64_t n, const char* what, const char* call, bool async,
                const std::function<ncclResult_t()>& enqueue);
  // A blocking collective: queued, then the stream synchronised.
  void queue_and_wait(int64_t n, const char* what, const char* call,
                      const std::function<ncclResult_t()>& enqueue);
  // The handle of what was just queued on stream_ (an event recorded after
  // it, and its order ticket), or of nothing (ticket 0: complete from the start).
  int64_t push_event(int64_t ticket);
  void finish(size_t index);  // handle at pending_[index] is complete

  std::unique_ptr<Communicator> host_;
  int rank_ = 0, size_ = 1, device_ = -1;
  WatchedGroup group_;  // label and world ranks, for the collective timeout
  int64_t seq_ = 0;     // blocking collectives so far (their numbers in messages)
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<CUstream_st> shared_stream_;  // the process's, see above
  cudaStream_t stream_ = nullptr;
  int order_id_ = 0;  // in CollectiveOrder::process()
  cudaStream_t compute_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;
  // Async operations: handle h is pending_[h - first_handle_], the event
  // recorded after it (nullptr once complete). Finished handles at the front
  // are dropped; their events return to free_events_.
  std::deque<cudaEvent_t> pending_;
  std::deque<int64_t> tickets_;  // CollectiveOrder ticket of each pending_ entry
  int64_t first_handle_ = 0;
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace strata
