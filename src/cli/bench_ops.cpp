// `strata bench ops` and `strata bench model`: throughput of each CPU kernel on
// the shapes of real models, and of a whole training step. Benchmarks are
// commands that print numbers (never timed tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/memory.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace strata::cli {
namespace {

struct BenchModel {
  std::string name;
  int layers, C, F, H, Hkv, V, B, T;
  int D() const { return C / H; }
};

// Shapes of llama2.c's stories15M (6 layers, 288 wide) and stories110M
// (12 layers, 768 wide), with the Llama-2 vocabulary.
std::vector<BenchModel> bench_models(const std::string& which, int tokens) {
  std::vector<BenchModel> all = {{"6L-288", 6, 288, 768, 6, 6, 32000, 0, 256},
                                 {"12L-768", 12, 768, 2048, 12, 12, 32000, 0, 1024}};
  std::vector<BenchModel> out;
  for (auto& m : all)
    if (which == "all" || which == m.name || which == std::to_string(m.C)) {
      m.B = std::max(1, tokens / m.T);
      out.push_back(m);
    }
  STRATA_CHECK(!out.empty(), "strata bench: unknown --model '", which,
               "' (choose 288, 768 or all)");
  return out;
}

// The model configuration of a benchmark shape (context: its sequence length).
LlamaConfig bench_config(const BenchModel& bm, int vocab, bool tied) {
  LlamaConfig cfg;
  cfg.vocab_size = vocab;
  cfg.hidden_size = bm.C;
  cfg.intermediate_size = bm.F;
  cfg.num_hidden_layers = bm.layers;
  cfg.num_attention_heads = bm.H;
  cfg.num_key_value_heads = bm.Hkv;
  cfg.max_position_embeddings = bm.T;
  cfg.tie_word_embeddings = tied;
  cfg.finalize();
  return cfg;
}

// Uniform values in [-scale, scale) into backend memory.
void fill(ops::Backend<float>& be, float* p, int64_t n, uint32_t stream, float scale) {
  const PhiloxStream rng(1234, 7, stream);
  std::vector<float> host(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = float(rng.uniform(uint64_t(i)) * 2 - 1) * scale;
  be.from_host(p, host.data(), n);
}

double median_seconds(const std::function<void()>& fn, int repeat) {
  // Warm-up (workspaces, caches, JIT) for at least 0.2 s: on a shared VM the
  // first milliseconds of a parallel burst can run several times slower.
  Timer warm;
  do fn();
  while (warm.seconds() < 0.2);
  std::vector<double> t;
  for (int r = 0; r < repeat; ++r) {
    Timer timer;
    fn();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string op, pass, shape;
  double seconds, amount;  // amount: FLOP or bytes
  bool flops;
};

void print_row(const Row& r) {
  const double rate = r.amount / r.seconds * 1e-9;
  std::printf("%-18s %-9s %-28s %9.3f ms %9.1f %s\n", r.op.c_str(), r.pass.c_str(), r.shape.c_str(),
              r.seconds * 1e3, rate, r.flops ? "GFLOP/s" : "GB/s");
  std::fflush(stdout);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

void bench_ops_for(const BenchModel& m, int repeat, const std::string& filter,
                   const std::string& device, bool bf16) {
  const int64_t N = int64_t(m.B) * m.T, C = m.C, F = m.F, V = m.V, D = m.D();
  const int64_t QKV = int64_t(m.H + 2 * m.Hkv) * D, Q = int64_t(m.H) * D;
  std::printf("\n%s: C=%d F=%d heads=%d/%d D=%ld V=%d, B=%d T=%d (N=%ld tokens), %d threads\n",
              m.name.c_str(), m.C, m.F, m.H, m.Hkv, long(D), m.V, m.B, m.T, long(N), num_threads());
  std::printf("%-18s %-9s %-28s %12s %9s\n", "op", "pass", "shape", "time", "rate");

  // Every op runs through the backend interface, as the model calls it.
  const auto backend = ops::make_backend<float>(device);
  ops::Backend<float>& be = *backend;
  if (bf16) be.set_matmul_precision(ops::MatmulPrecision::BF16);
  using Buf = ops::DeviceBuffer<float>;
  const int64_t big = std::max({N * 2 * F, N * QKV, V * C, 2 * F * C});
  Buf x(&be, big), y(&be, big), w(&be, big), dw(&be, big), dx(&be, big), dy(&be, big),
      aux(&be, big);
  fill(be, x.data(), big, 1, 1.0f);
  fill(be, w.data(), big, 2, 0.05f);
  fill(be, dy.data(), big, 3, 1.0f);
  const float sz = sizeof(float);
  auto want = [&](const std::string& op) {
    return filter.empty() || op.find(filter) != std::string::npos;
  };
  auto run = [&](const std::string& op, const std::string& pass, const std::string& shape,
                 double amount, bool flops, const std::function<void()>& fn) {
    if (!want(op)) return;
    auto timed = [&] {
      fn();
      be.synchronize();  // device backends queue the work
    };
    print_row(Row{op, pass, shape, median_seconds(timed, repeat), amount, flops});
  };

  // Linear layers: forward, and backward (dx and dW GEMMs).
  struct Lin {
    const char* name;
    int64_t in, out;
  };
  for (const Lin& l : {Lin{"linear qkv", C, QKV}, Lin{"linear o", Q, C},
                       Lin{"linear gate|up", C, 2 * F}, Lin{"linear down", F, C}}) {
    const std::string shape = dims({N, l.in}) + " -> " + std::to_string(l.out);
    const double fl = 2.0 * N * l.in * l.out;
    run(l.name, "fwd", shape, fl, true, [&] {
      be.linear_forward(y.data(), x.data(), w.data(), nullptr, N, int(l.in), int(l.out));
    });
    run(l.name, "bwd", shape, 2 * fl, true, [&] {
      be.linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, int(l.in),
                         int(l.out), false);
    });
  }

  Buf rstd(&be, N), wn(&be, C);
  const std::vector<float> ones(size_t(C), 1.0f);
  be.from_host(wn.data(), ones.data(), C);
  run("rmsnorm", "fwd", dims({N, C}), 2.0 * N * C * sz, false,
      [&] { be.rmsnorm_forward(y.data(), rstd.data(), x.data(), wn.data(), N, int(C), 1e-5); });
  run("rmsnorm", "bwd", dims({N, C}), 3.0 * N * C * sz, false, [&] {
    be.rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), wn.data(), rstd.data(), N,
                        int(C));
  });

  Buf cos(&be, int64_t(m.T) * D / 2), sin(&be, int64_t(m.T) * D / 2);
  std::vector<double> inv_freq(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0, -2.0 * i / D);
  be.rope_table(cos.data(), sin.data(), m.T, int(D), inv_freq.data());
  const double rope_bytes = 2.0 * N * (m.H + m.Hkv) * D * sz;
  run("rope", "fwd", dims({N, m.H + m.Hkv, D}), rope_bytes, false, [&] {
    be.rope_forward(x.data(), cos.data(), sin.data(), m.B, m.T, m.H + m.Hkv, int(D), QKV, 0);
  });
  run("rope", "bwd", dims({N, m.H + m.Hkv, D}), rope_bytes, false, [&] {
    be.rope_backward(x.data(), cos.data(), sin.data(), m.B, m.T, m.H + m.Hkv, int(D), QKV, 0);
  });

  // Causal attention: each of its matrix products covers T(T+1)/2 score entries.
  const double pairs = double(m.B) * m.H * (double(m.T) * (m.T + 1) / 2);
  Buf lse(&be, int64_t(m.B) * m.H * m.T);
  fill(be, x.data(), N * QKV, 4, 0.5f);
  const std::string ashape = dims({m.B, m.T, m.H, D}) + " kv" + std::to_string(m.Hkv);
  run("attention", "fwd", ashape, 4.0 * pairs * D, true,
      [&] { be.attention_forward(y.data(), lse.data(), x.data(), m.B, m.T, m.H, m.Hkv, int(D)); });
  run("attention", "bwd", ashape, 10.0 * pairs * D, true, [&] {
    be.attention_backward(dx.data(), dy.data(), x.data(), y.data(), lse.data(), m.B, m.T, m.H,
                          m.Hkv, int(D));
  });

  run("swiglu", "fwd", dims({N, F}), 3.0 * N * F * sz, false,
      [&] { be.swiglu_forward(y.data(), x.data(), N, int(F)); });
  run("swiglu", "bwd", dims({N, F}), 5.0 * N * F * sz, false,
      [&] { be.swiglu_backward(dx.data(), dy.data(), x.data(), N, int(F)); });

  run("residual", "fwd", dims({N, C}), 3.0 * N * C * sz, false,
      [&] { be.residual_forward(y.data(), x.data(), aux.data(), N * C); });

  run("bias add", "fwd", dims({N, C}), 2.0 * N * C * sz, false,
      [&] { be.bias_add_forward(y.data(), wn.data(), N, int(C)); });
  run("bias add", "bwd", dims({N, C}), 1.0 * N * C * sz, false,
      [&] { be.bias_add_backward(dw.data(), dy.data(), N, int(C)); });
  run("axpby", "fwd", dims({N, C}), 3.0 * N * C * sz, false,
      [&] { be.axpby_forward(y.data(), x.data(), aux.data(), N * C, 0.5, 0.5); });

  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = int32_t((i * 7919) % V);
  run("embedding", "fwd", dims({N, C}), 2.0 * N * C * sz, false,
      [&] { be.embedding_forward(y.data(), tokens.data(), w.data(), N, int(C), int(V)); });
  run("embedding", "bwd", dims({N, C}), 3.0 * N * C * sz, false,
      [&] { be.embedding_backward(dw.data(), tokens.data(), dy.data(), N, int(C)); });

  // Fused final norm + LM head + cross-entropy: forward is one GEMM, the fused
  // forward+backward three.
  Buf xn(&be, N * C);
  fill(be, x.data(), N * C, 5, 1.0f);
  const std::string hshape = dims({N, C}) + " -> " + std::to_string(V);
  run("head+ce", "fwd", hshape, 2.0 * N * C * V, true, [&] {
    int64_t n_valid = 0;
    be.head_ce_forward(xn.data(), rstd.data(), lse.data(), nullptr, &n_valid, x.data(), wn.data(),
                       w.data(), tokens.data(), N, int(C), int(V), 1e-5);
  });
  run("head+ce", "fwd+bwd", hshape, 6.0 * N * C * V, true, [&] {
    int64_t n_valid = 0;
    be.head_ce_forward_backward(dx.data(), dw.data() + V * C, dw.data(), xn.data(), rstd.data(),
                                &n_valid, x.data(), wn.data(), w.data(), tokens.data(), N, int(C),
                                int(V), 1e-5, 1.0 / double(N));
  });

  // AdamW over a tensor the size of the 2F x C MLP weight: reads p, g, m, v and
  // writes p, m, v.
  const int64_t P = 2 * F * C;
  Buf mom(&be, P), var(&be, P);
  ops::AdamWStep st;
  st.lr = 1e-4;
  st.weight_decay = 0.1;
  run("adamw", "step", dims({P}), 7.0 * P * sz, false,
      [&] { be.adamw_update(w.data(), dy.data(), mom.data(), var.data(), P, st); });
}

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

// `bench model` (forward + backward) and `bench train` (the whole optimizer
// step a recipe runs: zero_grad, forward + backward, global-norm clipping and
// AdamW). Both report the fraction of the fp32 (or bf16) FMA peak measured on
// the spot, the peak RSS, and end with a machine-readable `result:` line.
int bench_step(int argc, char** argv, int first, bool train) {
  const std::string name = train ? "strata bench train" : "strata bench model";
  Args args(name,
            train ? "Times whole optimizer steps (forward + backward with the fused LM head, "
                    "gradient clipping to norm 1 and AdamW, as `strata train` runs them) of a "
                    "randomly initialised model, and prints tokens/s, GFLOP/s and the fraction "
                    "of the measured FMA peak."
                  : "Times whole training steps (forward + backward, fused LM head) of a randomly "
                    "initialised model and prints tokens/s, GFLOP/s and the fraction of the "
                    "measured FMA peak.");
  args.option("model", "NAME", "288 (6L-288), 768 (12L-768)", "288")
      .option("batch", "B", "micro-batch size (0: tokens / seq)", "0")
      .option("tokens", "N", "tokens per step when --batch is 0", "4096")
      .option("seq", "T", "sequence length (0: the model's default)", "0")
      .option("vocab", "V", "vocabulary size", "32000")
      .option("steps", "S", "timed steps", "5")
      .flag("bf16", "bf16 matmuls with fp32 accumulation (training.precision = \"bf16\")")
      .flag("tied", "tie the embedding and the LM head")
      .option("plan", "TEXT", "layer plan (default: all standard)", "")
      .option("recompute", "MODE",
              "activation recomputation, as training.recompute: none, selective or full (the "
              "FLOP rate counts the useful FLOPs only)",
              "none")
      .option("device", "NAME", "cpu, cuda, simt or auto", "auto")
      .option("peak", "GFLOPS",
              "the FMA peak to divide by (0: measure it, about 1 s; fp32, or bf16 with --bf16)",
              "0")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
  BenchModel bm = bench_models(args.get("model"), args.get_int("tokens")).front();
  if (args.get_int("seq") > 0) bm.T = args.get_int("seq");
  bm.B = args.get_int("batch") > 0 ? args.get_int("batch")
                                   : std::max(1, args.get_int("tokens") / bm.T);
  STRATA_USAGE_CHECK(args.get_int("vocab") >= 2, name, ": --vocab must be at least 2");
  STRATA_USAGE_CHECK(args.get_double("peak") >= 0, name, ": --peak must be >= 0");
  const LlamaConfig cfg = bench_config(bm, args.get_int("vocab"), args.has("tied"));
  const LayerPlan plan = args.get("plan").empty()
                             ? LayerPlan::standard(cfg.num_hidden_layers)
                             : LayerPlan::parse(args.get("plan"), cfg.num_hidden_layers);
  const bool bf16 = args.has("bf16");
  const std::string device = args.get("device");
  print_bench_machine();
  // The peak first, on an idle process (before the model takes its memory).
  const bool cpu = ops::resolve_device(device) == "cpu";
  double peak = args.get_double("peak");
  std::string peak_what = "given with --peak";
  if (peak == 0 && cpu) {
    const FmaPeak f = measure_fma_peak(0.25);
    peak = bf16 && f.bf16 > 0 ? f.bf16 : f.fp32;
    peak_what = bf16 && f.bf16 > 0 ? f.bf16_path : f.fp32_path;
    if (bf16 && f.bf16 == 0) peak_what += ", no native bf16";
    std::printf("peak: %.1f GFLOP/s (%s, measured now; strata bench peak)\n", peak,
                peak_what.c_str());
  }
  const int64_t runtime_rss = process_rss_bytes();  // before the model
  Model<float> model(cfg, plan, ops::make_backend<float>(device));
  model.init_weights(1);
  if (bf16) model.backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const std::string recompute = args.get("recompute");
  Recompute mode = Recompute::None;
  STRATA_USAGE_CHECK(parse_recompute(recompute, &mode), name, ": --recompute '", recompute,
                     "' is not none, selective or full");
  model.set_recompute(mode);
  std::unique_ptr<AdamW<float>> opt;
  if (train) opt = std::make_unique<AdamW<float>>(model.backend(), model.layout(), AdamWConfig{});
  const int64_t N = int64_t(bm.B) * bm.T;
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = int32_t((i * 7919) % cfg.vocab_size);
    targets[i] = int32_t((i * 104729 + 1) % cfg.vocab_size);
  }
  const int steps = std::max(1, args.get_int("steps"));
  const auto precision = bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
  std::printf("%s\n", ops::device_choice(device).c_str());
  std::printf("matmuls: %s %s\n", bf16 ? "bf16," : "fp32,",
              model.backend().matmul_path(precision).c_str());
  std::printf("%s: %.2fM parameters, B=%d T=%d, vocab %d%s, %d threads, %s matmuls, plan %s%s\n",
              bm.name.c_str(), double(cfg.num_parameters()) * 1e-6, bm.B, bm.T, cfg.vocab_size,
              cfg.tie_word_embeddings ? " (tied)" : "", num_threads(), bf16 ? "bf16" : "fp32",
              plan.to_string().c_str(), train ? ", AdamW with clipping" : "");
  if (mode != Recompute::None) std::printf("recompute: %s\n", recompute.c_str());
  auto step = [&] {
    model.zero_grad();
    model.forward_backward(tokens.data(), targets.data(), bm.B, bm.T, 1.0 / double(N));
    if (opt) opt->step(model.params(), model.grads(), 1e-5);
    model.backend().synchronize();
  };
  const double med = median_seconds(step, steps);
  const double gflops = step_flops(cfg, bm.B, bm.T) / med * 1e-9;
  std::printf("activations: %.1f MiB\n", double(model.activation_bytes()) / (1 << 20));
  std::printf("step: %.1f ms (median of %d), %.0f tokens/s, %.1f GFLOP/s", med * 1e3, steps,
              double(N) / med, gflops);
  if (peak > 0) std::printf(", %.1f%% of the %s peak", 100 * gflops / peak, bf16 ? "bf16" : "fp32");
  const double rss = peak_rss_mib();
  std::printf("\npeak RSS: %.1f MiB\n", rss);
  // The estimate a training run prints (--dry-run) and checks before it
  // allocates, against what this process reached.
  MemoryUse use;
  use.gradients = true;
  use.optimizer_share = train ? 1 : 0;
  use.batch = bm.B, use.seq = bm.T;
  use.recompute = mode;
  use.runtime_bytes = runtime_rss;
  const MemoryEstimate est = estimate_memory(cfg, plan, use);
  const double est_mib = double(est.total()) / (1 << 20);
  std::printf("memory estimate: %s = %.1f MiB, %+.1f%% of the peak RSS\n", est.to_string().c_str(),
              est_mib, 100 * (est_mib / rss - 1));
  std::printf(
      "result: tokens_per_s=%.1f step_ms=%.2f gflops=%.2f peak_fraction=%.4f "
      "peak_gflops=%.1f peak_rss_mib=%.1f estimate_mib=%.1f params=%lld threads=%d\n",
      double(N) / med, med * 1e3, gflops, peak > 0 ? gflops / peak : 0.0, peak, rss, est_mib,
      static_cast<long long>(cfg.num_parameters()), num_threads());
  return 0;
}

}  // namespace

LlamaConfig bench_model_config(const std::string& which, int vocab, bool tied) {
  return bench_config(bench_models(which, 4096).front(), vocab, tied);
}

int cmd_bench(int argc, char** argv, int first) {
  const std::string usage =
      "usage: strata bench <peak|ops|model|train|generate|comm> [options]\n\n"
      "  peak      the machine's limits: fp32 (and bf16) FMA peak, DRAM read bandwidth\n"
      "  ops       per-op GFLOP/s or GB/s on the shapes of a 6L-288 and a 12L-768 model\n"
      "  model     forward + backward steps: ms/step, tokens/s, GFLOP/s, % of peak\n"
      "  train     whole optimizer steps (+ clipping and AdamW): the same figures\n"
      "  generate  prefill/decode tokens/s, early exit, self-speculative decoding\n"
      "  comm      (under mpirun) all-reduce time exposed behind compute, with and without "
      "progress polls\n\n"
      "see strata bench <peak|ops|model|train|generate|comm> --help\n";
  STRATA_USAGE_CHECK(
      first < argc,
      "strata bench: which benchmark? (peak, ops, model, train, generate or comm; see strata "
      "bench --help)");
  if (std::string(argv[first]) == "--help" || std::string(argv[first]) == "-h") {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  const std::string sub = argv[first];
  if (sub == "model") return bench_step(argc, argv, first + 1, false);
  if (sub == "train") return bench_step(argc, argv, first + 1, true);
  if (sub == "generate") return bench_generate(argc, argv, first + 1);
  if (sub == "comm") return bench_comm(argc, argv, first + 1);
  if (sub == "peak") return bench_peak(argc, argv, first + 1);
  STRATA_USAGE_CHECK(sub == "ops", "strata bench: unknown benchmark '", sub,
                     "' (choose peak, ops, model, train, generate or comm)");
  Args args("strata bench ops",
            "Prints the throughput of every CPU kernel (forward and backward) on the GEMM and "
            "activation shapes of a 6-layer 288-wide and a 12-layer 768-wide Llama model.");
  args.option("model", "NAME", "288, 768 or all", "all")
      .option("tokens", "N", "tokens per micro-batch (B = N / T)", "4096")
      .option("repeat", "R", "timed repetitions per op (the median is printed)", "5")
      .option("filter", "TEXT", "only ops whose name contains TEXT")
      .option("device", "NAME", "cpu, cuda, simt or auto", "auto")
      .flag("bf16", "bf16 matmuls with fp32 accumulation (the linear and head rows)")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  if (!args.parse(argc, argv, first + 1)) return 0;
  apply_threads(args.get_int("threads"));
  print_bench_machine();
  const std::string device = args.get("device");
  const bool bf16 = args.has("bf16");
  const auto precision = bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
  std::printf("%s\nmatmuls: %s, %s\n", ops::device_choice(device).c_str(), bf16 ? "bf16" : "fp32",
              ops::make_backend<float>(device)->matmul_path(precision).c_str());
  for (const auto& m : bench_models(args.get("model"), args.get_int("tokens")))
    bench_ops_for(m, std::max(1, args.get_int("repeat")), args.get("filter"), device, bf16);
  return 0;
}

}  // namespace strata::cli
