// MpiComm: collectives over an MPI communicator (see comm_mpi.h).
//
// Every call runs with a fatal error handler (set on the world by make_grid and
// inherited by duplicates and splits): a failing MPI call prints one line and
// ends the whole job, so return codes are not checked here. Counts are int in MPI; larger buffers
// go through several calls of at most max_chunk() elements.
#include "parallel/comm_mpi.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/bf16.h"
#include "core/error.h"

namespace strata {
namespace {

std::atomic<int64_t> g_max_chunk{INT_MAX};

void check_count(int64_t n, const char* what) {
  STRATA_CHECK(n >= 0, "mpi communicator: ", what, " with a negative count ", n);
}

// Calls fn(offset, count) over [0, n) in pieces of at most max_chunk().
template <typename Fn>
void for_chunks(int64_t n, Fn&& fn) {
  const int64_t chunk = g_max_chunk.load(std::memory_order_relaxed);
  for (int64_t off = 0; off < n; off += chunk) fn(off, static_cast<int>(std::min(chunk, n - off)));
}

}  // namespace

void MpiComm::set_max_chunk(int64_t elements) {
  STRATA_CHECK(elements >= 1 && elements <= INT_MAX, "mpi communicator: max chunk ", elements,
               " outside [1, ", INT_MAX, "]");
  g_max_chunk.store(elements, std::memory_order_relaxed);
}

int64_t MpiComm::max_chunk() { return g_max_chunk.load(std::memory_order_relaxed); }

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  STRATA_CHECK(comm != MPI_COMM_NULL, "mpi communicator: MPI_COMM_NULL");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // The members' world ranks: a timeout names them as mpirun numbers them.
  MPI_Group mine, world;
  MPI_Comm_group(comm_, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) local[static_cast<size_t>(r)] = r;
  group_.world_ranks.resize(static_cast<size_t>(size_));
  MPI_Group_translate_ranks(mine, size_, local.data(), world, group_.world_ranks.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  group_.label = size_ == world_size ? "world" : cat("group of ", size_, " processes");
}

MpiComm::~MpiComm() {
  if (!owned_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

void MpiComm::allreduce_sum(float* buf, int64_t n) {
  check_count(n, "allreduce_sum");
  allreduce(buf, n, MPI_FLOAT, sizeof(float), MPI_SUM);
}

int64_t MpiComm::allreduce_sum_async(float* buf, int64_t n) {
  check_count(n, "allreduce_sum_async");
  return allreduce_async(buf, n, MPI_FLOAT, sizeof(float), MPI_SUM);
}

namespace {
// MPI has no bf16 type: its sum as a user operation on 16-bit words,
// in_out[i] = in[i] + in_out[i] rounded to bf16 (commutative).
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = bf16_round_bits(bf16_widen_bits(a[i]) + bf16_widen_bits(b[i]));
}
MPI_Op bf16_sum_op() {
  static const MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&sum_bf16, 1, &o);
    return o;
  }();
  return op;
}
}  // namespace

void MpiComm::allreduce_sum_bf16(uint16_t* buf, int64_t n) {
  check_count(n, "allreduce_sum_bf16");
  allreduce(buf, n, MPI_UINT16_T, sizeof(uint16_t), bf16_sum_op());
}

int64_t MpiComm::allreduce_sum_bf16_async(uint16_t* buf, int64_t n) {
  check_count(n, "allreduce_sum_bf16_async");
  return allreduce_async(buf, n, MPI_UINT16_T, sizeof(uint16_t), bf16_sum_op());
}

void MpiComm::allreduce(void* buf, int64_t n, MPI_Datatype type, size_t bytes, MPI_Op op) {
  WaitGuard guard(group_, "all-reduce", ++seq_);
  for_chunks(n, [&](int64_t off, int len) {
    MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(buf) + off * int64_t(bytes), len, type, op,
                  comm_);
  });
}

int64_t MpiComm::allreduce_async(void* buf, int64_t n, MPI_Datatype type, size_t bytes, MPI_Op op) {
  std::vector<MPI_Request> reqs;
  for_chunks(n, [&](int64_t off, int len) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(buf) + off * int64_t(bytes), len, type, op,
                   comm_, &req);
    reqs.push_back(req);
  });
  // n == 0 starts nothing: its handle is complete from the start (an empty
  // request list), like a waited-for one.
  Pending p;
  p.reqs = std::move(reqs);
  p.kind = "async all-reduce";
  p.seq = ++seq_;
  return push(std::move(p));
}

int64_t MpiComm::push(Pending p) {
  pending_.push_back(std::move(p));
  return first_handle_ + static_cast<int64_t>(pending_.size()) - 1;
}

void MpiComm::wait(int64_t handle) {
  STRATA_CHECK(handle >= 0 && handle < first_handle_ + static_cast<int64_t>(pending_.size()),
               "mpi communicator: wait on unknown handle ", handle);
  if (handle < first_handle_) return;  // completed and dropped already
  Pending& p = pending_[static_cast<size_t>(handle - first_handle_)];
  if (!p.reqs.empty()) {
    WaitGuard guard(group_, p.kind, p.seq);
    MPI_Waitall(static_cast<int>(p.reqs.size()), p.reqs.data(), MPI_STATUSES_IGNORE);
    p.reqs.clear();
    p.staged.clear();
  }
  drop_completed_front();
}

void MpiComm::progress() {
  for (Pending& p : pending_) {
    if (p.reqs.empty()) continue;
    int done = 0;
    MPI_Testall(static_cast<int>(p.reqs.size()), p.reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (done) {
      p.reqs.clear();
      p.staged.clear();
    }
  }
  drop_completed_front();
}

int64_t MpiComm::outstanding() const {
  return std::count_if(pending_.begin(), pending_.end(),
                       [](const Pending& p) { return !p.done(); });
}

void MpiComm::drop_completed_front() {
  while (!pending_.empty() && pending_.front().done()) {
    pending_.pop_front();
    ++first_handle_;
  }
}

MpiComm::Pending MpiComm::start_allgather(const float* in, float* out, int64_t n) {
  check_count(n, "allgather");
  Pending p;
  p.kind = "all-gather";
  p.seq = ++seq_;
  if (n == 0) return p;
  // `in` already sitting in this rank's slot of `out` is MPI's in-place case.
  const bool in_place = in == out + static_cast<int64_t>(rank_) * n;
  // Any other overlap of in and out: send from a copy (kept until completion).
  if (!in_place && in < out + static_cast<int64_t>(size_) * n && out < in + n) {
    p.staged.emplace_back(in, in + n);
    in = p.staged.back().data();
  }
  if (n <= max_chunk()) {
    MPI_Request req;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(n), MPI_FLOAT, out,
                   static_cast<int>(n), MPI_FLOAT, comm_, &req);
    p.reqs.push_back(req);
    return p;
  }
  // In pieces: piece [off, off + len) of every rank lands at out + r * n + off,
  // described by one "len floats, then skip to the next rank's slot" type (a
  // type freed while an operation uses it lives until the operation ends).
  for_chunks(n, [&](int64_t off, int len) {
    MPI_Datatype piece, strided;
    MPI_Type_contiguous(len, MPI_FLOAT, &piece);
    MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(n * sizeof(float)), &strided);
    MPI_Type_commit(&strided);
    MPI_Request req;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : in + off, len, MPI_FLOAT, out + off, 1, strided, comm_,
                   &req);
    p.reqs.push_back(req);
    MPI_Type_free(&strided);
    MPI_Type_free(&piece);
  });
  return p;
}

void MpiComm::finish(Pending p) {
  if (p.reqs.empty()) return;
  WaitGuard guard(group_, p.kind, p.seq);
  MPI_Waitall(static_cast<int>(p.reqs.size()), p.reqs.data(), MPI_STATUSES_IGNORE);
}

void MpiComm::allgather(const float* in, float* out, int64_t n) {
  finish(start_allgather(in, out, n));
}

int64_t MpiComm::allgather_async(const float* in, float* out, int64_t n) {
  Pending p = start_allgather(in, out, n);
  p.kind = "async all-gather";
  return push(std::move(p));
}

MpiComm::Pending MpiComm::start_reduce_scatter(const float* in, float* out, int64_t n) {
  check_count(n, "reduce_scatter_sum");
  Pending p;
  p.kind = "reduce-scatter";
  p.seq = ++seq_;
  if (n == 0) return p;
  STRATA_CHECK(out + n <= in || in + static_cast<int64_t>(size_) * n <= out,
               "mpi communicator: reduce_scatter_sum with overlapping input and output");
  if (n <= max_chunk()) {
    MPI_Request req;
    MPI_Ireduce_scatter_block(in, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req);
    p.reqs.push_back(req);
    return p;
  }
  // In pieces: piece [off, off + len) of every rank's slot, packed rank after
  // rank into a staging copy (kept until completion).
  for_chunks(n, [&](int64_t off, int len) {
    std::vector<float> packed(static_cast<size_t>(len) * static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      std::copy_n(in + static_cast<int64_t>(r) * n + off, len,
                  packed.data() + static_cast<size_t>(r) * static_cast<size_t>(len));
    p.staged.push_back(std::move(packed));
    MPI_Request req;
    MPI_Ireduce_scatter_block(p.staged.back().data(), out + off, len, MPI_FLOAT, MPI_SUM, comm_,
                              &req);
    p.reqs.push_back(req);
  });
  return p;
}

void MpiComm::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  finish(start_reduce_scatter(in, out, n));
}

int64_t MpiComm::reduce_scatter_sum_async(const float* in, float* out, int64_t n) {
  Pending p = start_reduce_scatter(in, out, n);
  p.kind = "async reduce-scatter";
  return push(std::move(p));
}

void MpiComm::broadcast(float* buf, int64_t n, int root) {
  check_count(n, "broadcast");
  STRATA_CHECK(root >= 0 && root < size_, "mpi communicator: broadcast root ", root,
               " outside a group of ", size_);
  WaitGuard guard(group_, "broadcast", ++seq_);
  for_chunks(n, [&](int64_t off, int len) { MPI_Bcast(buf + off, len, MPI_FLOAT, root, comm_); });
}

void MpiComm::broadcast_bytes(std::string& bytes, int root) {
  STRATA_CHECK(root >= 0 && root < size_, "mpi communicator: broadcast root ", root,
               " outside a group of ", size_);
  WaitGuard guard(group_, "broadcast", ++seq_);
  int64_t n = static_cast<int64_t>(bytes.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, root, comm_);
  if (rank_ != root) bytes.resize(static_cast<size_t>(n));
  for_chunks(
      n, [&](int64_t off, int len) { MPI_Bcast(bytes.data() + off, len, MPI_BYTE, root, comm_); });
}

double MpiComm::allreduce_sum(double x) {
  WaitGuard guard(group_, "all-reduce", ++seq_);
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm_);
  return x;
}

int64_t MpiComm::allreduce_sum(int64_t x) {
  WaitGuard guard(group_, "all-reduce", ++seq_);
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_SUM, comm_);
  return x;
}

namespace {
constexpr int kPointToPointTag = 41;  // pipeline messages; MPI keeps them in order per pair
}  // namespace

int64_t MpiComm::send_async(const float* buf, int64_t n, int peer) {
  return point_to_point(true, const_cast<float*>(buf), n, peer);
}

int64_t MpiComm::recv_async(float* buf, int64_t n, int peer) {
  return point_to_point(false, buf, n, peer);
}

int64_t MpiComm::point_to_point(bool send, float* buf, int64_t n, int peer) {
  const char* what = send ? "send" : "receive";
  check_count(n, what);
  STRATA_CHECK(peer >= 0 && peer < size_ && peer != rank_, "mpi communicator: ", what,
               send ? " from rank " : " on rank ", rank_, send ? " to rank " : " from rank ", peer,
               " of a group of ", size_);
  Pending p;
  for_chunks(n, [&](int64_t off, int len) {
    MPI_Request req;
    if (send)
      MPI_Isend(buf + off, len, MPI_FLOAT, peer, kPointToPointTag, comm_, &req);
    else
      MPI_Irecv(buf + off, len, MPI_FLOAT, peer, kPointToPointTag, comm_, &req);
    p.reqs.push_back(req);
  });
  p.kind = what;
  p.seq = seq_;  // not a collective: the sequence does not advance
  return push(std::move(p));
}

void MpiComm::barrier() {
  WaitGuard guard(group_, "barrier", ++seq_);
  MPI_Barrier(comm_);
}

void MpiComm::abort(const std::string& why) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::fprintf(stderr, "strata: error: %s (rank %d)\n", why.c_str(), world_rank);
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

std::unique_ptr<MpiComm> MpiComm::split(int color, int key) const {
  STRATA_CHECK(color >= 0, "mpi communicator: split with a negative color ", color);
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &sub);
  return std::make_unique<MpiComm>(sub, true);
}

std::unique_ptr<MpiComm> make_mpi_world_comm() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  STRATA_CHECK(initialized && !finalized, "mpi communicator: MPI is not initialised");
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  return std::make_unique<MpiComm>(world, true);
}

}  // namespace strata
