// NcclComm: collectives on device buffers over NCCL (see comm_nccl.h).
#include "parallel/comm_nccl.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "parallel/collective_order.h"

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

// The process's one communication stream (comm_nccl.h): made by the first
// NcclComm, destroyed after the last. One device per process, as the
// launcher sets it up (use_device_comms).
std::shared_ptr<CUstream_st> process_comm_stream() {
  static std::weak_ptr<CUstream_st> shared;
  if (auto s = shared.lock()) return s;
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::shared_ptr<CUstream_st> owned(s, [](cudaStream_t p) { cudaStreamDestroy(p); });
  shared = owned;
  return owned;
}

CollectiveOrder& order() { return CollectiveOrder::process(); }

// A blocking collective's name in timeout messages (a literal: WaitGuard keeps it).
const char* kind_name(const char* what) {
  if (!std::strcmp(what, "allreduce_sum")) return "all-reduce";
  if (!std::strcmp(what, "allgather")) return "all-gather";
  if (!std::strcmp(what, "reduce_scatter_sum")) return "reduce-scatter";
  if (!std::strcmp(what, "broadcast")) return "broadcast";
  return "collective";
}

}  // namespace

NcclComm::NcclComm(std::unique_ptr<Communicator> host, int device, const std::string& label)
    : host_(std::move(host)), device_(device), order_id_(order().join(label)) {
  STRATA_CHECK(host_ != nullptr, "nccl communicator: no host communicator to bootstrap over");
  rank_ = host_->rank();
  size_ = host_->size();
  // The members' world ranks (exact as floats up to 2^24 processes), so a
  // timeout names ranks as mpirun numbers them.
  group_.label = label + " group";
  const float me = static_cast<float>(watch_world_rank());
  std::vector<float> ranks(static_cast<size_t>(size_));
  host_->allgather(&me, ranks.data(), 1);
  for (float r : ranks) group_.world_ranks.push_back(static_cast<int>(r));
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

  shared_stream_ = process_comm_stream();
  stream_ = shared_stream_.get();
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
  // The shared stream goes with the last communicator (shared_stream_).
}

void NcclComm::order_after_compute() {
  check_cuda(cudaEventRecord(compute_ready_, compute_stream_), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, compute_ready_, 0), "cudaStreamWaitEvent");
}

void NcclComm::sync_stream(const char* what, const char* kind) {
  std::optional<WaitGuard> guard;
  if (kind) guard.emplace(group_, kind, seq_);
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

int64_t NcclComm::queue(int64_t n, const char* what, const char* call, bool async,
                        const std::function<ncclResult_t()>& enqueue) {
  check_count(n, what);
  if (n == 0) return 0;
  const int64_t ticket =
      order().issue(order_id_, what, reinterpret_cast<uintptr_t>(stream_), async);
  order_after_compute();
  check_nccl(enqueue(), call, comm_);
  return ticket;
}

void NcclComm::queue_and_wait(int64_t n, const char* what, const char* call,
                              const std::function<ncclResult_t()>& enqueue) {
  const int64_t ticket = queue(n, what, call, false, enqueue);
  if (!ticket) return;
  ++seq_;
  sync_stream(call, kind_name(what));
  order().complete(ticket);
}

int64_t NcclComm::push_event(int64_t ticket) {
  cudaEvent_t done = nullptr;  // nothing queued: complete from the start
  if (ticket) {
    done = take_event();
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
  }
  pending_.push_back(done);
  tickets_.push_back(ticket);
  return first_handle_ + static_cast<int64_t>(pending_.size()) - 1;
}

void NcclComm::finish(size_t index) {
  release_event(pending_[index]);
  pending_[index] = nullptr;
  order().complete(tickets_[index]);
  tickets_[index] = 0;
}

void NcclComm::allreduce_sum(float* buf, int64_t n) {
  queue_and_wait(n, "allreduce_sum", "ncclAllReduce", [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  });
}

int64_t NcclComm::allreduce_sum_async(float* buf, int64_t n) {
  return push_event(queue(n, "allreduce_sum_async", "ncclAllReduce", true, [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  }));
}

// (ncclBfloat16 since NCCL 2.10, CUDA 11.)
void NcclComm::allreduce_sum_bf16(uint16_t* buf, int64_t n) {
  queue_and_wait(n, "allreduce_sum_bf16", "ncclAllReduce", [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclBfloat16, ncclSum, comm_, stream_);
  });
}

int64_t NcclComm::allreduce_sum_bf16_async(uint16_t* buf, int64_t n) {
  return push_event(queue(n, "allreduce_sum_bf16_async", "ncclAllReduce", true, [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclBfloat16, ncclSum, comm_, stream_);
  }));
}

void NcclComm::wait(int64_t handle) {
  STRATA_CHECK(handle >= 0 && handle < first_handle_ + static_cast<int64_t>(pending_.size()),
               "nccl communicator: wait on unknown handle ", handle);
  if (handle < first_handle_) return;
  const auto i = static_cast<size_t>(handle - first_handle_);
  if (pending_[i]) {
    // The compute stream waits on the device; the event can be re-recorded
    // at once (the wait keeps the record it saw). From here on the compute
    // stream is ordered after the collective (for CollectiveOrder: done).
    check_cuda(cudaStreamWaitEvent(compute_stream_, pending_[i], 0),
               "cudaStreamWaitEvent (ncclAllReduce)");
    finish(i);
  }
  drop_completed_front();
}

void NcclComm::progress() {
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!pending_[i]) continue;
    const cudaError_t q = cudaEventQuery(pending_[i]);
    if (q == cudaErrorNotReady) continue;
    check_cuda(q, "cudaEventQuery (ncclAllReduce)");
    finish(i);
  }
  drop_completed_front();
}

void NcclComm::drop_completed_front() {
  while (!pending_.empty() && pending_.front() == nullptr) {
    pending_.pop_front();
    tickets_.pop_front();
    ++first_handle_;
  }
}

void NcclComm::allgather(const float* in, float* out, int64_t n) {
  queue_and_wait(n, "allgather", "ncclAllGather", [&] {
    return ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_);
  });
}

int64_t NcclComm::allgather_async(const float* in, float* out, int64_t n) {
  return push_event(queue(n, "allgather_async", "ncclAllGather", true, [&] {
    return ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_);
  }));
}

void NcclComm::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  queue_and_wait(n, "reduce_scatter_sum", "ncclReduceScatter", [&] {
    return ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  });
}

int64_t NcclComm::reduce_scatter_sum_async(const float* in, float* out, int64_t n) {
  return push_event(queue(n, "reduce_scatter_sum_async", "ncclReduceScatter", true, [&] {
    return ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
  }));
}

void NcclComm::broadcast(float* buf, int64_t n, int root) {
  check_count(n, "broadcast");
  STRATA_CHECK(root >= 0 && root < size_, "nccl communicator: broadcast root ", root,
               " outside a group of ", size_);
  queue_and_wait(n, "broadcast", "ncclBroadcast", [&] {
    return ncclBroadcast(buf, buf, static_cast<size_t>(n), ncclFloat, root, comm_, stream_);
  });
}

// Host collectives: traced on the host queue (they are no kernels, so they
// never conflict), in the same order as the device ones.
void NcclComm::broadcast_bytes(std::string& bytes, int root) {
  order().blocking(order_id_, "broadcast_bytes", CollectiveOrder::kHostQueue);
  host_->broadcast_bytes(bytes, root);
}

double NcclComm::allreduce_sum(double x) {
  order().blocking(order_id_, "allreduce_sum_double", CollectiveOrder::kHostQueue);
  return host_->allreduce_sum(x);
}

int64_t NcclComm::allreduce_sum(int64_t x) {
  order().blocking(order_id_, "allreduce_sum_int64", CollectiveOrder::kHostQueue);
  return host_->allreduce_sum(x);
}

void NcclComm::barrier() {
  order().blocking(order_id_, "barrier", CollectiveOrder::kHostQueue);
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
