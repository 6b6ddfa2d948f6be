// The portability layer of the CUDA kernels. Kernel sources
// (backends/cuda/kernels/*.cuh) are written once against this header and
// compile two ways:
//   - with nvcc (__CUDACC__): real CUDA; launches go on a cudaStream_t;
//   - with the host compiler: the CPU SIMT executor (simt/simt.h) runs them,
//     threads as fibers, barriers and warp operations with CUDA's semantics,
//     so CI checks every kernel against the CPU backend without a GPU.
//
// Kernels use: STRATA_GLOBAL (a __global__ template), STRATA_DEVICE (an inline
// __device__ helper), __shared__ arrays, STRATA_DYNAMIC_SHARED, threadIdx /
// blockIdx / blockDim / gridDim, __syncthreads, __syncwarp, __shfl_*_sync,
// __ballot_sync / __any_sync / __all_sync, atomicAdd, the tensor-core
// instructions mma_bf16_16816 and ldmatrix_x4(_trans), pack_bf16x2 and
// load_f32x4 (a 128-bit load where aligned), the asynchronous copies
// cp_async16 / cp_async_commit / cp_async_wait<N>, and the math helpers of
// kernels/common.cuh (never CUDA's fast-math intrinsics directly). Callers
// launch with STRATA_LAUNCH(kernel, grid, block, shared_bytes, stream, args...).
//
// Launch limits a GPU enforces, declared here so the SIMT build enforces them
// too (a launch that a GPU refuses throws under SIMT, naming the kernel):
//   - a block of more than 1024 threads, or a grid beyond CUDA's limits;
//   - more threads than the kernel's launch bound. A kernel declares it with
//     STRATA_LAUNCH_BOUNDS(name, n) before its template and
//     STRATA_BOUNDS_OF(name) in its declaration (nvcc: __launch_bounds__(n, 1),
//     which also keeps the kernel's registers within what n threads may have);
//   - more than 48 KiB (49152 bytes) of dynamic shared memory, unless the host
//     called gpu::allow_dynamic_shared(kernel, bytes) for at least that many
//     first (cudaFuncSetAttribute's opt-in), and more than the device's 227 KiB
//     (232448 bytes, H100 and H200) even then.
// Registers x threads against the register file, and spills, are checked on
// the compiled kernels (tests/check_kernel_resources.sh), not here: only
// ptxas knows them. GEMM operands cuBLASLt would reject are not refused but
// rerouted to strata's own GEMM kernel, in both builds (gemm_engine.h).
//
// gpu:: is the memory and stream runtime the backend needs, the same two ways.
//
// Both builds of the kernels and of the backend can sit in one binary (a CUDA
// build links the "cuda" and the "simt" backend): everything compiled against
// this header lives in the inline namespace STRATA_TARGET_NS (device / simt),
// so the two sets of definitions never collide at link time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cuda/kernel_times.h"
#include "core/error.h"

#if defined(__CUDACC__)
// ==================================================================== CUDA
#include <cuda_runtime.h>

#include <memory>

#define STRATA_TARGET_NS device

#define STRATA_GLOBAL __global__
#define STRATA_DEVICE __device__ __forceinline__
// Unrolls the loop that follows completely (register-indexed accumulators).
#define STRATA_UNROLL _Pragma("unroll")
#define STRATA_DYNAMIC_SHARED(T, name)                                 \
  extern __shared__ __align__(16) unsigned char strata_dynamic_smem[]; \
  T* name = reinterpret_cast<T*>(strata_dynamic_smem)
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...)                            \
  do {                                                                                   \
    ::strata::gpu::LaunchTimer strata_launch_timer_(#kernel, stream);                    \
    kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>(__VA_ARGS__); \
    ::strata::gpu::check(cudaGetLastError(), #kernel);                                   \
  } while (0)
// The bound is a constant named after the kernel, so the declaration cannot
// name another kernel's (nvcc reports an undeclared name). The second
// argument, one block per SM at least, lets ptxas give a thread all the
// registers the bound allows: given the maximum alone it traded registers
// for occupancy and spilled (attention dkv: 96 registers, 28 bytes of spill
// stores on sm_90; 128 registers and none with it).
#define STRATA_LAUNCH_BOUNDS(name, n) inline constexpr int name##_max_threads = (n)
#define STRATA_BOUNDS_OF(name) __launch_bounds__(name##_max_threads, 1)

// Tensor-core instructions (sm_80 and later), the same two ways: the SIMT
// build emulates them with the PTX fragment layouts (simt.h). `row` is a
// shared-memory address (16-byte aligned) of the lane's row of an 8x8 b16
// matrix; see simt.h for which lane gets which elements.
STRATA_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
STRATA_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
STRATA_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Two floats rounded to nearest even into a bf16x2 register (lo in the low
// half): one cvt instruction. NaN becomes the canonical bf16 NaN.
STRATA_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Asynchronous copies into shared memory (cp.async, sm_80 and later): 16
// bytes from global memory (16-byte aligned at both ends) that do not pass
// through registers; with read false nothing is read and the 16 bytes become
// zeros. Copies issued since the last commit form a group; wait<N> returns
// once at most N groups are still in flight (the caller's own copies: a
// barrier must follow before other threads read them).
STRATA_DEVICE void cp_async16(void* smem, const void* gmem, bool read) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
               "r"(read ? 16 : 0)
               : "memory");
}
STRATA_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
STRATA_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Four consecutive floats: one 128-bit load where p is 16-byte aligned.
STRATA_DEVICE void load_f32x4(float (&v)[4], const float* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else {
    for (int e = 0; e < 4; ++e) v[e] = p[e];
  }
}

namespace strata::gpu {
inline namespace STRATA_TARGET_NS {
inline constexpr bool kSimulated = false;
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) ::strata::fail(::strata::cat("CUDA: ", what, ": ", cudaGetErrorString(e)));
}
inline void* malloc_device(size_t bytes) {
  void* p = nullptr;
  if (bytes) check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
inline void free_device(void* p) {
  if (p) check(cudaFree(p), "cudaFree");
}
// (Checked under the SIMT executor's strict mode; a GPU faults by itself.)
inline void check_operand(const void*, const char*) {}
// nullptr when the device is out of memory (the pool then trims and retries).
inline void* try_malloc_device(size_t bytes) {
  void* p = nullptr;
  if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the caller recovers
    return nullptr;
  }
  return p;
}
// Page-locked host memory: async copies from and to it are true DMA, so it
// must outlive them and stay unchanged until they ran (an event or a sync).
inline void* malloc_host(size_t bytes, const char*) {
  void* p = nullptr;
  if (bytes) check(cudaMallocHost(&p, bytes), "cudaMallocHost");
  return p;
}
inline void free_host(void* p) {
  if (p) check(cudaFreeHost(p), "cudaFreeHost");
}
// Before the host rewrites or reads a pinned buffer (checked under SIMT).
inline void host_touch(const void*, const char*) {}
// Events: recorded on a stream after some work; event_wait blocks the host
// until that work has finished.
using Event = cudaEvent_t;
inline Event event_create() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}
inline void event_destroy(Event e) {
  if (e) cudaEventDestroy(e);
}
inline void event_record(Event& e, void* s) {
  check(cudaEventRecord(e, static_cast<cudaStream_t>(s)), "cudaEventRecord");
}
inline void event_wait(Event e) { check(cudaEventSynchronize(e), "cudaEventSynchronize"); }
// Stream-ordered scratch: safe to free while earlier kernels still use it.
inline void* malloc_async(size_t bytes, void* s) {
  void* p = nullptr;
  if (bytes) check(cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(s)), "cudaMallocAsync");
  return p;
}
inline void free_async(void* p, void* s) {
  if (p) check(cudaFreeAsync(p, static_cast<cudaStream_t>(s)), "cudaFreeAsync");
}
inline void copy_async(void* dst, const void* src, size_t bytes, void* s) {
  if (bytes)
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s)),
          "cudaMemcpyAsync");
}
inline void zero_async(void* p, size_t bytes, void* s) {
  if (bytes) check(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(s)), "cudaMemsetAsync");
}
inline void sync(void* s) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
}
// Graphs by stream capture: the commands queued on `s` between begin_capture
// and end_capture become one executable graph, launched by replay. Thread-
// local capture mode: a call from this thread that may synchronise (cudaMalloc,
// cudaStreamSynchronize, a pageable copy) fails while capturing.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};
inline void begin_capture(void* s) {
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(s), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}
inline std::unique_ptr<GraphExec> end_capture(void* s) {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph), "cudaStreamEndCapture");
  auto g = std::make_unique<GraphExec>();
  const cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate");
  return g;
}
inline void replay(const GraphExec& g, void* s) {
  check(cudaGraphLaunch(g.exec, static_cast<cudaStream_t>(s)), "cudaGraphLaunch");
}
// Records a CUDA event on `stream` (kernel_times.h); resolved later.
void* record_timing_event(void* stream);
void add_pending_time(const char* name, void* start, void* stop);
// While kernel timing is on: events around one launch (or one GEMM).
class LaunchTimer {
 public:
  LaunchTimer(const char* name, void* stream) : name_(name), stream_(stream) {
    if (kernel_timing()) start_ = record_timing_event(stream);
  }
  ~LaunchTimer() {
    if (start_) add_pending_time(name_, start_, record_timing_event(stream_));
  }
  LaunchTimer(const LaunchTimer&) = delete;
  LaunchTimer& operator=(const LaunchTimer&) = delete;

 private:
  const char* name_;
  void* stream_;
  void* start_ = nullptr;
};
// Lets `kernel` launch with up to `bytes` of dynamic shared memory (past the
// 48 KiB every kernel gets); CUDA refuses more than the device's opt-in maximum.
template <typename... A>
inline void allow_dynamic_shared(void (*kernel)(A...), size_t bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}
}  // namespace STRATA_TARGET_NS
}  // namespace strata::gpu

#else
// ==================================================================== SIMT
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>

#include "backends/cuda/simt/simt.h"

#define STRATA_TARGET_NS simt
using dim3 = ::strata::simt::Dim3;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define STRATA_GLOBAL inline
#define STRATA_DEVICE inline
#define STRATA_UNROLL _Pragma("GCC unroll 16")
#define STRATA_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::strata::simt::dynamic_shared())
#define threadIdx (::strata::simt::current().thread_idx)
#define blockIdx (::strata::simt::current().block_idx)
#define blockDim (::strata::simt::current().block_dim)
#define gridDim (::strata::simt::current().grid_dim)
// The arguments are evaluated and copied when the launch is queued, as CUDA
// copies a kernel's parameters (a captured launch replays with these).
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...)                                   \
  do {                                                                                          \
    ::strata::gpu::LaunchTimer strata_launch_timer_(#kernel, (stream));                         \
    auto strata_launch_args_ = std::make_tuple(__VA_ARGS__);                                    \
    ::strata::simt::launch(#kernel, reinterpret_cast<::strata::simt::KernelId>(&kernel),        \
                           dim3(grid), dim3(block), (smem),                                     \
                           [strata_launch_args_] { std::apply(kernel, strata_launch_args_); }); \
  } while (0)
// The executor looks the bound up by the kernel's name (what STRATA_LAUNCH
// passes, less namespaces and template arguments).
#define STRATA_LAUNCH_BOUNDS(name, n)            \
  inline constexpr int name##_max_threads = (n); \
  inline const bool name##_bound_registered =    \
      ::strata::simt::declare_max_threads(#name, name##_max_threads)
#define STRATA_BOUNDS_OF(name)

inline void __syncthreads() { ::strata::simt::syncthreads(); }
inline int __syncthreads_count(int p) { return ::strata::simt::syncthreads_count(p); }
inline int __syncthreads_and(int p) { return ::strata::simt::syncthreads_and(p); }
inline int __syncthreads_or(int p) { return ::strata::simt::syncthreads_or(p); }
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) { ::strata::simt::syncwarp(mask); }

// Shuffles with CUDA's `width` rules: lanes form segments of `width`; a source
// past the lane's segment (down, xor) or before it (up) gives the lane its own
// value, as does a lane outside the mask or the block.
template <typename V>
V __shfl_sync(unsigned mask, V v, int src, int width = 32) {
  const int lane = int(::strata::simt::lane_id());
  const int base = lane / width * width;
  return ::strata::simt::shfl_exchange(mask, v, base + (src % width), "__shfl_sync");
}
template <typename V>
V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = 32) {
  const int lane = int(::strata::simt::lane_id());
  const int src = lane ^ lane_mask;
  const bool inside = src < (lane / width + 1) * width;  // earlier segments are readable
  return ::strata::simt::shfl_exchange(mask, v, inside ? src : -1, "__shfl_xor_sync");
}
template <typename V>
V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const int lane = int(::strata::simt::lane_id());
  const int src = lane + int(delta);
  const bool inside = src / width == lane / width;
  return ::strata::simt::shfl_exchange(mask, v, inside ? src : -1, "__shfl_down_sync");
}
template <typename V>
V __shfl_up_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const int lane = int(::strata::simt::lane_id());
  const int src = lane - int(delta);
  const bool inside = src >= lane / width * width;
  return ::strata::simt::shfl_exchange(mask, v, inside ? src : -1, "__shfl_up_sync");
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return ::strata::simt::warp_ballot(mask, pred);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, !pred) == 0; }

template <typename V>
V atomicAdd(V* p, V v) {
  return std::atomic_ref<V>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <typename V>
V atomicMax(V* p, V v) {
  std::atomic_ref<V> a(*p);
  V old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename V>
V atomicCAS(V* p, V expected, V desired) {
  std::atomic_ref<V>(*p).compare_exchange_strong(expected, desired);
  return expected;
}

inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ::strata::simt::mma_m16n8k16_bf16(d, a, b);
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  ::strata::simt::ldmatrix_x4(r, row, false);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  ::strata::simt::ldmatrix_x4(r, row, true);
}
// Round to nearest even, as cvt.rn.bf16x2.f32 (NaN: a quiet NaN).
inline uint32_t pack_bf16x2(float lo, float hi) {
  const auto bits = [](float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    return (x & 0x7FFFFFFFu) > 0x7F800000u ? ((x >> 16) | 0x0040u) & 0xFFFFu : rounded & 0xFFFFu;
  };
  return bits(lo) | (bits(hi) << 16);
}
inline void load_f32x4(float (&v)[4], const float* p) { std::memcpy(v, p, sizeof v); }
// The copy happens at once (an order a GPU may also produce); the alignment
// a GPU needs is checked.
inline void cp_async16(void* smem, const void* gmem, bool read) {
  if ((reinterpret_cast<uintptr_t>(smem) & 15u) != 0 ||
      (read && (reinterpret_cast<uintptr_t>(gmem) & 15u) != 0))
    ::strata::simt::thread_fail("cp.async: an address is not 16-byte aligned");
  if (read)
    std::memcpy(smem, gmem, 16);
  else
    std::memset(smem, 0, 16);
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

namespace strata::gpu {
inline namespace STRATA_TARGET_NS {
inline constexpr bool kSimulated = true;
inline void* malloc_device(size_t bytes) { return ::strata::simt::device_alloc(bytes); }
inline void free_device(void* p) { ::strata::simt::device_free(p); }
// An op's operand must be device memory (strict SIMT mode checks it).
inline void check_operand(const void* p, const char* op) {
  ::strata::simt::check_device_operand(p, op);
}
inline void* malloc_async(size_t bytes, void*) { return malloc_device(bytes); }
inline void free_async(void* p, void*) { free_device(p); }
inline void* try_malloc_device(size_t bytes) { return malloc_device(bytes); }
// Pinned memory with the GPU's lifetime rules enforced (simt.h).
inline void* malloc_host(size_t bytes, const char* name) {
  return ::strata::simt::pinned_alloc(bytes, name);
}
inline void free_host(void* p) { ::strata::simt::pinned_free(p); }
inline void host_touch(const void* p, const char* what) {
  ::strata::simt::check_pinned_idle(p, what);
}
using Event = uint64_t;
inline Event event_create() { return 0; }
inline void event_destroy(Event) {}
inline void event_record(Event& e, void*) { e = ::strata::simt::record_event(); }
inline void event_wait(Event e) { ::strata::simt::wait_event(e); }
// The copy happens now, but a pinned end of it counts as in use until the
// stream is synchronised or an event after it waited on (simt.h).
// (Captured: recorded, and run at each replay.)
inline void copy_async(void* dst, const void* src, size_t bytes, void*) {
  if (!bytes) return;
  const auto run = [=] {
    ::strata::simt::DeviceAccess access;
    ::strata::simt::note_copy();
    std::memmove(dst, src, bytes);
    ::strata::simt::note_async_copy(dst, bytes);
    ::strata::simt::note_async_copy(src, bytes);
  };
  if (!::strata::simt::record("cudaMemcpyAsync", run)) run();
}
inline void zero_async(void* p, size_t bytes, void*) {
  if (!bytes) return;
  const auto run = [=] {
    ::strata::simt::DeviceAccess access;
    ::strata::simt::note_copy();
    std::memset(p, 0, bytes);
  };
  if (!::strata::simt::record("cudaMemsetAsync", run)) run();
}
// Graphs (stream capture; simt.h).
struct GraphExec {
  std::shared_ptr<const ::strata::simt::Recording> recording;
};
inline void begin_capture(void*) { ::strata::simt::begin_capture(); }
inline std::unique_ptr<GraphExec> end_capture(void*) {
  return std::make_unique<GraphExec>(GraphExec{::strata::simt::end_capture()});
}
inline void replay(const GraphExec& g, void*) { ::strata::simt::replay(*g.recording); }
inline void sync(void*) { ::strata::simt::note_sync(); }
// While kernel timing is on (kernel_times.h): the host time of one launch.
class LaunchTimer {
 public:
  LaunchTimer(const char* name, void*) : name_(name) {
    if (kernel_timing()) start_ = std::chrono::steady_clock::now(), on_ = true;
  }
  ~LaunchTimer() {
    if (on_)
      add_kernel_time(name_, std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start_)
                                 .count());
  }
  LaunchTimer(const LaunchTimer&) = delete;
  LaunchTimer& operator=(const LaunchTimer&) = delete;

 private:
  const char* name_;
  bool on_ = false;
  std::chrono::steady_clock::time_point start_;
};
template <typename... A>
inline void allow_dynamic_shared(void (*kernel)(A...), size_t bytes) {
  ::strata::simt::allow_dynamic_shared(reinterpret_cast<::strata::simt::KernelId>(kernel), bytes);
}
}  // namespace STRATA_TARGET_NS
}  // namespace strata::gpu

#endif
