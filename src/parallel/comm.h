// Communicators: the collectives strata's parallelism needs, behind one
// interface with three implementations:
//   - LocalComm: a group of one process (no-ops), for single-process runs;
//   - MpiComm:   Open MPI on CPU buffers, nonblocking collectives for async;
//   - NcclComm:  NCCL on GPU buffers on its own stream, bootstrapped over MPI
//                (built when CUDA is found; exercised on a GPU machine).
// Tensor-parallel and data-parallel groups are sub-communicators of the world
// (ProcessGrid, parallel/grid.h). Buffers are float32 (bf16 for the bf16
// sums).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local", "mpi", "nccl"

  // In-place sum over the group.
  virtual void allreduce_sum(float* buf, int64_t n) = 0;
  // Starts an in-place sum and returns a handle; the buffer must stay alive
  // and untouched until wait(handle). progress() lets the library advance
  // outstanding operations (call it between compute steps to overlap).
  virtual int64_t allreduce_sum_async(float* buf, int64_t n) = 0;
  virtual void wait(int64_t handle) = 0;
  virtual void progress() = 0;
  // The same sums of bf16 values (the bits of core/bf16.h), half an fp32
  // message's bytes: how tensor parallelism sums activations stored in bf16.
  // Each addition is rounded to bf16, in the library's order (with two ranks
  // the sum is rounded once). A communicator without them says so in
  // bf16_sums() (the caller sums fp32 copies); calling them then fails.
  virtual bool bf16_sums() const { return false; }
  virtual void allreduce_sum_bf16(uint16_t* buf, int64_t n);
  virtual int64_t allreduce_sum_bf16_async(uint16_t* buf, int64_t n);
  // out[size * n] = the concatenation of every rank's in[n], in rank order.
  // `in` may be this rank's slot of `out` (in == out + rank * n: in place).
  virtual void allgather(const float* in, float* out, int64_t n) = 0;
  // The same, started asynchronously (wait(handle) before reading out; in and
  // out stay untouched until then). ZeRO-3 gathers the next unit's weights
  // while this one computes.
  virtual int64_t allgather_async(const float* in, float* out, int64_t n) = 0;
  // out[n] = the sum over ranks of in[rank * n .. rank * n + n): every rank
  // keeps its slot of the summed in[size * n] (ZeRO-2/3 gradients). in and
  // out must not overlap.
  virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
  virtual int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) = 0;
  // Rank `root`'s buf[n] to everyone.
  virtual void broadcast(float* buf, int64_t n, int root) = 0;
  // The same for bytes (recipes, tokenizers, states).
  virtual void broadcast_bytes(std::string& bytes, int root) = 0;
  // Sum of one double / one int64 (losses, token counts) over the group.
  virtual double allreduce_sum(double x) = 0;
  virtual int64_t allreduce_sum(int64_t x) = 0;
  virtual void barrier() = 0;
  // Point-to-point, for pipeline stages: buf[n] to / from rank `peer` of this
  // group. Messages from one rank to another arrive in the order they were
  // sent (a stage's activations, its neighbour's gradients). The async forms
  // return a handle for wait(); the buffer stays untouched until then, so a
  // receive posted early overlaps the compute before it. A communicator
  // without them (one process, or a wrapper) fails in one line.
  virtual int64_t send_async(const float* buf, int64_t n, int peer);
  virtual int64_t recv_async(float* buf, int64_t n, int peer);
  void send(const float* buf, int64_t n, int peer) { wait(send_async(buf, n, peer)); }
  void recv(float* buf, int64_t n, int peer) { wait(recv_async(buf, n, peer)); }
  // Ends every process of the job with an error (after printing `why`).
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

// The single-process communicator.
std::unique_ptr<Communicator> make_local_comm();

}  // namespace strata
