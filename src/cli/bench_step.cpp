// `strata bench model` and `strata bench train`: whole training steps of a
// randomly initialised model on any device, with the step's time, tokens/s,
// GFLOP/s and the fraction of the device's peak (measured on the CPU; the GPU's
// known or computed peak on cuda), and optionally the kernels that took the
// time (one extra profiled step).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/kernel_times.h"
#include "cli/args.h"
#include "cli/bench_common.h"
#include "cli/commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/memory.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace strata::cli {
namespace {

// FLOPs of one training step (forward + backward): 6 per parameter per token for
// the matrices (embedding excluded, head included), plus causal attention.
double step_flops(const LlamaConfig& c, int B, int T) {
  const double N = double(B) * T;
  const double C = c.hidden_size, F = c.intermediate_size;
  const double per_layer = C * c.qkv_dim() + double(c.q_dim()) * C + 3 * C * F;
  const double matrices = c.num_hidden_layers * per_layer + double(c.vocab_size) * C;
  const double attn = 2.0 * 2.0 * c.num_attention_heads * c.head_dim * (double(T) * (T + 1) / 2) *
                      B * c.num_hidden_layers;
  return 6 * N * matrices + 3 * attn;  // model FLOPs: backward counted as 2x forward
}

// `bench model` and `bench train`: the options, and what they resolve to.
struct StepBench {
  std::string name;  // "strata bench model" or "strata bench train"
  bool train = false;
  BenchModel bm;
  LlamaConfig cfg;
  LayerPlan plan;
  bool bf16 = false;
  bool bf16_acts = false;  // --activations bf16
  std::string device, recompute;
  ops::AttentionImpl attention = ops::AttentionImpl::Strata;  // --attention
  double peak = 0;
  bool peak_measured = false;  // on the CPU, by find_step_peak (not --peak)
  int steps = 1;
  int kernels = 0;  // rows of the top-kernels table (0: no profiled step)
};

Args step_args(const std::string& name, bool train) {
  Args args(name,
            train ? "Times whole optimizer steps (forward + backward with the fused LM head, "
                    "gradient clipping to norm 1 and AdamW, as `strata train` runs them) of a "
                    "randomly initialised model, and prints tokens/s, GFLOP/s and the fraction "
                    "of the device's peak."
                  : "Times whole training steps (forward + backward, fused LM head) of a randomly "
                    "initialised model and prints tokens/s, GFLOP/s and the fraction of the "
                    "device's peak.");
  args.option("model", "NAME",
              "288 (6L-288), 768 (12L-768), 1024 (24L-1024), 2048 (16L-2048), 4096 (32L-4096)",
              "288")
      .option("batch", "B", "micro-batch size (0: tokens / seq)", "0")
      .option("tokens", "N", "tokens per step when --batch is 0", "4096")
      .option("seq", "T", "sequence length (0: the model's default)", "0")
      .option("vocab", "V", "vocabulary size", "32000")
      .option("steps", "S", "timed steps", "5")
      .flag("bf16", "bf16 matmuls with fp32 accumulation (training.precision = \"bf16\")")
      .option("activations", "STORAGE",
              "fp32 or bf16: the activations' storage, as training.activations", "fp32")
      .flag("tied", "tie the embedding and the LM head")
      .option("attention", "IMPL",
              "strata or cudnn (cuDNN's fused attention: device cuda, --bf16), as model.attention",
              "strata")
      .option("plan", "TEXT", "layer plan (default: all standard)", "")
      .option("recompute", "MODE",
              "activation recomputation, as training.recompute: none, selective or full (the "
              "FLOP rate counts the useful FLOPs only)",
              "none")
      .option("device", "NAME", "cpu, cuda, simt or auto", "auto")
      .option("peak", "GFLOPS",
              "the peak to divide by (0: on cpu, measure the FMA peak, about 1 s; on cuda, the "
              "GPU's datasheet or computed peak; fp32, or bf16 with --bf16)",
              "0")
      .option("kernels", "N",
              "after the timed steps, profile one more step and print the N kernels that took "
              "the most time (0: none)",
              "0")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  return args;
}

StepBench step_options(const Args& args, const std::string& name, bool train) {
  StepBench o;
  o.name = name;
  o.train = train;
  o.bm = bench_models(args.get("model"), args.get_int("tokens")).front();
  if (args.get_int("seq") > 0) o.bm.T = args.get_int("seq");
  o.bm.B = args.get_int("batch") > 0 ? args.get_int("batch")
                                     : std::max(1, args.get_int("tokens") / o.bm.T);
  STRATA_USAGE_CHECK(args.get_int("vocab") >= 2, name, ": --vocab must be at least 2");
  STRATA_USAGE_CHECK(args.get_double("peak") >= 0, name, ": --peak must be >= 0");
  o.cfg = bench_config(o.bm, args.get_int("vocab"), args.has("tied"));
  o.plan = args.get("plan").empty() ? LayerPlan::standard(o.cfg.num_hidden_layers)
                                    : LayerPlan::parse(args.get("plan"), o.cfg.num_hidden_layers);
  o.bf16 = args.has("bf16");
  o.device = args.get("device");
  o.recompute = args.get("recompute");
  o.bf16_acts = bf16_activations_option(args.get("activations"), name);
  STRATA_USAGE_CHECK(ops::parse_attention_impl(args.get("attention"), &o.attention), name,
                     ": --attention '", args.get("attention"), "' is not strata or cudnn");
  STRATA_USAGE_CHECK(o.attention == ops::AttentionImpl::Strata || o.bf16, name,
                     ": --attention cudnn needs --bf16");
  o.peak = args.get_double("peak");
  o.steps = std::max(1, args.get_int("steps"));
  o.kernels = args.get_int("kernels");
  STRATA_USAGE_CHECK(o.kernels >= 0, name, ": --kernels must be >= 0");
  return o;
}

// The peak to divide by unless --peak gave it: on the CPU the FMA peak,
// measured on an idle process (before the model takes its memory); on a GPU
// the known chip's datasheet figure or the rate computed from its properties
// (backends/cuda/gpu_peak.h); the SIMT executor has none.
void find_step_peak(StepBench& o) {
  if (o.peak != 0) return;
  const std::string device = ops::resolve_device(o.device);
  if (device == "cuda") {
    const ops::AcceleratorPeak p = ops::accelerator_peak(device);
    o.peak = o.bf16 ? p.bf16_gflops : p.fp32_gflops;
    std::printf("peak: %.1f GFLOP/s (%s, %s)\n", o.peak,
                o.bf16 ? "bf16 tensor cores, dense" : "fp32 CUDA cores", p.what.c_str());
    return;
  }
  if (device != "cpu") return;
  const FmaPeak f = measure_fma_peak(0.25);
  o.peak = o.bf16 && f.bf16 > 0 ? f.bf16 : f.fp32;
  o.peak_measured = true;
  std::string what = o.bf16 && f.bf16 > 0 ? f.bf16_path : f.fp32_path;
  if (o.bf16 && f.bf16 == 0) what += ", no native bf16";
  std::printf("peak: %.1f GFLOP/s (%s, measured now; strata bench peak)\n", o.peak, what.c_str());
}

// One more step with kernel timing on: the kernels (and GEMMs) that took the
// time, slowest first, as a share of the profiled step's kernel time.
void print_top_kernels(const std::function<void()>& step, int rows) {
  gpu::take_kernel_times();
  gpu::set_kernel_timing(true);
  step();
  gpu::set_kernel_timing(false);
  const std::vector<gpu::KernelTime> k = gpu::take_kernel_times();
  double total = 0;
  for (const auto& t : k) total += t.ms;
  std::printf("top kernels of one profiled step (%zu kinds, %.2f ms of kernel time):\n", k.size(),
              total);
  if (k.empty()) std::printf("  (none: this device runs no timed kernels)\n");
  for (size_t i = 0; i < k.size() && int(i) < rows; ++i)
    std::printf("  %9.3f ms %5.1f%% %6lld x  %s\n", k[i].ms, total > 0 ? 100 * k[i].ms / total : 0,
                static_cast<long long>(k[i].launches), k[i].name.c_str());
}

void print_step_setup(const StepBench& o, Model<float>& model, Recompute mode) {
  const auto precision = o.bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
  std::printf("%s\n", ops::device_choice(o.device).c_str());
  std::printf("matmuls: %s %s\n", o.bf16 ? "bf16," : "fp32,",
              model.backend().matmul_path(precision).c_str());
  std::printf("%s: %.2fM parameters, B=%d T=%d, vocab %d%s, %d threads, %s matmuls, plan %s%s\n",
              o.bm.name.c_str(), double(o.cfg.num_parameters()) * 1e-6, o.bm.B, o.bm.T,
              o.cfg.vocab_size, o.cfg.tie_word_embeddings ? " (tied)" : "", num_threads(),
              o.bf16 ? "bf16" : "fp32", o.plan.to_string().c_str(),
              o.train ? ", AdamW with clipping" : "");
  if (mode != Recompute::None) std::printf("recompute: %s\n", o.recompute.c_str());
  if (o.bf16_acts) std::printf("activations: stored in bf16\n");
  if (o.attention == ops::AttentionImpl::Cudnn) std::printf("attention: cuDNN's fused attention\n");
}

// The step's time, rates, peak RSS, the memory estimate a training run prints
// (--dry-run) and checks before it allocates, against what this process
// reached, and the machine-readable `result:` line.
void print_step_result(StepBench& o, const Model<float>& model, Recompute mode, double med,
                       int64_t runtime_rss) {
  const int64_t N = int64_t(o.bm.B) * o.bm.T;
  const double gflops = step_flops(o.cfg, o.bm.B, o.bm.T) / med * 1e-9;
  if (o.peak_measured) {
    const double first = o.peak;
    o.peak = settled_peak(first, gflops, [&] {
      const FmaPeak f = measure_fma_peak(0.25);
      return o.bf16 && f.bf16 > 0 ? f.bf16 : f.fp32;
    });
    if (gflops > first)
      std::printf(
          "peak: %.1f GFLOP/s measured again (the first measurement, %.1f, was below the "
          "step's rate: the machine was busy then)\n",
          o.peak, first);
  }
  std::printf("activations: %.1f MiB\n", double(model.activation_bytes()) / (1 << 20));
  std::printf("step: %.1f ms (median of %d), %.0f tokens/s, %.1f GFLOP/s", med * 1e3, o.steps,
              double(N) / med, gflops);
  if (o.peak > 0)
    std::printf(", %.1f%% of the %s peak", 100 * gflops / o.peak, o.bf16 ? "bf16" : "fp32");
  const double rss = peak_rss_mib();
  std::printf("\npeak RSS: %.1f MiB\n", rss);
  MemoryUse use;
  use.gradients = true;
  use.optimizer_share = o.train ? 1 : 0;
  use.batch = o.bm.B, use.seq = o.bm.T;
  use.recompute = mode;
  use.bf16_activations = o.bf16_acts;
  use.bf16_weight_copies =
      o.bf16 && (ops::resolve_device(o.device) != "cpu" || cpu_features().native_bf16());
  use.runtime_bytes = runtime_rss;
  const MemoryEstimate est = estimate_memory(o.cfg, o.plan, use);
  const double est_mib = double(est.total()) / (1 << 20);
  std::printf("memory estimate: %s = %.1f MiB, %+.1f%% of the peak RSS\n", est.to_string().c_str(),
              est_mib, 100 * (est_mib / rss - 1));
  std::printf(
      "result: tokens_per_s=%.1f step_ms=%.2f gflops=%.2f peak_fraction=%.4f "
      "peak_gflops=%.1f peak_rss_mib=%.1f estimate_mib=%.1f params=%lld threads=%d\n",
      double(N) / med, med * 1e3, gflops, o.peak > 0 ? gflops / o.peak : 0.0, o.peak, rss, est_mib,
      static_cast<long long>(o.cfg.num_parameters()), num_threads());
}

// `bench model` (forward + backward) and `bench train` (the whole optimizer
// step a recipe runs: zero_grad, forward + backward, global-norm clipping and
// AdamW). Both report the fraction of the fp32 (or bf16) FMA peak measured on
// the spot, the peak RSS, and end with a machine-readable `result:` line.
}  // namespace

int bench_step(int argc, char** argv, int first, bool train) {
  const std::string name = train ? "strata bench train" : "strata bench model";
  Args args = step_args(name, train);
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
  StepBench o = step_options(args, name, train);
  print_bench_machine();
  find_step_peak(o);
  const int64_t runtime_rss = process_rss_bytes();  // before the model
  Model<float> model(o.cfg, o.plan, ops::make_backend<float>(o.device));
  model.init_weights(1);
  model.backend().set_attention(o.attention);  // (refused on cpu before any warning)
  if (o.bf16) model.backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  if (o.bf16_acts) model.set_activation_storage(ops::Dtype::BF16);
  Recompute mode = Recompute::None;
  STRATA_USAGE_CHECK(parse_recompute(o.recompute, &mode), name, ": --recompute '", o.recompute,
                     "' is not none, selective or full");
  model.set_recompute(mode);
  std::unique_ptr<AdamW<float>> opt;
  if (train) opt = std::make_unique<AdamW<float>>(model.backend(), model.layout(), AdamWConfig{});
  const int64_t N = int64_t(o.bm.B) * o.bm.T;
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = int32_t((i * 7919) % o.cfg.vocab_size);
    targets[i] = int32_t((i * 104729 + 1) % o.cfg.vocab_size);
  }
  print_step_setup(o, model, mode);
  auto step = [&] {
    model.zero_grad();
    {  // (as a training step: each weight converted once, train/step.cpp)
      const ops::HeldWeights<float> held(model.backend(), model.params(), model.num_params());
      model.forward_backward(tokens.data(), targets.data(), o.bm.B, o.bm.T, 1.0 / double(N));
    }
    if (opt) opt->step(model.params(), model.grads(), 1e-5);
    model.backend().synchronize();
  };
  print_step_result(o, model, mode, median_seconds(step, o.steps), runtime_rss);
  if (o.kernels > 0) print_top_kernels(step, o.kernels);
  return 0;
}

}  // namespace strata::cli
