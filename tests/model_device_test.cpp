// The whole model on the kernel backends: a training step (loss and every
// parameter gradient) through the CUDA kernels equals the CPU backend's
// within 1e-5 in fp32, for every layer kind (every_plan_kind.h), LayerSkip
// (dropped samples and early-exit losses), evaluation, generation's cached
// attention, and an optimizer step; in bf16 within the bound of a different
// accumulation order (Bf16Step below). Each check runs on two devices:
// ModelOnSimt, the kernels on the CPU SIMT executor ("simt", which the model
// must treat as device memory), everywhere; ModelOnCuda, the same checks on
// a GPU ("cuda"), skipped where the build has no CUDA or no GPU is visible
// (label gpu: tests/gpu.sh runs them there). The SIMT backend runs strict
// here: host code that touched device memory directly would stop the test
// (simt.h).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "backends/cuda/device_pool.h"
#include "backends/cuda/kernel_backend.h"
#include "backends/cuda/simt/simt.h"
#include "every_plan_kind.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "model/model.h"
#include "plan_reference.h"
#include "testing.h"
#include "train/optimizer.h"

namespace strata {
namespace {

const bool kStrict = (simt::set_strict(true), true);

// The plan tests' model with a milder init (0.2): the comparison is of two
// float computations in different orders (and the CPU's exp is an
// approximation within 4 ulp), which a sharp softmax amplifies. Measured on
// the Ice Lake machine: largest gradient difference 2.8e-6 of its tensor's
// largest entry.
LlamaConfig tiny(int layers, bool tied, int kv_heads, bool bias) {
  LlamaConfig c = testing::plan_test_config(layers, tied, bias, kv_heads);
  c.initializer_range = 0.2;
  return c;
}

std::vector<float> host_params(Model<float>& m, bool grads) {
  std::vector<float> h(static_cast<size_t>(m.num_params()));
  m.backend().to_host(h.data(), grads ? m.grads() : m.params(), m.num_params());
  return h;
}

// Max |a - b| over the arena relative to the largest |b| of each tensor.
void expect_arena_close(Model<float>& dev, Model<float>& cpu, bool grads, double tol,
                        const std::string& what) {
  const auto a = host_params(dev, grads), b = host_params(cpu, grads);
  for (const auto& t : cpu.layout().tensors()) {
    double scale = 1e-3, worst = 0;
    for (int64_t i = 0; i < t.numel; ++i)
      scale = std::max(scale, double(std::abs(b[t.offset + i])));
    for (int64_t i = 0; i < t.numel; ++i)
      worst = std::max(worst, double(std::abs(a[t.offset + i] - b[t.offset + i])));
    EXPECT_LE(worst / scale, tol) << what << ": tensor " << t.name;
  }
}

// Why device cuda cannot run here ("" where it can): it needs a CUDA build
// and a visible GPU, decided as strata decides it (device auto resolves to
// cuda: cudaGetDeviceCount reports a device). simt runs everywhere.
std::string cuda_unavailable() {
  if (ops::resolve_device("auto") == "cuda") return "";
  return ops::backend_names().find("cuda,") == std::string::npos
             ? "this build has no CUDA backend (configure with nvcc)"
             : "no CUDA device is visible here";
}
#define STRATA_SKIP_WITHOUT_CUDA()                              \
  if (const std::string why = cuda_unavailable(); !why.empty()) \
  GTEST_SKIP() << "ModelOnCuda needs a GPU: " << why

// Each check below is a function of the device, run as ModelOnSimt.<name>
// and ModelOnCuda.<name>.
#define STRATA_ON_EACH_DEVICE(name)         \
  void name(const std::string& device);     \
  TEST(ModelOnSimt, name) { name("simt"); } \
  TEST(ModelOnCuda, name) {                 \
    STRATA_SKIP_WITHOUT_CUDA();             \
    name("cuda");                           \
  }                                         \
  void name(const std::string& device)

struct Step {
  const char* plan;
  int layers;
  bool tied, bias, layerskip;
  int kv_heads;
};

void PrintTo(const Step& s, std::ostream* os) {
  *os << s.plan << " on " << s.layers << " layers, kv heads " << s.kv_heads
      << (s.tied ? ", tied" : "") << (s.bias ? ", biases" : "")
      << (s.layerskip ? ", LayerSkip" : "");
}

// The hybrids and LayerSkip steps on 3 and 4 layers, then every plan kind's
// plans on four layers (every_plan_kind.h: a new kind joins through its row).
std::vector<Step> steps() {
  std::vector<Step> v = {{"standard*3", 3, true, false, false, 4},
                         {"standard*3", 3, false, true, false, 2},
                         {"standard,ladder*2", 3, false, false, false, 2},
                         {"spd*3;spd_degree=2", 3, false, true, false, 2},
                         {"lp*2,standard", 3, true, false, false, 4},
                         {"standard,skip,standard", 3, false, false, false, 1},
                         {"standard*4", 4, false, false, true, 2},
                         {"standard,ladder*3", 4, true, false, true, 2}};
  for (const char* plan : testing::every_plan_kind_cstr())
    v.push_back({plan, 4, false, true, false, 2});
  return v;
}

std::string step_name(const ::testing::TestParamInfo<Step>& info) {
  std::string n = info.param.plan;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + (info.param.layerskip ? "_layerskip_" : "_") + std::to_string(info.index);
}

void training_step(const std::string& device, const Step& s) {
  const LlamaConfig c = tiny(s.layers, s.tied, s.kv_heads, s.bias);
  const LayerPlan plan = LayerPlan::parse(s.plan, s.layers);
  Model<float> cpu(c, plan, ops::make_backend<float>("cpu"));
  Model<float> dev(c, plan, ops::make_backend<float>(device));
  ASSERT_STREQ(dev.backend().name(), device.c_str());
  for (Model<float>* m : {&cpu, &dev}) {
    m->init_weights(7);
    m->zero_grad();
  }
  expect_arena_close(dev, cpu, false, 0, "initial weights");
  const int B = 3, T = 9;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  targets[4] = ops::kIgnoreIndex;
  LayerSkipStep skip;
  if (s.layerskip) {
    skip.keep.assign(size_t(s.layers), std::vector<uint8_t>(B, 1));
    skip.keep[1][0] = 0;
    skip.keep[s.layers - 1][2] = 0;
    skip.exit_weight.assign(size_t(s.layers), 0.0);
    skip.exit_weight[0] = 0.3;
    skip.exit_weight[size_t(s.layers - 1)] = 0.7;
  }
  const double dloss = 1.0 / 25;
  const uint64_t launches = simt::launch_count();
  const LossResult a = cpu.forward_backward(tokens.data(), targets.data(), B, T, dloss,
                                            s.layerskip ? &skip : nullptr);
  const LossResult b = dev.forward_backward(tokens.data(), targets.data(), B, T, dloss,
                                            s.layerskip ? &skip : nullptr);
  if (device == "simt") {
    EXPECT_GT(simt::launch_count(), launches + 20u) << "the step did not run the SIMT kernels";
  }
  EXPECT_EQ(a.n_valid, b.n_valid);
  EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-5 * std::abs(a.loss_sum));
  EXPECT_NEAR(b.objective, a.objective, 1e-5 * std::abs(a.objective));
  expect_arena_close(dev, cpu, true, 1e-5, "gradients");

  // Separate forward and backward (the evaluation / distillation path).
  for (Model<float>* m : {&cpu, &dev}) m->zero_grad();
  const LossResult fa = cpu.forward(tokens.data(), targets.data(), B, T);
  const LossResult fb = dev.forward(tokens.data(), targets.data(), B, T);
  EXPECT_NEAR(fb.loss_sum, fa.loss_sum, 1e-5 * std::abs(fa.loss_sum));
  cpu.backward(dloss);
  dev.backward(dloss);
  expect_arena_close(dev, cpu, true, 1e-5, "gradients of forward + backward");
}

class ModelOnSimt : public ::testing::TestWithParam<Step> {};
class ModelOnCuda : public ::testing::TestWithParam<Step> {};

TEST_P(ModelOnSimt, TrainingStepEqualsTheCpuBackend) { training_step("simt", GetParam()); }
TEST_P(ModelOnCuda, TrainingStepEqualsTheCpuBackend) {
  STRATA_SKIP_WITHOUT_CUDA();
  training_step("cuda", GetParam());
}
INSTANTIATE_TEST_SUITE_P(Kinds, ModelOnSimt, ::testing::ValuesIn(steps()), step_name);
INSTANTIATE_TEST_SUITE_P(Kinds, ModelOnCuda, ::testing::ValuesIn(steps()), step_name);

STRATA_ON_EACH_DEVICE(OptimizerStepAndEvaluationLogits) {
  const LlamaConfig c = tiny(2, false, 2, false);
  Model<float> cpu(c, ops::make_backend<float>("cpu"));
  Model<float> dev(c, ops::make_backend<float>(device));
  const int B = 2, T = 6;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 3);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 4);
  for (Model<float>* m : {&cpu, &dev}) {
    m->init_weights(3);
    m->zero_grad();
    m->forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T));
    AdamWConfig oc;
    oc.weight_decay = 0.1;
    oc.grad_clip = 0.5;
    AdamW<float> opt(m->backend(), m->layout(), oc);
    opt.step(m->params(), m->grads(), 1e-3);
  }
  expect_arena_close(dev, cpu, false, 1e-5, "weights after one AdamW step");

  std::vector<float> la(size_t(B * T * c.vocab_size)), lb(la.size());
  ops::DeviceBuffer<float> dl(&dev.backend(), la.size());
  cpu.forward_logits(tokens.data(), B, T, la.data());
  dev.forward_logits(tokens.data(), B, T, dl.data());
  dev.backend().to_host(lb.data(), dl.data(), int64_t(lb.size()));
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(lb[i], la[i], 1e-4) << i;
}

// The op interface lets a step stall the host only to read a loss and the
// gradient norm: count the SIMT backend's synchronisations in steady state
// (the SIMT executor's counter: simt only).
TEST(ModelOnSimt, ATrainingStepSynchronisesOnlyWhereTheInterfaceSays) {
  const LlamaConfig c = tiny(3, false, 2, false);
  Model<float> m(c, LayerPlan::parse("standard,ladder*2", 3), ops::make_backend<float>("simt"));
  m.init_weights(5);
  AdamW<float> opt(m.backend(), m.layout(), AdamWConfig{});
  const int B = 2, T = 8;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 5);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 6);
  LayerSkipStep skip;
  skip.keep = {{1, 1}, {1, 0}, {1, 1}};
  skip.exit_weight = {0.25, 0.0, 0.75};
  const std::vector<const LayerSkipStep*> modes = {nullptr, &skip};
  for (const LayerSkipStep* s : modes) {
    auto step = [&] {
      m.zero_grad();
      m.forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T), s);
      opt.step(m.params(), m.grads(), 1e-3);
    };
    step();  // first use sizes buffers
    const uint64_t before = simt::sync_count();
    step();
    // One read per loss term (the last layer's, plus the early exit), one for
    // the gradient norm's accumulators.
    EXPECT_EQ(simt::sync_count() - before, s ? 3u : 2u) << (s ? "with LayerSkip" : "plain");
  }
}

// GPU host hygiene (docs/gpu.md): after a warm-up step, training steps take
// every device block from the backend's pool (no driver allocation, no free,
// so no cudaFree that would synchronise the device), stage token ids, targets
// and the loss and norm reads through pinned buffers without tripping the
// SIMT executor's pinned-lifetime check, and train exactly as the CPU does.
TEST(ModelOnSimt, SteadyTrainingStepsNeitherAllocateNorFreeDeviceMemory) {
  const LlamaConfig c = tiny(3, false, 2, false);
  const LayerPlan plan = LayerPlan::parse("standard,ladder*2", 3);
  Model<float> cpu(c, plan, ops::make_backend<float>("cpu"));
  Model<float> dev(c, plan, ops::make_backend<float>("simt"));
  AdamWConfig oc;
  oc.grad_clip = 0.5;
  AdamW<float> cpu_opt(cpu.backend(), cpu.layout(), oc);
  AdamW<float> dev_opt(dev.backend(), dev.layout(), oc);
  const int B = 2, T = 8;
  auto step = [&](Model<float>& m, AdamW<float>& opt, int i) {
    // Fresh host arrays every step, gone when it returns (the staging copies them).
    const auto tokens = testing::random_tokens(B * T, c.vocab_size, 20 + i);
    const auto targets = testing::random_tokens(B * T, c.vocab_size, 40 + i);
    m.zero_grad();
    const LossResult r = m.forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T));
    opt.step(m.params(), m.grads(), 1e-3);
    return r.loss_sum;
  };
  cpu.init_weights(6);
  dev.init_weights(6);
  EXPECT_NEAR(step(dev, dev_opt, 0), step(cpu, cpu_opt, 0), 1e-5);  // warm-up: sizes the pool
  const uint64_t allocs = simt::device_alloc_count(), frees = simt::device_free_count();
  const uint64_t pinned_copies = simt::record_event();
  for (int i = 1; i <= 3; ++i) {
    const double want = step(cpu, cpu_opt, i);
    EXPECT_NEAR(step(dev, dev_opt, i), want, 1e-5 * std::abs(want)) << "step " << i;
  }
  EXPECT_EQ(simt::device_alloc_count() - allocs, 0u) << "device allocations after warm-up";
  EXPECT_EQ(simt::device_free_count() - frees, 0u) << "device frees after warm-up";
  // Per step: the tokens twice (embedding forward and backward), the targets,
  // the loss read and the norm read.
  EXPECT_GE(simt::record_event() - pinned_copies, 3u * 5u) << "the step bypassed pinned staging";
  // AdamW's first steps move each weight by about lr whatever the gradient's
  // size, so 1e-7 gradient differences show as up to 4e-5 here (measured).
  expect_arena_close(dev, cpu, false, 2e-4, "weights after four steps");
}

// The pool itself: a freed block serves the next request of its size class
// without the driver, close sizes share it, and only trim() releases.
TEST(ModelOnSimt, DevicePoolReusesBlocksAndReleasesOnlyOnTrim) {
  cuda::DevicePool pool(nullptr);
  const uint64_t allocs = simt::device_alloc_count(), frees = simt::device_free_count();
  void* a = pool.take(1000);
  pool.give(a);
  EXPECT_EQ(pool.take(900), a) << "same 512-byte class";
  void* b = pool.take(1000);  // `a` is handed out again: a new block
  EXPECT_NE(b, a);
  pool.give(a);
  pool.give(b);
  void* big = pool.take(size_t(8) << 20);
  pool.give(big);
  void* small = pool.take(size_t(1) << 20);
  EXPECT_NE(small, big) << "a small request must not take a block 8 times its size";
  EXPECT_EQ(pool.take(size_t(7) << 20), big) << "within a quarter: shared";
  pool.give(big);
  pool.give(small);
  EXPECT_EQ(simt::device_alloc_count() - allocs, 4u);
  EXPECT_EQ(simt::device_free_count(), frees) << "give() must not free";
  EXPECT_GT(pool.cached_bytes(), size_t(9) << 20);
  pool.trim();
  EXPECT_EQ(pool.cached_bytes(), 0u);
  EXPECT_EQ(simt::device_free_count() - frees, 4u);
}

// The pinned-memory hazard a GPU has and the SIMT executor models: an async
// copy from pinned memory reads it later, so rewriting or freeing it before
// a synchronisation or an event wait throws, naming the buffer.
TEST(SimtPinned, RestagingOrFreeingBeforeTheCopyRanThrows) {
  void* dev = gpu::malloc_device(64);
  void* pin = gpu::malloc_host(64, "test tokens");
  gpu::copy_async(dev, pin, 64, nullptr);
  EXPECT_ERROR(gpu::host_touch(pin, "re-staging the"), "re-staging the", "'test tokens'");
  EXPECT_ERROR(gpu::free_host(pin), "freeing the", "'test tokens'");
  gpu::Event e = gpu::event_create();
  gpu::event_record(e, nullptr);
  gpu::event_wait(e);  // the right sequence: wait for the copy, then rewrite
  gpu::host_touch(pin, "re-staging the");
  gpu::copy_async(pin, dev, 64, nullptr);  // a read-back into pinned memory
  EXPECT_ERROR(gpu::host_touch(pin, "reading the"), "reading the", "'test tokens'");
  gpu::sync(nullptr);
  gpu::host_touch(pin, "reading the");
  gpu::free_host(pin);
  gpu::event_destroy(e);
  gpu::free_device(dev);
}

// bf16 matmuls: both backends round the operands to bf16 identically and
// accumulate in fp32, in different orders. On simt the GEMMs agree with the
// CPU's to 1e-6; on cuda (tensor cores, split K) each output element may
// differ by up to 2 K eps_fp32 sum_k |a_k| |b_k| (BackendParity.
// Bf16MatmulsRoundOperandsLikeTheCpuBackend derives the bound), about 1e-5 of
// sum |a||b| at the K <= 61 of this model. Either way an fp32 difference
// occasionally moves a later operand across a bf16 rounding boundary (a 2^-8
// step), and the step carries those: on simt measured 1e-4 of the loss and
// 5e-3 of a gradient tensor's scale, where bf16 itself moves the loss by 3e-4
// and the streams by 1.6e-2. A larger difference in the order moves more
// operands but each by the same step; the bounds are what bf16 itself does to
// the step (1e-3 of the loss, 2e-2 of a tensor's scale), on both devices: a
// device beyond them computes something else than a reordered sum.
STRATA_ON_EACH_DEVICE(Bf16StepEqualsTheCpuBf16Step) {
  const LlamaConfig c = tiny(2, false, 2, true);
  Model<float> cpu(c, ops::make_backend<float>("cpu"));
  Model<float> dev(c, ops::make_backend<float>(device));
  const int B = 2, T = 7;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 8);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 9);
  LossResult r[2];
  int k = 0;
  for (Model<float>* m : {&cpu, &dev}) {
    m->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
    m->init_weights(4);
    m->zero_grad();
    r[k++] = m->forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T));
    m->backend().set_matmul_precision(ops::MatmulPrecision::FP32);
  }
  EXPECT_NEAR(r[1].loss_sum, r[0].loss_sum, 1e-3 * std::abs(r[0].loss_sum));
  expect_arena_close(dev, cpu, true, 2e-2, "bf16 gradients");
  // And bf16 is not fp32 (the precision reached the kernels).
  Model<float> fp32(c, ops::make_backend<float>(device));
  fp32.init_weights(4);
  const LossResult f = fp32.forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T));
  EXPECT_GT(std::abs(f.loss_sum - r[1].loss_sum), 1e-4 * std::abs(f.loss_sum));
}

// The tensor-core attention in whole training steps: with bf16 matmuls and
// a head dimension of 16 the kernel backends run the flash kernels
// (kernels/flash_attention.cuh), which also round the probabilities and dS
// to bf16 where the CPU's bf16 step keeps attention in fp32. Every plan kind,
// GQA, a sequence across the 64-row tiles, against the CPU's bf16 step:
// measured on simt, 6.5e-5 of the loss and 1.7e-2 of a gradient tensor's
// scale at most (over the 15 plans); the bounds are 5e-4 and 5e-2 (bf16 itself
// moves the loss by 3e-4 and the streams by 1.6e-2, below).
void flash_step(const std::string& device, const char* plan_text) {
  LlamaConfig c = testing::plan_test_config(4, false, true, 2);
  c.hidden_size = 64;  // 4 heads of 16
  c.intermediate_size = 96;
  c.max_position_embeddings = 80;
  c.initializer_range = 0.2;
  c.finalize();
  const LayerPlan plan = LayerPlan::parse(plan_text, 4);
  Model<float> cpu(c, plan, ops::make_backend<float>("cpu"));
  Model<float> dev(c, plan, ops::make_backend<float>(device));
  const int B = 2, T = 70;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 5);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 6);
  LossResult r[2];
  int k = 0;
  const uint64_t launches = simt::launch_count();
  for (Model<float>* m : {&cpu, &dev}) {
    m->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
    m->init_weights(11);
    m->zero_grad();
    r[k++] = m->forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T));
  }
  if (device == "simt") {
    EXPECT_GT(simt::launch_count(), launches + 20u);
  }
  EXPECT_NEAR(r[1].loss_sum, r[0].loss_sum, 5e-4 * std::abs(r[0].loss_sum));
  expect_arena_close(dev, cpu, true, 5e-2, "bf16 gradients with flash attention");
}

class FlashAttentionStepOnSimt : public ::testing::TestWithParam<const char*> {};
class FlashAttentionStepOnCuda : public ::testing::TestWithParam<const char*> {};
TEST_P(FlashAttentionStepOnSimt, Bf16StepEqualsTheCpuBf16Step) { flash_step("simt", GetParam()); }
TEST_P(FlashAttentionStepOnCuda, Bf16StepEqualsTheCpuBf16Step) {
  STRATA_SKIP_WITHOUT_CUDA();
  flash_step("cuda", GetParam());
}
std::string plan_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + "_" + std::to_string(info.index);
}
INSTANTIATE_TEST_SUITE_P(Kinds, FlashAttentionStepOnSimt,
                         ::testing::ValuesIn(testing::every_plan_kind_cstr()), plan_name);
INSTANTIATE_TEST_SUITE_P(Kinds, FlashAttentionStepOnCuda,
                         ::testing::ValuesIn(testing::every_plan_kind_cstr()), plan_name);

// A training step holds the weights (ops::HeldWeights, train/step.cpp): the
// GEMM engine converts each weight to bf16 once for all its micro-batches
// (forward, input gradients and the head's chunks), with bitwise the same
// gradients. Counted on simt: with the weights held, each further
// micro-batch converts only its activations, fewer than without.
TEST(ModelOnSimt, HeldWeightsAreConvertedOncePerStepWithTheSameGradients) {
  const LlamaConfig c = tiny(3, false, 2, false);
  Model<float> m(c, LayerPlan::parse("standard,ladder*2", 3), ops::make_backend<float>("simt"));
  m.backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  m.init_weights(7);
  auto& kb = dynamic_cast<cuda::KernelBackend<float>&>(m.backend());
  const int B = 2, T = 8;
  // Conversions of a step of `micro` micro-batches, and its gradients.
  auto step = [&](bool hold, int micro, std::vector<float>* grads) {
    m.zero_grad();
    const uint64_t before = kb.gemm_engine().bf16_conversions();
    {
      const ops::HeldWeights<float> held(m.backend(), hold ? m.params() : nullptr, m.num_params());
      for (int i = 0; i < micro; ++i) {
        const auto tokens = testing::random_tokens(B * T, c.vocab_size, 30 + i);
        const auto targets = testing::random_tokens(B * T, c.vocab_size, 50 + i);
        m.forward_backward(tokens.data(), targets.data(), B, T, 1.0 / (B * T * micro));
      }
    }
    if (grads) *grads = host_params(m, true);
    return kb.gemm_engine().bf16_conversions() - before;
  };
  std::vector<float> plain, held;
  const uint64_t plain2 = step(false, 2, &plain), held2 = step(true, 2, &held);
  EXPECT_EQ(held, plain) << "gradients with the weights held";
  const uint64_t plain1 = step(false, 1, nullptr), held1 = step(true, 1, nullptr);
  const uint64_t held3 = step(true, 3, nullptr);
  EXPECT_LT(held2 - held1, plain2 - plain1) << "a held step converts its weights once";
  EXPECT_EQ(held3 - held2, held2 - held1) << "each further micro-batch: its activations only";
  EXPECT_LT(held1, plain1) << "the forward and input-gradient GEMMs share a weight's copy";
}

// Greedy and self-speculative decoding on `device` equal the CPU's token for
// token, with matmuls in precision p on both.
void greedy_generation_matches_the_cpu(const std::string& device, ops::MatmulPrecision p) {
  const LlamaConfig c = tiny(2, true, 2, false);
  Model<float> cpu(c, ops::make_backend<float>("cpu"));
  Model<float> dev(c, ops::make_backend<float>(device));
  struct Restore {  // the CPU's precision is process-wide: fp32 again on any exit
    Model<float>& m;
    ~Restore() { m.backend().set_matmul_precision(ops::MatmulPrecision::FP32); }
  } restore{cpu};
  cpu.backend().set_matmul_precision(p);
  dev.backend().set_matmul_precision(p);
  cpu.init_weights(11);
  dev.init_weights(11);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0;
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  const auto a = generate(cpu, prompt, o);
  const auto b = generate(dev, prompt, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 12u);
  // Self-speculative decoding (early-exit drafts, cached-attention verify).
  o.exit_layer = 1;
  o.speculations = 3;
  EXPECT_EQ(generate(dev, prompt, o), a);
}

STRATA_ON_EACH_DEVICE(GreedyGenerationEqualsTheCpuBackend) {
  greedy_generation_matches_the_cpu(device, ops::MatmulPrecision::FP32);
}

// With bf16 matmuls generation freezes the weights, and the kernel backends'
// GEMM engine then reads one bf16 copy of each (GemmEngine::freeze): still
// the CPU's bf16 decoding (whose few-row GEMMs keep bf16 copies of their own).
STRATA_ON_EACH_DEVICE(Bf16GreedyGenerationEqualsTheCpuBackend) {
  greedy_generation_matches_the_cpu(device, ops::MatmulPrecision::BF16);
}

// Decoding a token queues the same commands whatever the number of KV heads:
// each layer's keys and values join the cache in one launch
// (kv_cache_append; it was two copies a head, 16 launches a layer at the 1B
// shape's 8 KV heads, more than half of a decode step's launches).
TEST(ModelOnSimt, ADecodedTokenQueuesTheSameCommandsWhateverTheKvHeads) {
  const auto launches = [](int layers, int kv_heads) {
    const LlamaConfig c = tiny(layers, false, kv_heads, false);
    Model<float> m(c, ops::make_backend<float>("simt"));
    m.init_weights(3);
    KvEngine e(m, 16);
    ops::DeviceBuffer<float> x(&m.backend(), size_t(3) * c.hidden_size);
    const int32_t tokens[3] = {1, 2, 3};
    e.embed(tokens, 3, x.data());
    e.run_layers(x.data(), 3, 0, layers);  // the prompt
    e.embed(tokens, 1, x.data());
    // Commands a GPU would queue: kernel launches, copies and fills.
    const auto commands = [] { return simt::launch_count() + simt::copy_count(); };
    const uint64_t before = commands();
    e.run_layers(x.data(), 1, 0, layers);  // one decoded token
    EXPECT_EQ(e.length(layers - 1), 4);
    return commands() - before;
  };
  const uint64_t one = launches(2, 1), four = launches(2, 4), deeper = launches(4, 4);
  EXPECT_EQ(one, four) << "a decoded token's commands grow with the KV heads";
  EXPECT_GT(deeper, four);
  EXPECT_LE((deeper - four) / 2, 12u) << "commands a layer of a decoded token";
}

// Decode steps as graphs (KvEngine::set_graphs): each shape runs eagerly
// once, is captured the next time and replayed from then on, the rows'
// positions and cache slots read from device memory at each replay. Replayed
// steps give the eager steps' logits bit for bit, for every plan kind that
// generates, three sequences of different lengths and then two (a new shape).
bool generates(const LayerPlan& p) {
  for (LayerKind k : p.kinds)
    if (kind_info(k).no_generation) return false;
  return true;
}

struct DecodeRun {
  std::vector<float> logits;
  int64_t replays = 0, captures = 0;
};

DecodeRun decode_steps(Model<float>& m, bool graphs) {
  const LlamaConfig& c = m.config();
  const int L = c.num_hidden_layers, V = c.vocab_size, C = c.hidden_size;
  KvEngine e(m, 24, -1, 3);
  e.set_graphs(graphs);
  ops::DeviceBuffer<float> x(&m.backend(), size_t(8) * C), out(&m.backend(), size_t(3) * V);
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 4, 6, 2, 9}, {3, 8}, {5, 7, 1, 1, 2, 6, 4}};
  for (int s = 0; s < 3; ++s) {
    const int n = int(prompts[size_t(s)].size());
    e.embed(prompts[size_t(s)].data(), n, x.data());
    e.run_layers(x.data(), n, 0, L, s);
  }
  DecodeRun r;
  std::vector<float> host;
  for (int step = 0; step < 9; ++step) {
    const std::vector<int> rows = step < 6 ? std::vector<int>{0, 1, 2} : std::vector<int>{2, 0};
    const int R = int(rows.size());
    std::vector<int32_t> tokens;
    for (int i = 0; i < R; ++i) tokens.push_back(int32_t((step * 7 + rows[size_t(i)] * 3) % V));
    e.embed(tokens.data(), R, x.data());
    e.decode_rows(x.data(), rows, 0, L);
    e.logits(x.data(), R, out.data());
    host.resize(size_t(R) * V);
    m.backend().to_host(host.data(), out.data(), int64_t(R) * V);
    r.logits.insert(r.logits.end(), host.begin(), host.end());
  }
  EXPECT_EQ(e.length(L - 1, 0), 5 + 9);
  EXPECT_EQ(e.length(L - 1, 1), 2 + 6);
  r.replays = e.graph_replays();
  r.captures = e.graph_captures();
  return r;
}

STRATA_ON_EACH_DEVICE(GraphDecodingEqualsEagerDecoding) {
  const LlamaConfig c = tiny(4, false, 2, true);
  int plans = 0;
  for (const std::string& text : testing::every_plan_kind()) {
    const LayerPlan plan = LayerPlan::parse(text, 4);
    if (!generates(plan)) continue;
    SCOPED_TRACE(text);
    ++plans;
    Model<float> m(c, plan, ops::make_backend<float>(device));
    m.init_weights(5);
    ASSERT_TRUE(m.backend().graphs());
    const DecodeRun eager = decode_steps(m, false);
    const DecodeRun graph = decode_steps(m, true);
    EXPECT_EQ(eager.replays, 0);
    // Six steps of three rows: eager, captured + replayed, four replays; then
    // three of two rows: eager, captured + replayed, one replay.
    EXPECT_EQ(graph.captures, 2);
    EXPECT_EQ(graph.replays, 5 + 2);
    ASSERT_EQ(graph.logits.size(), eager.logits.size());
    EXPECT_EQ(graph.logits, eager.logits) << "replayed steps differ from eager ones";
  }
  EXPECT_GE(plans, 8);
}

// Batched and bf16 generation through generate_batch: with graphs, the same
// tokens as without; the weights are frozen (bf16 copies made in the first
// step), so the recorded steps read the copies.
STRATA_ON_EACH_DEVICE(GraphGenerationEqualsEagerGeneration) {
  const LlamaConfig c = tiny(2, true, 2, false);
  Model<float> m(c, ops::make_backend<float>(device));
  m.init_weights(13);
  for (const ops::MatmulPrecision p : {ops::MatmulPrecision::FP32, ops::MatmulPrecision::BF16}) {
    m.backend().set_matmul_precision(p);
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.sampling.temperature = 0;
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 2}, {3}, {7, 7, 2}};
    GenerateStats eager_st, graph_st;
    o.graphs = false;
    const auto eager = generate_batch(m, prompts, o, {}, &eager_st);
    o.graphs = true;
    const auto graph = generate_batch(m, prompts, o, {}, &graph_st);
    EXPECT_EQ(graph, eager);
    EXPECT_EQ(eager_st.graph_steps, 0);
    EXPECT_GE(graph_st.graph_steps, 6) << "decode steps were not replayed";
  }
  m.backend().set_matmul_precision(ops::MatmulPrecision::FP32);
}

// A capture that would make or move the backend's own memory (here the GEMM
// stand-in's bf16 staging, made on its first use) is refused at its end: the
// recording would point at memory that is not there when it replays. After
// the same ops ran once eagerly, the capture is accepted and its replay
// gives the eager numbers.
TEST(ModelOnSimt, ACaptureThatAllocatesIsRefusedAndAWarmOneReplays) {
  auto be = ops::make_backend<float>("simt");
  be->set_matmul_precision(ops::MatmulPrecision::BF16);
  const int N = 3, IC = 16, OC = 8;
  ops::DeviceBuffer<float> x(be.get(), size_t(N) * IC), w(be.get(), size_t(OC) * IC),
      y(be.get(), size_t(N) * OC);
  std::vector<float> hx(size_t(N) * IC), hw(size_t(OC) * IC);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(i % 7) - 3;
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = float(i % 5) * 0.25f;
  be->from_host(x.data(), hx.data(), int64_t(hx.size()));
  be->from_host(w.data(), hw.data(), int64_t(hw.size()));
  const uint64_t epoch = be->graph_epoch();
  be->begin_capture();
  be->linear_forward(y.data(), x.data(), w.data(), nullptr, N, IC, OC);
  EXPECT_THROW(be->end_capture(), Error);
  EXPECT_NE(be->graph_epoch(), epoch);
  be->linear_forward(y.data(), x.data(), w.data(), nullptr, N, IC, OC);  // eager: makes it
  std::vector<float> eager(size_t(N) * OC), replayed(eager.size());
  be->to_host(eager.data(), y.data(), int64_t(eager.size()));
  be->zero(y.data(), int64_t(eager.size()));
  be->begin_capture();
  be->linear_forward(y.data(), x.data(), w.data(), nullptr, N, IC, OC);
  const auto g = be->end_capture();
  be->to_host(replayed.data(), y.data(), int64_t(eager.size()));
  EXPECT_EQ(replayed, std::vector<float>(eager.size(), 0.0f)) << "the capture ran the GEMM";
  be->replay(*g);
  be->to_host(replayed.data(), y.data(), int64_t(eager.size()));
  EXPECT_EQ(replayed, eager);
}

// A bf16 KV cache (GenerateOptions::kv_cache, --kv-cache bf16): greedy,
// self-speculative and batched decoding on `device` equal the CPU's with the
// same cache token for token (keys and values rounded alike on both), and
// the cache takes half the bytes.
STRATA_ON_EACH_DEVICE(Bf16KvCacheGenerationEqualsTheCpuBackend) {
  const LlamaConfig c = tiny(2, true, 2, false);
  Model<float> cpu(c, ops::make_backend<float>("cpu"));
  Model<float> dev(c, ops::make_backend<float>(device));
  cpu.init_weights(11);
  dev.init_weights(11);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0;
  o.kv_cache = ops::Dtype::BF16;
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  const auto a = generate(cpu, prompt, o);
  EXPECT_EQ(generate(dev, prompt, o), a);
  EXPECT_EQ(generate_batch(dev, {prompt, {3, 3}}, o)[0], a);
  o.exit_layer = 1;
  o.speculations = 3;
  EXPECT_EQ(generate(dev, prompt, o), a);
  const KvEngine fp32(dev, 16), bf16(dev, 16, -1, 1, ops::Dtype::BF16);
  EXPECT_EQ(bf16.cache_bytes() * 2, fp32.cache_bytes());
  EXPECT_EQ(bf16.cache_dtype(), ops::Dtype::BF16);
}

}  // namespace
}  // namespace strata
