// The op interface: one forward and one backward per op, independent of where
// the data lives. The model, the optimizer, evaluation and generation call ops
// only through a Backend; backends/cpu implements it with OpenMP kernels and
// oneDNN, and a CUDA backend implements the same calls with device pointers.
// This file and the op list it includes (ops/ops.def) are the contract:
// shapes, layouts, what is saved for backward and the accumulation rule of
// every gradient. It includes no backend.
//
// Conventions
//   N = B*T tokens, C = hidden size; rows are row-major and contiguous unless
//   a leading dimension says otherwise.
//   Parameter gradients always ACCUMULATE (+=), so micro-batches and shared
//   weights (tied embeddings, the head shared by early exits) just add up.
//   Activation gradients are "=" (overwrite) or "+=" as stated per op.
//   A null gradient pointer means "not needed" (frozen parameter): that part of
//   the backward is skipped.
//   Pointers are backend memory unless the op says "host" (token ids and
//   targets are host memory).
//   Calls are ordered on the backend's stream; results are visible to the host
//   after synchronize() (a no-op on the CPU). Ops that return a scalar to the
//   host (the cross-entropy's loss, mse_forward) synchronize: one read per
//   loss term and step. Reductions that only feed a later decision (the
//   squares of the gradients for the global norm) add into scalar
//   accumulators in backend memory instead, read once per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory_info.h"

#include "ops/types.h"

namespace strata::ops {

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ------------------------------------------------------------ memory, stream
  // Zero-initialised allocations in the backend's memory space.
  virtual T* alloc(size_t n) = 0;
  virtual void free(T* p) = 0;
  // zero and copy count elements of the activation's storage (T or bf16);
  // a copy between the two storages converts (widening is exact, narrowing
  // rounds to nearest even): how a bf16 activation meets an fp32 buffer (the
  // tensor-parallel reductions, host reads).
  virtual void zero(Act<T> p, int64_t n) = 0;
  virtual void copy(Act<T> dst, ActIn<T> src, int64_t n) = 0;
  virtual void to_host(T* host_dst, const T* src, int64_t n) = 0;
  virtual void from_host(T* dst, const T* host_src, int64_t n) = 0;
  // Whether backend memory is host memory (the CPU backend): callers may then
  // read it directly instead of staging through to_host.
  virtual bool is_host() const = 0;
  // The stream ops are ordered on (cudaStream_t on CUDA; null on the CPU),
  // for communicators that must order their work after it.
  virtual void* stream() const = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;
  // Scalar accumulators: n doubles in backend memory (zeroed), added to on the
  // stream by reductions such as sum_squares; read_scalars synchronizes and
  // copies them to the host, so a step pays one round trip for all of them.
  virtual double* alloc_scalars(int n) = 0;
  virtual void free_scalars(double* p) = 0;
  virtual void zero_scalars(double* p, int n) = 0;
  virtual void read_scalars(double* host_dst, const double* p, int n) = 0;
  // Small int32 arrays in backend memory (zeroed) that ops read when they run
  // (decoding's positions and cache slots); ints_from_host copies n values
  // in on the stream (the host array may be reused when it returns).
  virtual int32_t* alloc_ints(size_t n) = 0;
  virtual void free_ints(int32_t* p) = 0;
  virtual void ints_from_host(int32_t* dst, const int32_t* host_src, size_t n) = 0;

  // ------------------------------------------------------------------- graphs
  // Recorded op sequences (CUDA graphs; the SIMT executor's model of them):
  // the ops queued between begin_capture() and end_capture() are recorded
  // with their arguments, not run, and replay() runs them again in one go,
  // without a launch per op. A number an op takes as an argument is the one
  // of the capture; what it reads from backend memory (the positions of
  // decode_rope_append, attention_decode) is read at each replay. A host
  // synchronisation or a host read while capturing is an error. A recording
  // refers to the backend's own staging and scratch as they were: replay it
  // only while graph_epoch() is what it was at the capture (the epoch moves
  // whenever such memory does, e.g. when frozen weight copies are dropped),
  // and capture only after the same ops ran once outside a capture at this
  // epoch (what they allocate on first use must exist: capture allocates
  // nothing). generation (infer/engine.cpp) keeps these rules.
  class Graph {
   public:
    virtual ~Graph() = default;
  };
  // Whether this backend records graphs now (not the CPU; not while kernel
  // timing is on, which needs a launch per kernel).
  virtual bool graphs() const { return false; }
  virtual void begin_capture() { throw Error(std::string("backend ") + name() + " has no graphs"); }
  virtual std::unique_ptr<Graph> end_capture() {
    throw Error(std::string("backend ") + name() + " has no graphs");
  }
  virtual void replay(const Graph& g) {
    (void)g;
    throw Error(std::string("backend ") + name() + " has no graphs");
  }
  virtual uint64_t graph_epoch() const { return 0; }

  // ------------------------------------------------------------------ matmuls
  // Matmul precision of the linear layers and the LM head (FP32, or BF16 with
  // fp32 accumulation and master weights). On the CPU this is process-wide.
  virtual void set_matmul_precision(MatmulPrecision p) = 0;
  // Whether bf16 matmuls are native here (precision "auto" picks bf16 then).
  virtual bool native_bf16() const = 0;
  // One line on how matmuls of this precision run, for logs and `strata info`.
  virtual std::string matmul_path(MatmulPrecision p) const = 0;
  // Generation brackets its passes with freeze_weights(true) ... (false): the
  // weights do not change in between, so a backend may keep converted copies
  // of them (the CPU keeps bf16 copies for few-row bf16 matmuls, halving the
  // bytes a decode step reads; the kernel backends' GEMM engines keep one bf16
  // copy of each weight instead of converting it on every call). Both calls
  // drop any such copies.
  virtual void freeze_weights(bool frozen) { (void)frozen; }
  // The same for a training step: the weights in [base, base + n) do not
  // change until hold_weights(nullptr, 0) (the optimizer runs after), so a
  // backend may keep converted copies of operands it reads from that range
  // (the kernel backends' GEMM engines convert each weight to bf16 once per
  // step instead of in every GEMM that reads it). Each call drops any copies.
  virtual void hold_weights(const T* base, int64_t n) {
    (void)base;
    (void)n;
  }
  // Which attention kernels run (AttentionImpl). Throws strata::Error where
  // this backend cannot run them: cuDNN's on device cuda only, in a build
  // with cuDNN (the kernel backends override this).
  virtual void set_attention(AttentionImpl a) {
    if (a != AttentionImpl::Strata)
      throw Error(std::string("cudnn runs on device cuda only (this backend is ") + name() + ")");
  }

  // ---------------------------------------------------------------------- ops
  // One pure virtual per entry of ops/ops.def, where each op's contract is.
#define STRATA_DEFAULT(...) = __VA_ARGS__
#define STRATA_OP(role, name, ret, params, args) virtual ret name params = 0;
#include "ops/ops.def"
#undef STRATA_OP
#undef STRATA_DEFAULT
};

// The declared ops by name, in the order of ops/ops.def, and whether each is
// a forward (tests check it against a reference) or a backward (tests check
// it against finite differences of its forward).
enum class OpRole { Forward, Backward };
struct OpInfo {
  const char* name;
  OpRole role;
};
inline constexpr OpInfo kOps[] = {
#define STRATA_OP(role, name, ret, params, args) {#name, OpRole::role},
#include "ops/ops.def"
#undef STRATA_OP
};

// The one backend factory (backends/factory.cpp), by device name:
//   "cpu"   the CPU kernels (float: the fast path; double: gradient checks);
//   "cuda"  the CUDA kernels and cuBLASLt on the current GPU (CUDA builds);
//   "simt"  the same CUDA kernels on the CPU SIMT executor (tests, no GPU);
//   "auto"  cuda where a GPU is visible, else cpu.
// Throws strata::Error naming the devices this build has.
template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& name = "cpu");
// "auto" resolved to the device make_backend would pick; other names as given.
std::string resolve_device(const std::string& name);
// The device names this build accepts, for help and errors.
std::string backend_names();
// The GPU of this process (device "cuda"): its rank on the node (Open MPI,
// Slurm, MPICH, PMIx variables) modulo the visible devices, so one rank per
// GPU needs no setting; 0 alone or without CUDA.
int local_cuda_device();
// One line for logs: "device cpu (auto: no CUDA device visible)".
std::string device_choice(const std::string& requested);
// The memory left to allocate on a resolved device: this process's GPU's free
// memory for "cuda" (source "GPU <n> free memory"), the host's otherwise
// (host_memory_available, core/memory_info.h). STRATA_MEMORY_LIMIT overrides both.
MemoryLimit memory_available(const std::string& device);

// What this build's backends are, for `strata info` (backends/factory.cpp).
struct BackendsInfo {
  std::string gemm;                      // the CPU GEMM library and version: "oneDNN 3.0.0"
  std::string matmul_fp32, matmul_bf16;  // how the CPU backend runs matmuls of each precision
  bool native_bf16 = false;              // so precision "auto" picks bf16
  std::string cuda;               // "backend built (runtime 13.0); 1 device(s) visible", or why not
  std::string devices;            // the device names, and the one "auto" picks
  std::vector<std::string> gpus;  // one line per visible GPU: name, sm_XY, SMs, memory, peaks
};
BackendsInfo describe_backends();

// The peak rates of the GPU behind device `device` (the local rank's GPU for
// "cuda"; "auto" resolved first): the known-chip table or the computed rates
// of backends/cuda/gpu_peak.h. All zero, `what` empty, for cpu and simt.
struct AcceleratorPeak {
  double fp32_gflops = 0, bf16_gflops = 0, dram_gbs = 0;
  std::string what;  // "NVIDIA H100 80GB HBM3 (known chip: H100 SXM5 datasheet)"
};
AcceleratorPeak accelerator_peak(const std::string& device);

// Holds a backend's weights for a scope (Backend::hold_weights); a null base
// holds nothing.
template <typename T>
class HeldWeights {
 public:
  HeldWeights(Backend<T>& be, const T* base, int64_t n) : be_(be), held_(base != nullptr) {
    if (held_) be_.hold_weights(base, n);
  }
  ~HeldWeights() {
    if (held_) be_.hold_weights(nullptr, 0);
  }
  HeldWeights(const HeldWeights&) = delete;
  HeldWeights& operator=(const HeldWeights&) = delete;

 private:
  Backend<T>& be_;
  bool held_;
};

// RAII allocation in a backend's memory space.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend<T>* be, size_t n) : be_(be), n_(n), p_(n ? be->alloc(n) : nullptr) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      n_ = o.n_;
      p_ = o.p_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  // At least n elements of be's memory: reallocated only to grow, and then
  // without the old contents (scratch that a caller sizes per call).
  T* reserve(Backend<T>* be, size_t n) {
    if (n_ < n) *this = DeviceBuffer(be, n);
    return p_;
  }

 private:
  void release() {
    if (p_) be_->free(p_);
    p_ = nullptr;
  }
  Backend<T>* be_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

// RAII activation buffer: n elements of storage dt (T's own type, or bf16
// where T is float) in a backend's memory space, zeroed.
template <typename T>
class ActBuffer {
 public:
  ActBuffer() = default;
  ActBuffer(Backend<T>* be, size_t n, Dtype dt = Act<T>::kNative)
      : dt_(Act<T>(static_cast<void*>(nullptr), dt).dtype()),  // refuses one T cannot have
        n_(n),
        raw_(be, (n * dtype_size(dt) + sizeof(T) - 1) / sizeof(T)) {}
  Act<T> data() { return raw_.data() ? Act<T>(static_cast<void*>(raw_.data()), dt_) : Act<T>(); }
  ActIn<T> data() const {
    return raw_.data() ? ActIn<T>(static_cast<const void*>(raw_.data()), dt_) : ActIn<T>();
  }
  size_t size() const { return n_; }
  Dtype dtype() const { return dt_; }

 private:
  Dtype dt_ = Act<T>::kNative;
  size_t n_ = 0;
  DeviceBuffer<T> raw_;
};

}  // namespace strata::ops
