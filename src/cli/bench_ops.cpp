// `strata bench ops`: throughput of each kernel on the shapes of real models
// (bench model and train: cli/bench_step.cpp). Benchmarks are commands that
// print numbers (never timed tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_common.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/memory.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace strata::cli {
namespace {

// Uniform values in [-scale, scale) into backend memory.
void fill(ops::Backend<float>& be, float* p, int64_t n, uint32_t stream, float scale) {
  const PhiloxStream rng(1234, 7, stream);
  std::vector<float> host(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = float(rng.uniform(uint64_t(i)) * 2 - 1) * scale;
  be.from_host(p, host.data(), n);
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

using Buf = ops::DeviceBuffer<float>;

// What the op rows of one model shape share: the backend, buffers big enough
// for every op, and the row printer. Every op runs through the backend
// interface, as the model calls it.
struct OpBench {
  OpBench(const BenchModel& bm, ops::Backend<float>& backend, int repeats, std::string only)
      : m(bm),
        be(backend),
        repeat(repeats),
        filter(std::move(only)),
        N(int64_t(m.B) * m.T),
        C(m.C),
        F(m.F),
        V(m.V),
        D(m.D()),
        QKV(int64_t(m.H + 2 * m.Hkv) * D),
        Q(int64_t(m.H) * D),
        big(std::max({N * 2 * F, N * QKV, V * C, 2 * F * C})),
        x(&be, big),
        y(&be, big),
        w(&be, big),
        dw(&be, big),
        dx(&be, big),
        dy(&be, big),
        aux(&be, big) {
    fill(be, x.data(), big, 1, 1.0f);
    fill(be, w.data(), big, 2, 0.05f);
    fill(be, dy.data(), big, 3, 1.0f);
  }
  // Times fn (the median of `repeat`) and prints its row, unless the filter
  // leaves the op out.
  void run(const std::string& op, const std::string& pass, const std::string& shape, double amount,
           bool flops, const std::function<void()>& fn) {
    if (!filter.empty() && op.find(filter) == std::string::npos) return;
    auto timed = [&] {
      fn();
      be.synchronize();  // device backends queue the work
    };
    print_row(Row{op, pass, shape, median_seconds(timed, repeat), amount, flops});
  }

  const BenchModel& m;
  ops::Backend<float>& be;
  const int repeat;
  const std::string filter;
  bool bf16_acts = false;  // --activations bf16: the attention rows read and write bf16
  const int64_t N, C, F, V, D, QKV, Q, big;
  static constexpr float sz = sizeof(float);
  Buf x, y, w, dw, dx, dy, aux;
  Buf rstd, wn, lse;  // set up by the rows that first need them
};

// ------------------------------------------------------------- the op rows
// One function per op family, in the order of the printed table: GFLOP/s for
// compute-bound ops, GB/s for the rest.

// Linear layers: forward, and backward (dx and dW GEMMs).
void linear_rows(OpBench& b) {
  struct Lin {
    const char* name;
    int64_t in, out;
  };
  for (const Lin& l : {Lin{"linear qkv", b.C, b.QKV}, Lin{"linear o", b.Q, b.C},
                       Lin{"linear gate|up", b.C, 2 * b.F}, Lin{"linear down", b.F, b.C}}) {
    const std::string shape = dims({b.N, l.in}) + " -> " + std::to_string(l.out);
    const double fl = 2.0 * b.N * l.in * l.out;
    b.run(l.name, "fwd", shape, fl, true, [&] {
      b.be.linear_forward(b.y.data(), b.x.data(), b.w.data(), nullptr, b.N, int(l.in), int(l.out));
    });
    b.run(l.name, "bwd", shape, 2 * fl, true, [&] {
      b.be.linear_backward(b.dx.data(), b.dw.data(), nullptr, b.dy.data(), b.x.data(), b.w.data(),
                           b.N, int(l.in), int(l.out), false);
    });
  }
}

void norm_rope_rows(OpBench& b) {
  const int64_t N = b.N, C = b.C, D = b.D;
  const BenchModel& m = b.m;
  b.rstd = Buf(&b.be, N);
  b.wn = Buf(&b.be, C);
  const std::vector<float> ones(size_t(C), 1.0f);
  b.be.from_host(b.wn.data(), ones.data(), C);
  b.run("rmsnorm", "fwd", dims({N, C}), 2.0 * N * C * b.sz, false, [&] {
    b.be.rmsnorm_forward(b.y.data(), b.rstd.data(), b.x.data(), b.wn.data(), N, int(C), 1e-5);
  });
  b.run("rmsnorm", "bwd", dims({N, C}), 3.0 * N * C * b.sz, false, [&] {
    b.be.rmsnorm_backward(b.dx.data(), b.dw.data(), b.dy.data(), b.x.data(), b.wn.data(),
                          b.rstd.data(), N, int(C));
  });
  Buf cos(&b.be, int64_t(m.T) * D / 2), sin(&b.be, int64_t(m.T) * D / 2);
  std::vector<double> inv_freq(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0, -2.0 * i / D);
  b.be.rope_table(cos.data(), sin.data(), m.T, int(D), inv_freq.data());
  const double rope_bytes = 2.0 * N * (m.H + m.Hkv) * D * b.sz;
  b.run("rope", "fwd", dims({N, m.H + m.Hkv, D}), rope_bytes, false, [&] {
    b.be.rope_forward(b.x.data(), cos.data(), sin.data(), m.B, m.T, m.H + m.Hkv, int(D), b.QKV, 0);
  });
  b.run("rope", "bwd", dims({N, m.H + m.Hkv, D}), rope_bytes, false, [&] {
    b.be.rope_backward(b.x.data(), cos.data(), sin.data(), m.B, m.T, m.H + m.Hkv, int(D), b.QKV, 0);
  });
}

// Causal attention: each of its matrix products covers T(T+1)/2 score entries.
void attention_rows(OpBench& b) {
  const BenchModel& m = b.m;
  const double pairs = double(m.B) * m.H * (double(m.T) * (m.T + 1) / 2);
  b.lse = Buf(&b.be, int64_t(m.B) * m.H * m.T);
  fill(b.be, b.x.data(), b.N * b.QKV, 4, 0.5f);
  const std::string shape =
      dims({m.B, m.T, m.H, b.D}) + " kv" + std::to_string(m.Hkv) + (b.bf16_acts ? " bf16" : "");
  // The activations in their storage: the fp32 buffers, or bf16 copies of
  // them (what a step with training.activations = "bf16" hands attention).
  struct Io {
    ops::Act<float> qkv, out, dqkv, dout;
  } io{b.x.data(), b.y.data(), b.dx.data(), b.dy.data()};
  ops::ActBuffer<float> qkv16, out16, dqkv16, dout16;
  if (b.bf16_acts) {
    const int64_t nq = b.N * b.QKV, no = b.N * b.Q;
    qkv16 = ops::ActBuffer<float>(&b.be, size_t(nq), ops::Dtype::BF16);
    out16 = ops::ActBuffer<float>(&b.be, size_t(no), ops::Dtype::BF16);
    dqkv16 = ops::ActBuffer<float>(&b.be, size_t(nq), ops::Dtype::BF16);
    dout16 = ops::ActBuffer<float>(&b.be, size_t(no), ops::Dtype::BF16);
    b.be.copy(qkv16.data(), b.x.data(), nq);
    b.be.copy(dout16.data(), b.dy.data(), no);
    io = {qkv16.data(), out16.data(), dqkv16.data(), dout16.data()};
  }
  // strata's kernels, then cuDNN's fused attention beside them on device cuda
  // where it can run (a build with cuDNN, bf16 matmuls; otherwise a line says
  // why not).
  for (const auto impl : {ops::AttentionImpl::Strata, ops::AttentionImpl::Cudnn}) {
    const bool cudnn = impl == ops::AttentionImpl::Cudnn;
    const std::string op = cudnn ? "attention cudnn" : "attention";
    if (cudnn && (std::string(b.be.name()) != "cuda" ||
                  (!b.filter.empty() && op.find(b.filter) == std::string::npos)))
      break;
    try {
      b.be.set_attention(impl);
    } catch (const Error& e) {
      std::printf("%-18s %s\n", op.c_str(), e.what());
      break;
    }
    b.run(op, "fwd", shape, 4.0 * pairs * b.D, true, [&] {
      b.be.attention_forward(io.out, b.lse.data(), io.qkv, m.B, m.T, m.H, m.Hkv, int(b.D));
    });
    b.run(op, "bwd", shape, 10.0 * pairs * b.D, true, [&] {
      b.be.attention_backward(io.dqkv, io.dout, io.qkv, io.out, b.lse.data(), m.B, m.T, m.H, m.Hkv,
                              int(b.D));
    });
  }
  b.be.set_attention(ops::AttentionImpl::Strata);
}

// SwiGLU, residual, bias add, axpby.
void pointwise_rows(OpBench& b) {
  const int64_t N = b.N, C = b.C, F = b.F;
  const float sz = b.sz;
  b.run("swiglu", "fwd", dims({N, F}), 3.0 * N * F * sz, false,
        [&] { b.be.swiglu_forward(b.y.data(), b.x.data(), N, int(F)); });
  b.run("swiglu", "bwd", dims({N, F}), 5.0 * N * F * sz, false,
        [&] { b.be.swiglu_backward(b.dx.data(), b.dy.data(), b.x.data(), N, int(F)); });
  b.run("residual", "fwd", dims({N, C}), 3.0 * N * C * sz, false,
        [&] { b.be.residual_forward(b.y.data(), b.x.data(), b.aux.data(), N * C); });
  b.run("bias add", "fwd", dims({N, C}), 2.0 * N * C * sz, false,
        [&] { b.be.bias_add_forward(b.y.data(), b.wn.data(), N, int(C)); });
  b.run("bias add", "bwd", dims({N, C}), 1.0 * N * C * sz, false,
        [&] { b.be.bias_add_backward(b.dw.data(), b.dy.data(), N, int(C)); });
  b.run("axpby", "fwd", dims({N, C}), 3.0 * N * C * sz, false,
        [&] { b.be.axpby_forward(b.y.data(), b.x.data(), b.aux.data(), N * C, 0.5, 0.5); });
}

// The embedding, and the fused final norm + LM head + cross-entropy: its
// forward is one GEMM, the fused forward+backward three.
void embedding_head_rows(OpBench& b) {
  const int64_t N = b.N, C = b.C, V = b.V;
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = int32_t((i * 7919) % V);
  b.run("embedding", "fwd", dims({N, C}), 2.0 * N * C * b.sz, false,
        [&] { b.be.embedding_forward(b.y.data(), tokens.data(), b.w.data(), N, int(C), int(V)); });
  b.run("embedding", "bwd", dims({N, C}), 3.0 * N * C * b.sz, false,
        [&] { b.be.embedding_backward(b.dw.data(), tokens.data(), b.dy.data(), N, int(C)); });
  Buf xn(&b.be, N * C);
  fill(b.be, b.x.data(), N * C, 5, 1.0f);
  const std::string shape = dims({N, C}) + " -> " + std::to_string(V);
  b.run("head+ce", "fwd", shape, 2.0 * N * C * V, true, [&] {
    int64_t n_valid = 0;
    b.be.head_ce_forward(xn.data(), b.rstd.data(), b.lse.data(), nullptr, &n_valid, b.x.data(),
                         b.wn.data(), b.w.data(), tokens.data(), N, int(C), int(V), 1e-5);
  });
  b.run("head+ce", "fwd+bwd", shape, 6.0 * N * C * V, true, [&] {
    int64_t n_valid = 0;
    b.be.head_ce_forward_backward(b.dx.data(), b.dw.data() + V * C, b.dw.data(), xn.data(),
                                  b.rstd.data(), &n_valid, b.x.data(), b.wn.data(), b.w.data(),
                                  tokens.data(), N, int(C), int(V), 1e-5, 1.0 / double(N));
  });
}

// AdamW over a tensor the size of the 2F x C MLP weight: reads p, g, m, v and
// writes p, m, v.
void adamw_rows(OpBench& b) {
  const int64_t P = 2 * b.F * b.C;
  Buf mom(&b.be, P), var(&b.be, P);
  ops::AdamWStep st;
  st.lr = 1e-4;
  st.weight_decay = 0.1;
  b.run("adamw", "step", dims({P}), 7.0 * P * b.sz, false,
        [&] { b.be.adamw_update(b.w.data(), b.dy.data(), mom.data(), var.data(), P, st); });
}

// The table of `strata bench ops`: a new op adds its rows in a function above
// and the function here.
constexpr void (*kOpRows[])(OpBench&) = {linear_rows,    norm_rope_rows,      attention_rows,
                                         pointwise_rows, embedding_head_rows, adamw_rows};

void bench_ops_for(const BenchModel& m, int repeat, const std::string& filter,
                   const std::string& device, bool bf16, bool bf16_acts) {
  const int64_t N = int64_t(m.B) * m.T;
  std::printf("\n%s: C=%d F=%d heads=%d/%d D=%ld V=%d, B=%d T=%d (N=%ld tokens), %d threads\n",
              m.name.c_str(), m.C, m.F, m.H, m.Hkv, long(m.D()), m.V, m.B, m.T, long(N),
              num_threads());
  std::printf("%-18s %-9s %-28s %12s %9s\n", "op", "pass", "shape", "time", "rate");
  const auto backend = ops::make_backend<float>(device);
  if (bf16) backend->set_matmul_precision(ops::MatmulPrecision::BF16);
  OpBench b(m, *backend, repeat, filter);
  b.bf16_acts = bf16_acts;
  for (auto rows : kOpRows) rows(b);
}

}  // namespace

std::vector<BenchModel> bench_models(const std::string& which, int tokens) {
  // The GPU shapes (by name only, not in "all"): Llama-3.2-1B's (head dim
  // 64) and Llama-3-8B's widths on 32 layers (head dim 128), sequence 2048.
  std::vector<BenchModel> all = {{"6L-288", 6, 288, 768, 6, 6, 32000, 0, 256},
                                 {"12L-768", 12, 768, 2048, 12, 12, 32000, 0, 1024},
                                 {"24L-1024", 24, 1024, 2816, 16, 16, 32000, 0, 1024, true},
                                 {"16L-2048", 16, 2048, 8192, 32, 8, 128256, 0, 2048, true},
                                 {"32L-4096", 32, 4096, 14336, 32, 8, 128256, 0, 2048, true}};
  std::vector<BenchModel> out;
  for (auto& m : all)
    if ((which == "all" && !m.large) || which == m.name || which == std::to_string(m.C)) {
      m.B = std::max(1, tokens / m.T);
      out.push_back(m);
    }
  STRATA_CHECK(!out.empty(), "strata bench: unknown --model '", which,
               "' (choose 288, 768, 1024, 2048, 4096 or all)");
  return out;
}

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

bool bf16_activations_option(const std::string& given, const std::string& command) {
  const std::string value = canonical_dtype(given);
  STRATA_USAGE_CHECK(value == "fp32" || value == "bf16", command, ": --activations '", value,
                     "' is not fp32 or bf16");
  return value == "bf16";
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
  args.option("model", "NAME", "288, 768, all (those two), 1024 (24L-1024), 2048 or 4096 (GPU shapes)", "all")
      .option("tokens", "N", "tokens per micro-batch (B = N / T)", "4096")
      .option("repeat", "R", "timed repetitions per op (the median is printed)", "5")
      .option("filter", "TEXT", "only ops whose name contains TEXT")
      .option("device", "NAME", "cpu, cuda, simt or auto", "auto")
      .flag("bf16",
            "bf16 matmuls with fp32 accumulation (linear, head and, on cuda/simt, attention)")
      .option("activations", "STORAGE",
              "fp32 or bf16: the attention rows' activations (bf16: as training.activations = "
              "\"bf16\" hands them over, no conversion in the timing)",
              "fp32")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0");
  if (!args.parse(argc, argv, first + 1)) return 0;
  const bool bf16_acts = bf16_activations_option(args.get("activations"), "strata bench ops");
  apply_threads(args.get_int("threads"));
  print_bench_machine();
  const std::string device = args.get("device");
  const bool bf16 = args.has("bf16");
  const auto precision = bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
  std::printf("%s\nmatmuls: %s, %s\n", ops::device_choice(device).c_str(), bf16 ? "bf16" : "fp32",
              ops::make_backend<float>(device)->matmul_path(precision).c_str());
  for (const auto& m : bench_models(args.get("model"), args.get_int("tokens")))
    bench_ops_for(m, std::max(1, args.get_int("repeat")), args.get("filter"), device, bf16,
                  bf16_acts);
  return 0;
}

}  // namespace strata::cli
