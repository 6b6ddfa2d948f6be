// The CPU SIMT executor: runs CUDA kernels written against
// backends/cuda/portable.h on the host, with CUDA's execution model kept where
// kernels can observe it, so a kernel that is wrong on a GPU is wrong here too.
//
// - A launch runs every block of the grid; blocks are spread over the OpenMP
//   threads (one block at a time per thread), so atomics race for real.
// - The threads of a block are fibers with their own stacks. A thread runs
//   until it reaches a barrier (__syncthreads, __syncwarp, a shuffle or a
//   vote), then the next thread runs. The order the threads are resumed in is
//   a setting (forward, reverse, or a seeded shuffle per round): a kernel
//   that relies on an order no barrier enforces gives different results under
//   different orders, which the tests compare.
// - __syncthreads is a real barrier: every live thread of the block must
//   reach it. A thread that exits while others wait, or warp lanes that call
//   different warp operations, is reported as an error naming the kernel's
//   block and the threads (CUDA leaves this undefined; here it throws).
// - Warps are 32 consecutive threads (by linear thread index). Shuffles and
//   votes take the values of every lane in the mask that exists, with CUDA's
//   rules for `width` and for lanes outside the segment.
// - __shared__ arrays are per block (thread-local storage of the OS thread
//   running the block); dynamic shared memory is a per-block buffer of the
//   launch's size, filled with a poison pattern (NaN) at each block start.
// - A launch a GPU would refuse is refused (throws, naming the kernel): a
//   block over 1024 threads or over the kernel's declared launch bound
//   (STRATA_LAUNCH_BOUNDS), a grid over CUDA's limits, dynamic shared memory
//   over 48 KiB without the kernel's opt-in (allow_dynamic_shared) or over the
//   device's 227 KiB with it (limits.cpp). Not modelled: static __shared__
//   bytes (they count against the same limits on a GPU) and registers, which
//   tests/check_kernel_resources.sh checks on the compiled kernels.
//
// Only portable.h and the executor's tests include this file.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace strata::simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The order threads of a block are resumed in after each barrier.
enum class Schedule { Forward, Reverse, Shuffled };
void set_schedule(Schedule s, uint64_t seed = 1);
Schedule schedule();

// A kernel's identity for the launch limits: its address (STRATA_LAUNCH and
// gpu::allow_dynamic_shared pass it).
using KernelId = void (*)();

// Runs body() once per thread of every block of kernel `id` (`name` for
// messages and launch bounds). Throws strata::Error on a barrier misuse (see
// above) or a launch a GPU refuses (check_launch below).
void launch(const char* name, KernelId id, Dim3 grid, Dim3 block, size_t dynamic_shared,
            const std::function<void()>& body);

// ------------------------------------------------------------ launch limits
// (limits.cpp) The dynamic shared memory a kernel may have without opting in,
// and the most it may opt in to (H100 and H200: 227 KiB per block).
inline constexpr size_t kDefaultDynamicShared = 48 * 1024;
inline constexpr size_t kMaxDynamicShared = 227 * 1024;
// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes): throws
// when bytes exceed kMaxDynamicShared, as CUDA does.
void allow_dynamic_shared(KernelId id, size_t bytes);
// The dynamic shared memory kernel `id` may launch with: its last opt-in
// (which may also lower it), kDefaultDynamicShared when it never opted in.
size_t dynamic_shared_limit(KernelId id);
// Registers the launch bound of the kernel named `name` (STRATA_LAUNCH_BOUNDS
// at static initialisation); returns true.
bool declare_max_threads(const char* name, int max_threads);
// The declared bound of a kernel by the name STRATA_LAUNCH passes
// ("cu::k_rmsnorm<float>" is k_rmsnorm's); 0 when it declared none.
int max_threads(const char* name);
// Throws if a GPU would refuse this launch (every limit of the list above).
void check_launch(const char* name, KernelId id, Dim3 grid, Dim3 block, size_t dynamic_shared);

// Launches since the process started (tests check a path ran its kernels),
// copies and fills queued on a stream (gpu::copy_async, zero_async: each a
// GPU command like a launch), and host synchronisations of the SIMT
// backend's stream (gpu::sync: where a GPU would stall the host; tests count
// them per training step).
uint64_t launch_count();
uint64_t copy_count();
void note_copy();
uint64_t sync_count();
void note_sync();

// ------------------------------------------------------------ device memory
// The SIMT backend's "device" memory. In strict mode (STRATA_SIMT_STRICT=1 in
// the environment, or set_strict) every allocation is its own mapping that
// is inaccessible except while a kernel, a backend copy or the GEMM stand-in
// runs (DeviceAccess): host code that reads or writes device memory directly,
// which would crash or corrupt on a GPU, then stops with a one-line message
// naming the address instead of silently working. Single-process only (MPI
// cannot send from protected memory).
void* device_alloc(size_t bytes);
void device_free(void* p);
void set_strict(bool on);
bool strict();
// Calls of device_alloc / device_free since the process started: the tests
// check that a training step in steady state reuses the backend's cached
// blocks (backends/cuda/device_pool.h) instead of allocating.
uint64_t device_alloc_count();
uint64_t device_free_count();
// Strict mode: throws strata::Error naming `op` unless p lies in device
// memory (an op given a host pointer for an activation or a weight runs here,
// host memory either way, but fails on a GPU). No check outside strict mode.
void check_device_operand(const void* p, const char* op);
// While alive, device memory is accessible (nests).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// ------------------------------------------------------- pinned host memory
// Page-locked host memory (gpu::malloc_host), modelled for the hazard a GPU
// has and a pageable copy hides: cudaMemcpyAsync from or to pinned memory
// returns at once and the DMA reads or writes the host buffer later, so the
// buffer must neither be freed nor rewritten nor read before the copy has run.
// Here an async copy that touches a pinned buffer (note_async_copy) stays
// "incomplete" until the next synchronisation of the stream (note_sync) or a
// host wait on an event recorded after it (wait_event); freeing the buffer
// (pinned_free) or touching it from the host (check_pinned_idle: before
// re-staging or reading it) while a copy is incomplete throws strata::Error
// naming the buffer. The SIMT backend has one stream, so the model has one.
void* pinned_alloc(size_t bytes, const char* name);
void pinned_free(void* p);
void note_async_copy(const void* host, size_t bytes);
void check_pinned_idle(const void* p, const char* what);
// An event: the number of copies touching pinned memory queued so far
// (tests count staged copies with it); waiting on it completes them.
uint64_t record_event();
void wait_event(uint64_t event);

// ------------------------------------------------------------ graph capture
// The model of a CUDA graph made by stream capture (graph.cpp): between
// begin_capture() and end_capture(), every command queued on the SIMT stream
// (a launch, a copy or fill, the GEMM stand-in's product) is recorded with
// its arguments as they were when queued, and not run; replay() runs the
// recording in order (a launch is then counted, checked and run as any
// other). As a GPU refuses them while a stream captures, a host
// synchronisation (note_sync) and a device allocation throw, naming what was
// attempted. Process-wide, like the SIMT backend's one stream.
struct Recording {
  std::vector<std::string> names;  // what each command is (tests, messages)
  std::vector<std::function<void()>> commands;
};
void begin_capture();
// The commands recorded since begin_capture (throws when none is under way).
std::shared_ptr<const Recording> end_capture();
bool capturing();
// While capturing: records `command` and returns true (the caller must not
// run it); otherwise returns false.
bool record(const char* what, const std::function<void()>& command);
// Runs a recording's commands (not while capturing).
void replay(const Recording& r);
// Throws if a capture is under way: `what` (a host synchronisation, an
// allocation) is not allowed then.
void refuse_while_capturing(const char* what);

// ---------------------------------------------------------------- per thread
struct ThreadState {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned linear = 0;  // thread index in the block
};
ThreadState& current();
unsigned char* dynamic_shared();

// ---------------------------------------------------------------- barriers
void syncthreads();
int syncthreads_count(int pred);
int syncthreads_and(int pred);
int syncthreads_or(int pred);
void syncwarp(unsigned mask);
// Warp exchange: every participating lane offers `value` (up to 8 bytes);
// returns the value of lane `src` (its own when src is outside the mask).
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, const char* op);
unsigned warp_ballot(unsigned mask, int pred);

// Stops the calling kernel thread's launch with `msg` (launch() throws it,
// naming the kernel and block): what a misused instruction does.
[[noreturn]] void thread_fail(const std::string& msg);

// A warp-wide matrix instruction (mma.sync, ldmatrix: the ".sync.aligned"
// ones, which every lane of a full warp must execute together): each lane
// offers `in_bytes` (<= kWarpMatrixBytes) of operands; once all 32 arrived,
// `fn` runs once over the 32 lanes' operands (lane l's at in + l *
// kWarpMatrixBytes) and writes each lane's result likewise; each lane gets its
// `out_bytes`. A warp with fewer than 32 threads, or lanes in different warp
// operations, is an error naming the instruction.
inline constexpr size_t kWarpMatrixBytes = 64;
using WarpMatrixFn = void (*)(const unsigned char* in, unsigned char* out);
void warp_matrix(const char* op, const void* in, size_t in_bytes, void* out, size_t out_bytes,
                 WarpMatrixFn fn);

// The matrix instructions the tensor-core kernels use (mma.cpp), with the
// PTX ISA's fragment layouts ("Warp-level matrix fragments"): lane l, group
// g = l / 4, thread-in-group t = l % 4; a bf16x2 register holds the element
// of the lower index in its low 16 bits.
//  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + d, with
//   A (16x16) a[r]: row g + 8 (r & 1), columns 2t + 8 (r >> 1) + {0, 1};
//   B (16x8)  b[r]: rows 2t + 8 r + {0, 1}, column g;
//   C, D (16x8) d[i]: row g + 8 (i >> 1), column 2t + (i & 1).
//   Products of bf16 are exact in fp32; they are summed in k order in fp32.
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]);
//  ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i .. 8i+7 give
//   the addresses of rows 0..7 of matrix i (8 b16 elements, 16-byte
//   aligned); r[i] of lane l gets row l / 4, elements 2 (l % 4) + {0, 1} of
//   matrix i, or with trans rows 2 (l % 4) + {0, 1} of column l / 4.
void ldmatrix_x4(uint32_t r[4], const void* row, bool trans);

inline unsigned lane_id() { return current().linear & 31u; }

template <typename V>
V shfl_exchange(unsigned mask, V v, int src, const char* op) {
  static_assert(sizeof(V) <= 8 && std::is_trivially_copyable_v<V>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(V));
  const uint64_t got = warp_exchange(mask, bits, src, op);
  V r;
  std::memcpy(&r, &got, sizeof(V));
  return r;
}

}  // namespace strata::simt
