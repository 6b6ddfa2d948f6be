// The CPU SIMT executor: CUDA's execution model where kernels can observe it
// (barriers, shared memory, warp shuffles and votes, atomics, launch shapes),
// and proof that a kernel with a missing barrier or a divergent shuffle fails
// here, as it would on a GPU.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/common.cuh"

using namespace strata;
using simt::Schedule;

namespace {

const Schedule kSchedules[] = {Schedule::Forward, Schedule::Reverse, Schedule::Shuffled};

struct ScheduleGuard {
  ~ScheduleGuard() { simt::set_schedule(Schedule::Forward); }
};

// Block sum through shared memory, correct: a tree with a barrier per level.
STRATA_GLOBAL void k_tree_sum(const float* x, float* out, bool broken) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (t < h) s[t] += s[t + h];
    if (!broken) __syncthreads();  // the deliberately broken kernel leaves it out
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Warp sum by shuffles; `divergent` lets only half the lanes call it, which
// CUDA leaves undefined (a hang or garbage) and the executor reports.
STRATA_GLOBAL void k_warp_sum(const float* x, float* out, bool divergent) {
  const unsigned t = threadIdx.x;
  float v = x[t];
  if (divergent && (t & 31u) >= 16) return;
  v = cuda::warp_sum(v);
  if ((t & 31u) == 0) out[t / 32] = v;
}

STRATA_GLOBAL void k_shuffles(int* out, int width) {
  const int t = int(threadIdx.x);
  const int v = 100 + t;
  out[4 * t + 0] = __shfl_xor_sync(0xFFFFFFFFu, v, 1, width);
  out[4 * t + 1] = __shfl_down_sync(0xFFFFFFFFu, v, 3, width);
  out[4 * t + 2] = __shfl_up_sync(0xFFFFFFFFu, v, 2, width);
  out[4 * t + 3] = __shfl_sync(0xFFFFFFFFu, v, 5, width);
}

STRATA_GLOBAL void k_votes(unsigned* out) {
  const unsigned t = threadIdx.x;
  out[3 * t + 0] = __ballot_sync(0xFFFFFFFFu, t % 3 == 0);
  out[3 * t + 1] = unsigned(__any_sync(0xFFFFFFFFu, t == 7));
  out[3 * t + 2] = unsigned(__all_sync(0xFFFFFFFFu, t < 1000));
  const int c = __syncthreads_count(t % 2 == 0);
  if (t == 0) out[3 * blockDim.x] = unsigned(c);
}

STRATA_GLOBAL void k_atomic(double* acc, int* hits) {
  atomicAdd(acc, 0.5);
  atomicAdd(hits + blockIdx.x % 4, 1);
}

STRATA_GLOBAL void k_dims(int* out) {
  const int block = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int thread = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  out[block * int(blockDim.x * blockDim.y * blockDim.z) + thread] = block * 1000 + thread;
}

STRATA_GLOBAL void k_dynamic(float* out) {
  STRATA_DYNAMIC_SHARED(float, s);
  const unsigned t = threadIdx.x;
  s[blockDim.x - 1 - t] = float(t);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[t];
}

// Fills `n` floats of dynamic shared memory and writes back their sum (every
// thread), so a launch that is allowed is seen to use all of it.
STRATA_GLOBAL void k_shared_fill(float* out, int n) {
  STRATA_DYNAMIC_SHARED(float, s);
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) s[i] = 1.0f;
  __syncthreads();
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += s[i];
  out[threadIdx.x] = sum;
}
// The same kernel again: opt-ins are per kernel, so each test gets its own.
STRATA_GLOBAL void k_shared_fill_max(float* out, int n) { k_shared_fill(out, n); }

// A kernel declaring a launch bound of 64 threads.
STRATA_LAUNCH_BOUNDS(k_bounded, 64);
STRATA_GLOBAL STRATA_BOUNDS_OF(k_bounded) void k_bounded(int* out) {
  out[threadIdx.x] = int(threadIdx.x);
}

STRATA_GLOBAL void k_barrier_in_branch(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

}  // namespace

TEST(Simt, SharedMemoryTreeSumWithBarriersIsRightInEveryOrder) {
  ScheduleGuard g;
  const int blocks = 3, threads = 256;
  std::vector<float> x(size_t(blocks * threads)), out(blocks);
  std::iota(x.begin(), x.end(), 1.0f);
  for (Schedule s : kSchedules) {
    simt::set_schedule(s, 7);
    STRATA_LAUNCH(k_tree_sum, blocks, threads, 0, nullptr, x.data(), out.data(), false);
    for (int b = 0; b < blocks; ++b) {
      double want = 0;
      for (int t = 0; t < threads; ++t) want += x[size_t(b * threads + t)];
      EXPECT_EQ(out[size_t(b)], float(want)) << "block " << b;
    }
  }
}

// The deliberately broken kernel: without the barrier inside the loop, a
// thread reads its partner's slot before the partner has added into it. The
// executor runs threads to the next barrier one after another, so some
// resumption order exposes it (forward order reads stale sums).
TEST(Simt, MissingBarrierGivesAWrongSum) {
  ScheduleGuard g;
  const int threads = 256;
  std::vector<float> x(threads), out(1);
  std::iota(x.begin(), x.end(), 1.0f);
  const float want = float(threads) * (threads + 1) / 2;
  int wrong = 0;
  for (Schedule s : kSchedules) {
    simt::set_schedule(s, 3);
    STRATA_LAUNCH(k_tree_sum, 1, threads, 0, nullptr, x.data(), out.data(), true);
    wrong += out[0] != want;
  }
  EXPECT_GE(wrong, 1) << "a kernel with a missing __syncthreads passed in every order";
  simt::set_schedule(Schedule::Forward);
  STRATA_LAUNCH(k_tree_sum, 1, threads, 0, nullptr, x.data(), out.data(), true);
  EXPECT_NE(out[0], want);
}

TEST(Simt, WarpShuffleSumAndDivergentShuffleIsAnError) {
  std::vector<float> x(64), out(2);
  std::iota(x.begin(), x.end(), 0.0f);
  STRATA_LAUNCH(k_warp_sum, 1, 64, 0, nullptr, x.data(), out.data(), false);
  EXPECT_EQ(out[0], 496.0f);
  EXPECT_EQ(out[1], 1520.0f);
  try {
    STRATA_LAUNCH(k_warp_sum, 1, 64, 0, nullptr, x.data(), out.data(), true);
    FAIL() << "a shuffle reached by half the warp did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_warp_sum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("warp operation"), std::string::npos) << e.what();
  }
}

TEST(Simt, ShufflesFollowCudaWidthAndSegmentRules) {
  for (int width : {32, 8}) {
    const int n = 48;  // a full warp and a partial one of 16 lanes
    std::vector<int> out(size_t(4 * n));
    STRATA_LAUNCH(k_shuffles, 1, n, 0, nullptr, out.data(), width);
    for (int t = 0; t < n; ++t) {
      const int lane = t % 32, warp0 = t - lane;
      const int lanes = std::min(32, n - warp0);
      const int seg = lane / width * width;
      auto val = [&](int src_lane) { return 100 + warp0 + src_lane; };
      auto exists = [&](int src_lane) { return src_lane < lanes; };
      const int x = lane ^ 1, d = lane + 3, u = lane - 2, i = seg + 5 % width;
      EXPECT_EQ(out[size_t(4 * t)], x < seg + width && exists(x) ? val(x) : val(lane));
      EXPECT_EQ(out[size_t(4 * t + 1)], d / width == lane / width && exists(d) ? val(d) : val(lane))
          << "t " << t << " width " << width;
      EXPECT_EQ(out[size_t(4 * t + 2)], u >= seg ? val(u) : val(lane));
      EXPECT_EQ(out[size_t(4 * t + 3)], exists(i) ? val(i) : val(lane));
    }
  }
}

TEST(Simt, VotesAndBarrierCounts) {
  const int n = 64;
  std::vector<unsigned> out(size_t(3 * n + 1));
  STRATA_LAUNCH(k_votes, 1, n, 0, nullptr, out.data());
  for (int t = 0; t < n; ++t) {
    unsigned want = 0;
    for (int l = 0; l < 32; ++l)
      if ((t / 32 * 32 + l) % 3 == 0) want |= 1u << l;
    EXPECT_EQ(out[size_t(3 * t)], want);
    EXPECT_EQ(out[size_t(3 * t + 1)], t < 32 ? 1u : 0u);
    EXPECT_EQ(out[size_t(3 * t + 2)], 1u);
  }
  EXPECT_EQ(out[size_t(3 * n)], unsigned(n / 2));
}

TEST(Simt, AtomicsFromBlocksOnSeveralThreads) {
  double acc = 0;
  std::vector<int> hits(4, 0);
  STRATA_LAUNCH(k_atomic, 64, 128, 0, nullptr, &acc, hits.data());
  EXPECT_EQ(acc, 64 * 128 * 0.5);
  for (int h : hits) EXPECT_EQ(h, 16 * 128);
}

TEST(Simt, ThreeDimensionalGridsAndBlocks) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  std::vector<int> out(12 * 24, -1);
  STRATA_LAUNCH(k_dims, grid, block, 0, nullptr, out.data());
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) EXPECT_EQ(out[size_t(b * 24 + t)], b * 1000 + t);
}

TEST(Simt, DynamicSharedMemoryIsPerBlock) {
  std::vector<float> out(3 * 40);
  STRATA_LAUNCH(k_dynamic, 3, 40, 40 * sizeof(float), nullptr, out.data());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 40; ++t) EXPECT_EQ(out[size_t(b * 40 + t)], float(39 - t));
}

TEST(Simt, BarrierReachedByPartOfTheBlockAndBadShapesAreErrors) {
  std::vector<float> out(64);
  try {
    STRATA_LAUNCH(k_barrier_in_branch, 1, 64, 0, nullptr, out.data());
    FAIL() << "a __syncthreads reached by 16 of 64 threads did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("__syncthreads reached by 16 of 64"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(STRATA_LAUNCH(k_dynamic, 1, 2048, 0, nullptr, out.data()), Error);
  EXPECT_THROW(STRATA_LAUNCH(k_dynamic, 1, 32, 300 * 1024, nullptr, out.data()), Error);
}

// Past 48 KiB of dynamic shared memory a kernel must opt in
// (cudaFuncSetAttribute on a GPU, gpu::allow_dynamic_shared here), and only
// up to what it opted in to.
TEST(Simt, SharedMemoryOver48KiBNeedsOptIn) {
  std::vector<float> out(32);
  const size_t kib48 = 48 * 1024, kib64 = 64 * 1024;
  STRATA_LAUNCH(k_shared_fill, 1, 32, kib48, nullptr, out.data(), int(kib48 / 4));
  EXPECT_EQ(out[0], float(kib48 / 4));
  try {
    STRATA_LAUNCH(k_shared_fill, 1, 32, kib48 + 4, nullptr, out.data(), 1);
    FAIL() << "49156 bytes of dynamic shared memory launched without the opt-in";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_shared_fill"), std::string::npos) << m;
    EXPECT_NE(m.find("49156 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("allow_dynamic_shared"), std::string::npos) << m;
  }
  gpu::allow_dynamic_shared(k_shared_fill, kib64);
  EXPECT_EQ(simt::dynamic_shared_limit(reinterpret_cast<simt::KernelId>(&k_shared_fill)), kib64);
  STRATA_LAUNCH(k_shared_fill, 2, 32, kib64, nullptr, out.data(), int(kib64 / 4));
  EXPECT_EQ(out[0], float(kib64 / 4));
  // Over its own opt-in, and another kernel's opt-in does not count.
  EXPECT_THROW(STRATA_LAUNCH(k_shared_fill, 1, 32, kib64 + 4, nullptr, out.data(), 1), Error);
  EXPECT_THROW(STRATA_LAUNCH(k_shared_fill_max, 1, 32, kib64, nullptr, out.data(), 1), Error);
  // The attribute is the kernel's limit either way: an opt-in below 48 KiB lowers it.
  gpu::allow_dynamic_shared(k_shared_fill, 1024);
  EXPECT_THROW(STRATA_LAUNCH(k_shared_fill, 1, 32, 2048, nullptr, out.data(), 1), Error);
}

// 227 KiB (232448 bytes) is the most an H100 or H200 block can have: the
// opt-in cannot ask for more, and no launch gets more.
TEST(Simt, SharedMemoryOverDeviceMaximumRefused) {
  std::vector<float> out(32);
  const size_t max = 227 * 1024;
  EXPECT_THROW(gpu::allow_dynamic_shared(k_shared_fill_max, max + 1), Error);
  gpu::allow_dynamic_shared(k_shared_fill_max, max);
  STRATA_LAUNCH(k_shared_fill_max, 1, 32, max, nullptr, out.data(), int(max / 4));
  EXPECT_EQ(out[0], float(max / 4));
  try {
    STRATA_LAUNCH(k_shared_fill_max, 1, 32, max + 4, nullptr, out.data(), 1);
    FAIL() << "more than 227 KiB of dynamic shared memory launched";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_shared_fill_max"), std::string::npos) << m;
    EXPECT_NE(m.find("232452 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("227 KiB"), std::string::npos) << m;
  }
}

// A block larger than the kernel's __launch_bounds__ fails to launch on a GPU.
TEST(Simt, LaunchBoundsRefuseLargerBlocks) {
  std::vector<int> out(128, -1);
  STRATA_LAUNCH(k_bounded, 1, 64, 0, nullptr, out.data());
  EXPECT_EQ(out[63], 63);
  try {
    STRATA_LAUNCH(k_bounded, 1, dim3(32, 3), 0, nullptr, out.data());
    FAIL() << "a block of 96 threads launched a kernel bounded to 64";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_bounded"), std::string::npos) << m;
    EXPECT_NE(m.find("96 threads"), std::string::npos) << m;
    EXPECT_NE(m.find("__launch_bounds__ (64)"), std::string::npos) << m;
  }
  // The production attention kernels declare theirs (one block: 4 warps).
  EXPECT_EQ(simt::max_threads("cu::k_attention_backward_dkv<double>"), 128);
  EXPECT_EQ(simt::max_threads("k_attention_forward<T>"), 128);
  EXPECT_EQ(simt::max_threads("k_tree_sum"), 0);
}

STRATA_GLOBAL void k_add_at(float* x, const int* where, float v) {
  if (threadIdx.x == 0) x[*where] += v;
}

// The model of a CUDA graph (stream capture): commands queued while
// capturing are recorded with the arguments they had when queued, and not
// run; each replay runs them in order and reads memory as it is then (how a
// decode step's positions reach a replayed graph).
TEST(SimtGraph, CapturedCommandsRunOnlyWhenReplayedWithTheirQueuedArguments) {
  auto* x = static_cast<float*>(gpu::malloc_device(4 * sizeof(float)));
  auto* where = static_cast<int*>(gpu::malloc_device(sizeof(int)));
  const int zero = 0, two = 2;
  const float seven = 7;
  gpu::copy_async(where, &zero, sizeof(int), nullptr);
  gpu::copy_async(x + 3, &seven, sizeof(float), nullptr);
  const uint64_t launches = simt::launch_count(), copies = simt::copy_count();
  simt::begin_capture();
  float v = 1;
  STRATA_LAUNCH(k_add_at, 1, 32, 0, nullptr, x, static_cast<const int*>(where), v);
  v = 100;  // too late: the launch copied its arguments
  gpu::zero_async(x + 3, sizeof(float), nullptr);
  const auto rec = simt::end_capture();
  EXPECT_EQ(simt::launch_count(), launches) << "a captured launch ran";
  EXPECT_EQ(simt::copy_count(), copies) << "a captured fill ran";
  ASSERT_EQ(rec->commands.size(), 2u);
  EXPECT_EQ(rec->names[0], "k_add_at");
  EXPECT_EQ(rec->names[1], "cudaMemsetAsync");
  auto host = [&] {
    std::vector<float> h(4);
    gpu::copy_async(h.data(), x, 4 * sizeof(float), nullptr);
    return h;
  };
  EXPECT_EQ(host(), (std::vector<float>{0, 0, 0, 7}));
  simt::replay(*rec);
  EXPECT_EQ(host(), (std::vector<float>{1, 0, 0, 0}));
  gpu::copy_async(where, &two, sizeof(int), nullptr);  // read by the next replay
  simt::replay(*rec);
  EXPECT_EQ(host(), (std::vector<float>{1, 0, 1, 0}));
  EXPECT_EQ(simt::launch_count(), launches + 2);
  gpu::free_device(x);
  gpu::free_device(where);
}

// What a GPU refuses while a stream captures is refused here: a host
// synchronisation and a device allocation; and captures do not nest.
TEST(SimtGraph, SynchronisingOrAllocatingWhileCapturingIsRefused) {
  simt::begin_capture();
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([] { gpu::sync(nullptr); })
                .find("a host synchronisation while a stream "
                      "captures"),
            std::string::npos);
  EXPECT_NE(message([] { gpu::malloc_device(64); }).find("a device allocation"), std::string::npos);
  EXPECT_NE(message([] { simt::begin_capture(); }).find("already under way"), std::string::npos);
  const auto rec = simt::end_capture();
  EXPECT_TRUE(rec->commands.empty());
  EXPECT_THROW(simt::end_capture(), Error);
  gpu::sync(nullptr);  // allowed again
  gpu::free_device(gpu::malloc_device(64));
}
