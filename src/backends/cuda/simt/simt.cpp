// The CPU SIMT executor (simt.h): fibers for the threads of a block, barriers
// and warp operations with CUDA's semantics, blocks spread over OpenMP.
#include "backends/cuda/simt/simt.h"

#include <omp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/error.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ------------------------------------------------------------ context switch
// x86-64 System V: saves the callee-saved registers, MXCSR and the x87 control
// word on the current stack, stores the stack pointer in *save_sp, switches to
// new_sp and restores the same from there. A new fiber's stack is prepared to
// look like one that was switched away from (make_frame below).
#if defined(__x86_64__)
extern "C" void strata_simt_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl strata_simt_switch
.type strata_simt_switch,@function
strata_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size strata_simt_switch,.-strata_simt_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#endif

namespace strata::simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // per thread of a block
constexpr size_t kGuardBytes = 4096;

std::atomic<int> g_schedule{int(Schedule::Forward)};
std::atomic<uint64_t> g_seed{1};
std::atomic<uint64_t> g_launches{0};
std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_device_allocs{0};
std::atomic<uint64_t> g_device_frees{0};

enum class FiberState { Ready, WaitBlock, WaitWarp, Done };

struct Fiber {
  char* stack = nullptr;  // mapping (guard page first)
  void* sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t ctx;
#endif
  ThreadState st;
  FiberState state = FiberState::Ready;
};

struct Warp {
  unsigned arrived = 0, expected = 0, gen = 0;
  const char* op = nullptr;
  uint64_t slots[2][32] = {};
  // warp_matrix: the lanes' operands and results, by round parity, and the
  // round (gen + 1) whose results are in mat_out.
  unsigned char mat_in[2][32][kWarpMatrixBytes] = {};
  unsigned char mat_out[2][32][kWarpMatrixBytes] = {};
  unsigned mat_done[2] = {0, 0};
};

// One OS thread's executor: runs one block at a time.
struct Runner {
  std::vector<Fiber> fibers;
  void* sched_sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t sched_ctx;
#endif
  Fiber* cur = nullptr;
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  unsigned n = 0, done = 0;
  // Block barrier.
  unsigned arrived = 0, gen = 0;
  int accum[2] = {0, 0};
  std::vector<Warp> warps;
  std::vector<unsigned char> smem;
  std::string error;  // set by a fiber before it gives up

  ~Runner() {
    for (Fiber& f : fibers)
      if (f.stack) munmap(f.stack, kStackBytes + kGuardBytes);
  }
};

thread_local Runner* t_runner = nullptr;

Runner& runner() {
  if (!t_runner) t_runner = new Runner();  // lives as long as its thread (pool threads persist)
  return *t_runner;
}

std::string dim_text(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

void switch_to_scheduler(Runner& r) {
#if defined(__x86_64__)
  strata_simt_switch(&r.cur->sp, r.sched_sp);
#else
  swapcontext(&r.cur->ctx, &r.sched_ctx);
#endif
}

void fiber_main() {
  Runner& r = runner();
  (*r.body)();
  r.cur->state = FiberState::Done;
  ++r.done;
  switch_to_scheduler(r);
  __builtin_unreachable();  // a finished fiber is never resumed
}

// A fiber that hits misuse records it and stops; the scheduler throws.
[[noreturn]] void fiber_fail(const std::string& msg) {
  Runner& r = runner();
  if (r.error.empty()) r.error = msg;
  r.cur->state = FiberState::Done;
  ++r.done;
  switch_to_scheduler(r);
  __builtin_unreachable();
}

void prepare(Fiber& f) {
  if (!f.stack) {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    STRATA_CHECK(p != MAP_FAILED, "SIMT executor: cannot map a fiber stack");
    mprotect(p, kGuardBytes, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    f.stack = static_cast<char*>(p);
  }
  char* top = f.stack + kGuardBytes + kStackBytes;
#if defined(__x86_64__)
  auto* w = reinterpret_cast<uint64_t*>(top);
  w[-1] = 0;                                        // fiber_main's (never used) return address
  w[-2] = reinterpret_cast<uint64_t>(&fiber_main);  // popped by `ret`
  for (int i = 3; i <= 8; ++i) w[-i] = 0;           // rbp rbx r12 r13 r14 r15
  uint32_t csr[2];
  asm volatile("stmxcsr %0" : "=m"(csr[0]));
  asm volatile("fnstcw %0" : "=m"(csr[1]));
  std::memcpy(&w[-9], csr, 8);
  f.sp = &w[-9];
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack + kGuardBytes;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
  f.state = FiberState::Ready;
}

void resume(Runner& r, Fiber& f) {
  r.cur = &f;
#if defined(__x86_64__)
  strata_simt_switch(&r.sched_sp, f.sp);
#else
  swapcontext(&r.sched_ctx, &f.ctx);
#endif
  r.cur = nullptr;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Why no thread can go on: for the deadlock message.
std::string stuck_text(const Runner& r) {
  unsigned wb = 0, ww = 0;
  for (unsigned i = 0; i < r.n; ++i) {
    wb += r.fibers[i].state == FiberState::WaitBlock;
    ww += r.fibers[i].state == FiberState::WaitWarp;
  }
  std::string s;
  if (wb)
    s = "__syncthreads reached by " + std::to_string(wb) + " of " + std::to_string(r.n) +
        " threads (" + std::to_string(r.done) + " exited, " + std::to_string(ww) +
        " wait at a warp operation)";
  else
    s = std::to_string(ww) + " threads wait at a warp operation their other lanes never reach";
  return s;
}

void run_block(Runner& r, Dim3 grid, Dim3 block, Dim3 bidx, size_t smem_bytes) {
  r.n = block.x * block.y * block.z;
  if (r.fibers.size() < r.n) r.fibers.resize(r.n);
  r.done = r.arrived = 0;
  r.accum[0] = r.accum[1] = 0;
  r.warps.assign((r.n + 31) / 32, Warp{});
  r.smem.assign(smem_bytes, 0xFF);
  for (unsigned i = 0; i < r.n; ++i) {
    Fiber& f = r.fibers[i];
    prepare(f);
    f.st.block_idx = bidx;
    f.st.block_dim = block;
    f.st.grid_dim = grid;
    f.st.linear = i;
    f.st.thread_idx = Dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
  }
  std::vector<unsigned> order(r.n);
  std::iota(order.begin(), order.end(), 0u);
  const auto sched = Schedule(g_schedule.load());
  if (sched == Schedule::Reverse) std::reverse(order.begin(), order.end());
  uint64_t rng = g_seed.load() ^ (uint64_t(bidx.x) << 40) ^ (uint64_t(bidx.y) << 20) ^ bidx.z;
  while (r.done < r.n) {
    if (sched == Schedule::Shuffled)
      for (unsigned i = r.n; i > 1; --i) std::swap(order[i - 1], order[splitmix(rng) % i]);
    bool progressed = false;
    for (unsigned i : order) {
      Fiber& f = r.fibers[i];
      if (f.state != FiberState::Ready) continue;
      resume(r, f);
      progressed = true;
      if (!r.error.empty()) return;
    }
    if (!progressed && r.done < r.n) {
      r.error = stuck_text(r);
      return;
    }
  }
}

void wait_here(Runner& r, FiberState s) {
  r.cur->state = s;
  switch_to_scheduler(r);
}

// Block barrier: returns the parity slot of this barrier's accumulator.
int block_barrier(int pred) {
  Runner& r = runner();
  const int p = int(r.gen & 1u);
  r.accum[p] += pred;
  if (++r.arrived == r.n) {
    for (unsigned i = 0; i < r.n; ++i)
      if (r.fibers[i].state == FiberState::WaitBlock) r.fibers[i].state = FiberState::Ready;
    r.arrived = 0;
    ++r.gen;
    r.accum[p ^ 1] = 0;  // the next barrier's slot; nobody has arrived there yet
  } else {
    wait_here(r, FiberState::WaitBlock);
  }
  return p;
}

// Warp rendezvous: every lane in the mask (that exists) must call the same
// operation. Offers `value`; returns this round's parity.
int warp_rendezvous(unsigned mask, uint64_t value, const char* op, Warp** out) {
  Runner& r = runner();
  const unsigned lin = r.cur->st.linear, lane = lin & 31u;
  Warp& w = r.warps[lin / 32];
  const unsigned first = lin & ~31u;
  const unsigned lanes = std::min(32u, r.n - first);
  const unsigned existing = lanes == 32 ? 0xFFFFFFFFu : ((1u << lanes) - 1u);
  const unsigned parts = mask & existing;
  const unsigned bit = 1u << lane;
  if (!(parts & bit))
    fiber_fail(std::string(op) + ": lane " + std::to_string(lane) + " of warp " +
               std::to_string(lin / 32) + " calls it with a mask that leaves it out");
  if (w.arrived == 0) {
    w.op = op;
    w.expected = parts;
  } else if (w.op != op || w.expected != parts) {
    fiber_fail(std::string("warp ") + std::to_string(lin / 32) + ": lane " + std::to_string(lane) +
               " calls " + op + " while other lanes are in " + w.op +
               (w.expected != parts ? " with another mask" : ""));
  }
  const int p = int(w.gen & 1u);
  w.slots[p][lane] = value;
  w.arrived |= bit;
  if (w.arrived == w.expected) {
    for (unsigned l = 0; l < 32; ++l) {
      if (!(w.expected & (1u << l)) || l == lane) continue;
      Fiber& f = r.fibers[first + l];
      if (f.state == FiberState::WaitWarp) f.state = FiberState::Ready;
    }
    w.arrived = 0;
    ++w.gen;
  } else {
    wait_here(r, FiberState::WaitWarp);
  }
  *out = &w;
  return p;
}

}  // namespace

// ------------------------------------------------------------ device memory
namespace {

constexpr size_t kPage = 4096;
std::mutex g_mem_mutex;
std::map<uintptr_t, size_t> g_regions;  // strict allocations: start -> mapped bytes
std::atomic<int> g_strict{-1};          // -1: not decided yet (environment)
int g_access_depth = 0;                 // DeviceAccess nesting (host thread)

void protect_all(int prot) {
  for (const auto& [start, bytes] : g_regions)
    mprotect(reinterpret_cast<void*>(start), bytes, prot);
}

bool in_region(uintptr_t a) {
  auto it = g_regions.upper_bound(a);
  if (it == g_regions.begin()) return false;
  --it;
  return a < it->first + it->second;
}

void on_segv(int sig, siginfo_t* info, void*) {
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  if (in_region(a)) {
    char msg[200];
    const int n = std::snprintf(msg, sizeof msg,
                                "strata: error: host code touched SIMT device memory at %p outside "
                                "a kernel or a backend copy (it would fail on a GPU)\n",
                                info->si_addr);
    if (n > 0) (void)!write(2, msg, size_t(n));
    _exit(3);
  }
  signal(sig, SIG_DFL);  // not ours: crash as usual
  raise(sig);
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
}

}  // namespace

bool strict() {
  int s = g_strict.load();
  if (s < 0) {
    const char* e = std::getenv("STRATA_SIMT_STRICT");
    set_strict(e && *e && std::string(e) != "0");
    s = g_strict.load();
  }
  return s == 1;
}

void set_strict(bool on) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  if (on) install_handler();
  g_strict = on ? 1 : 0;
}

void* device_alloc(size_t bytes) {
  if (!bytes) return nullptr;
  refuse_while_capturing("a device allocation");
  ++g_device_allocs;
  if (!strict()) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    STRATA_CHECK(p, "SIMT backend: out of memory allocating ", bytes, " bytes");
    std::memset(p, 0, bytes);
    return p;
  }
  const size_t mapped = (bytes + kPage - 1) / kPage * kPage;
  void* p = mmap(nullptr, mapped, g_access_depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  STRATA_CHECK(p != MAP_FAILED, "SIMT backend: out of memory mapping ", bytes, " bytes");
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  g_regions[reinterpret_cast<uintptr_t>(p)] = mapped;
  return p;  // fresh anonymous pages are zero
}

void device_free(void* p) {
  if (!p) return;
  ++g_device_frees;
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_regions.find(reinterpret_cast<uintptr_t>(p));
    if (it != g_regions.end()) {
      munmap(p, it->second);
      g_regions.erase(it);
      return;
    }
  }
  std::free(p);
}

void check_device_operand(const void* p, const char* op) {
  if (!p || !strict()) return;
  bool device;
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    device = in_region(reinterpret_cast<uintptr_t>(p));
  }
  STRATA_CHECK(device, "SIMT strict mode: op ", op, " was given ", p,
               ", which is not device memory (host memory works here, a GPU would fault)");
}

DeviceAccess::DeviceAccess() {
  if (!strict()) return;
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  if (g_access_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (!strict()) return;
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  if (--g_access_depth == 0) protect_all(PROT_NONE);
}

void set_schedule(Schedule s, uint64_t seed) {
  g_schedule = int(s);
  g_seed = seed;
}
Schedule schedule() { return Schedule(g_schedule.load()); }
uint64_t launch_count() { return g_launches.load(); }
uint64_t copy_count() { return g_copies.load(); }
void note_copy() { ++g_copies; }
uint64_t device_alloc_count() { return g_device_allocs.load(); }
uint64_t device_free_count() { return g_device_frees.load(); }

ThreadState& current() { return runner().cur->st; }
unsigned char* dynamic_shared() { return runner().smem.data(); }

void launch(const char* name, KernelId id, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes,
            const std::function<void()>& body) {
  check_launch(name, id, grid, block, dynamic_shared_bytes);
  // Captured: the launch runs when the recording is replayed (its arguments
  // are in body, copied when it was queued: STRATA_LAUNCH).
  if (record(name, [=] { launch(name, id, grid, block, dynamic_shared_bytes, body); })) return;
  ++g_launches;
  const int64_t nblocks = int64_t(grid.x) * grid.y * grid.z;
  if (nblocks == 0) return;
  DeviceAccess access;
  std::string error;
  Dim3 bad;
#pragma omp parallel for schedule(dynamic, 1) if (nblocks > 1)
  for (int64_t b = 0; b < nblocks; ++b) {
    Runner& r = runner();
    const Dim3 bidx(unsigned(b % grid.x), unsigned((b / grid.x) % grid.y),
                    unsigned(b / (int64_t(grid.x) * grid.y)));
    r.body = &body;
    r.kernel = name;
    r.error.clear();
    run_block(r, grid, block, bidx, dynamic_shared_bytes);
    if (!r.error.empty()) {
#pragma omp critical(strata_simt_error)
      if (error.empty()) {
        error = r.error;
        bad = bidx;
      }
    }
  }
  STRATA_CHECK(error.empty(), "SIMT kernel ", name, ", block ", dim_text(bad), ": ", error);
}

void syncthreads() { block_barrier(0); }
int syncthreads_count(int pred) {
  Runner& r = runner();
  const int p = block_barrier(pred != 0);
  return r.accum[p];
}
int syncthreads_and(int pred) { return syncthreads_count(pred) == int(runner().n); }
int syncthreads_or(int pred) { return syncthreads_count(pred) != 0; }

void syncwarp(unsigned mask) {
  Warp* w;
  warp_rendezvous(mask, 0, "__syncwarp", &w);
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, const char* op) {
  Warp* w;
  const int p = warp_rendezvous(mask, value, op, &w);
  const unsigned lane = lane_id();
  if (src_lane < 0 || src_lane > 31 || !(w->expected & (1u << unsigned(src_lane))))
    return w->slots[p][lane];  // outside the mask or the segment: the lane's own value
  return w->slots[p][src_lane];
}

void thread_fail(const std::string& msg) { fiber_fail(msg); }

void warp_matrix(const char* op, const void* in, size_t in_bytes, void* out, size_t out_bytes,
                 WarpMatrixFn fn) {
  Runner& r = runner();
  const unsigned lin = r.cur->st.linear, lane = lin & 31u;
  if (r.n - (lin & ~31u) < 32)
    fiber_fail(std::string(op) + ": warp " + std::to_string(lin / 32) +
               " has fewer than 32 threads (the instruction needs the whole warp)");
  if (in_bytes > kWarpMatrixBytes || out_bytes > kWarpMatrixBytes)
    fiber_fail(std::string(op) + ": operands over " + std::to_string(kWarpMatrixBytes) + " bytes");
  Warp& w = r.warps[lin / 32];
  const unsigned round = w.gen;
  const int p = int(round & 1u);
  std::memcpy(w.mat_in[p][lane], in, in_bytes);
  Warp* wp;
  warp_rendezvous(0xFFFFFFFFu, 0, op, &wp);
  // The first lane to run after the whole warp arrived computes for all: no
  // lane can start the round after next (which reuses parity p) before every
  // lane has left this one.
  if (w.mat_done[p] != round + 1u) {
    fn(&w.mat_in[p][0][0], &w.mat_out[p][0][0]);
    w.mat_done[p] = round + 1u;
  }
  std::memcpy(out, w.mat_out[p][lane], out_bytes);
}

unsigned warp_ballot(unsigned mask, int pred) {
  Warp* w;
  const int p = warp_rendezvous(mask, pred != 0, "__ballot_sync", &w);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((w->expected & (1u << l)) && w->slots[p][l]) bits |= 1u << l;
  return bits;
}

}  // namespace strata::simt
