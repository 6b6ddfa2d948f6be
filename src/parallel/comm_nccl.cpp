// NcclComm: collectives on device buffers over NCCL (see comm_nccl.h).
#include "parallel/comm_nccl.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace strata {
namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(cat(call, ": CUDA error: ", cudaGetErrorString(e)));
}

void check_nccl(ncclResult_t r, const char* call, ncclComm_t comm) {
  if (r == ncclSuccess) return;
  std::string msg = cat(call, ": NCCL error: ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += cat(" (", last, ")");
  fail(msg);
}

void check_count(int64_t n, const char* what) {
  STRATA_CHECK(n >= 0, "nccl communicator: ", what, " with a negative count ", n);
}

}  // namespace

NcclComm::NcclComm(std::unique_ptr<Communicator> host, int device)
    : host_(std::move(host)), device_(device) {
  STRATA_CHECK(host_ != nullptr, "nccl communicator: no host communicator to bootstrap over");
  rank_ = host_->rank();
  size_ = host_->size();
  if (device_ >= 0) check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaGetDevice(&device_), "cudaGetDevice");

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof id);
  host_->broadcast_bytes(bytes, 0);
  STRATA_CHECK(bytes.size() == sizeof id, "nccl communicator: received a unique id of ",
               bytes.size(), " bytes, expected ", sizeof id);
  std::memcpy(&id, bytes.data(), sizeof id);
  check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", nullptr);

  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming), "cudaEventCreate");
}

NcclComm::~NcclComm() {
  // Destructors do not throw: errors here are ignored (the job is ending).
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_) {
    ncclCommFinalize(comm_);
    ncclCommDestroy(comm_);
  }
  for (cudaEvent_t e : pending_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (compute_ready_) cudaEventDestroy(compute_ready_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclComm::order_after_compute() {
  check_cuda(cudaEventRecord(compute_ready_, compute_stream_), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, compute_ready_, 0), "cudaStreamWaitEvent");
}

void NcclComm::sync_stream(const char* what) {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    fail(cat(what, ": cudaStreamSynchronize: CUDA error: ", cudaGetErrorString(e)));
}

cudaEvent_t NcclComm::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

void NcclComm::release_event(cudaEvent_t e) { free_events_.push_back(e); }

bool NcclComm::queue(int64_t n, const char* what, const char* call,
                     const std::function<ncclResult_t()>& enqueue) {
  check_count(n, what);
  if (n == 0) return false;
  order_after_compute();
  check_nccl(enqueue(), call, comm_);
  return true;
}

int64_t NcclComm::push_event(bool queued) {
  cudaEvent_t done = nullptr;  // nothing queued: complete from the start
  if (queued) {
    done = take_event();
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
  }
  pending_.push_back(done);
  return first_handle_ + static_cast<int64_t>(pending_.size()) - 1;
}

void NcclComm::allreduce_sum(float* buf, int64_t n) {
  if (queue(n, "allreduce_sum", "ncclAllReduce", [&] {
        return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
      }))
    sync_stream("ncclAllReduce");
}

int64_t NcclComm::allreduce_sum_async(float* buf, int64_t n) {
  return push_event(queue(n, "allreduce_sum_async", "ncclAllReduce", [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  }));
}

void NcclComm::wait(int64_t handle) {
  STRATA_CHECK(handle >= 0 && handle < first_handle_ + static_cast<int64_t>(pending_.size()),
               "nccl communicator: wait on unknown handle ", handle);
  if (handle < first_handle_) return;
  cudaEvent_t& e = pending_[static_cast<size_t>(handle - first_handle_)];
  if (e) {
    // The compute stream waits on the device; the event can be re-recorded
    // at once (the wait keeps the record it saw).
    check_cuda(cudaStreamWaitEvent(compute_stream_, e, 0), "cudaStreamWaitEvent (ncclAllReduce)");
    release_event(e);
    e = nullptr;
  }
  drop_completed_front();
}

void NcclComm::progress() {
  for (cudaEvent_t& e : pending_) {
    if (!e) continue;
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) continue;
    check_cuda(q, "cudaEventQuery (ncclAllReduce)");
    release_event(e);
    e = nullptr;
  }
  drop_completed_front();
}

void NcclComm::drop_completed_front() {
  while (!pending_.empty() && pending_.front() == nullptr) {
    pending_.pop_front();
    ++first_handle_;
  }
}

void NcclComm::allgather(const float* in, float* out, int64_t n) {
  if (queue(n, "allgather", "ncclAllGather", [&] {
        return ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_);
      }))
    sync_stream("ncclAllGather");
}

int64_t NcclComm::allgather_async(const float* in, float* out, int64_t n) {
  return push_event(queue(n, "allgather_async", "ncclAllGather", [&] {
    return ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_);
  }));
}

void NcclComm::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  if (queue(n, "reduce_scatter_sum", "ncclReduceScatter", [&] {
        return ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, comm_,
                                 stream_);
      }))
    sync_stream("ncclReduceScatter");
}

int64_t NcclComm::reduce_scatter_sum_async(const float* in, float* out, int64_t n) {
  return push_event(queue(n, "reduce_scatter_sum_async", "ncclReduceScatter", [&] {
    return ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  }));
}

void NcclComm::broadcast(float* buf, int64_t n, int root) {
  check_count(n, "broadcast");
  STRATA_CHECK(root >= 0 && root < size_, "nccl communicator: broadcast root ", root,
               " outside a group of ", size_);
  if (n == 0) return;
  order_after_compute();
  check_nccl(ncclBroadcast(buf, buf, static_cast<size_t>(n), ncclFloat, root, comm_, stream_),
             "ncclBroadcast", comm_);
  sync_stream("ncclBroadcast");
}

void NcclComm::broadcast_bytes(std::string& bytes, int root) {
  host_->broadcast_bytes(bytes, root);
}

double NcclComm::allreduce_sum(double x) { return host_->allreduce_sum(x); }

int64_t NcclComm::allreduce_sum(int64_t x) { return host_->allreduce_sum(x); }

void NcclComm::barrier() {
  sync_stream("barrier");
  host_->barrier();
}

void NcclComm::abort(const std::string& why) {
  // Unblocks this rank's NCCL kernels and proxy threads, then ends the job.
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  host_->abort(why);
  std::_Exit(1);  // not reached: the host abort ends the process
}

}  // namespace strata
