// `strata bench generate`: prefill and decode throughput with the KV cache,
// early exit and self-speculative decoding, against the machine's memory
// bandwidth.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/spec_cost.h"
#include "io/model_io.h"
#include "model/model.h"

namespace strata::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const char* kDefaultPrompts[] = {
    "It is a truth universally acknowledged",
    "Emma Woodhouse, handsome, clever, and rich,",
    "The family of Dashwood had long been settled in Sussex.",
    "Sir Walter Elliot, of Kellynch Hall, in Somersetshire,",
    "No one who had ever seen Catherine Morland in her infancy",
    "About thirty years ago Miss Maria Ward, of Huntingdon,",
};

}  // namespace

// The self-speculative cost model (infer/spec_cost.h) from the three modes'
// measured times, against the measured speed-up, and projected onto a decode
// bound by reading weights.
template <typename Mode>
static void print_cost_model(const Mode& plain, const Mode& early, const Mode& spec,
                             const Model<float>& model, double bytes, double bytes_per_weight,
                             double bw, double assume_tokens) {
  const LlamaConfig& c = model.config();
  const int L = c.num_hidden_layers, E = spec.o.exit_layer;
  const double rounds = double(std::max<int64_t>(1, spec.rounds));
  SpecCost m;
  m.t_full = plain.decode_s / double(plain.tokens);
  m.t_exit = early.decode_s / double(early.tokens);
  m.t_verify = spec.verify_s / rounds;
  m.drafts = double(spec.drafted) / rounds;
  m.tokens = double(spec.tokens) / rounds;
  const double measured_round = spec.decode_s / rounds;
  const double measured = (double(spec.tokens) / spec.decode_s) * m.t_full;
  std::printf(
      "\ncost model (%s): plain step %.3f ms, early-exit step %.3f ms, verification of "
      "d+1 = %.2f positions %.3f ms, %.2f tokens per round\n",
      spec.name.c_str(), m.t_full * 1e3, m.t_exit * 1e3, m.drafts + 1, m.t_verify * 1e3, m.tokens);
  std::printf(
      "  round: predicted %.3f ms = (d+1) x early-exit step + verification; measured %.3f "
      "ms (drafting %.3f, verifying %.3f, the rest %.3f)\n",
      m.round_seconds() * 1e3, measured_round * 1e3, spec.draft_s / rounds * 1e3,
      spec.verify_s / rounds * 1e3, (spec.decode_s - spec.draft_s - spec.verify_s) / rounds * 1e3);
  std::printf("  speed-up over plain decoding: predicted %.2fx, measured %.2fx\n", m.speedup(),
              measured);
  const double head = (double(c.vocab_size) * c.hidden_size + c.hidden_size) * bytes_per_weight;
  const double tokens = assume_tokens > 0 ? assume_tokens : m.tokens;
  const SpecCost b = bandwidth_bound_spec_cost(bytes - head, head, L, E, m.drafts, tokens, bw);
  std::printf(
      "  if decode were bound by reading the weights (%.1f MB of layers, %.1f MB of head "
      "at %.1f GB/s) with %.2f tokens per round%s: round %.3f ms for %.2f plain steps of "
      "%.3f ms, speed-up %.2fx\n",
      (bytes - head) / 1e6, head / 1e6, bw / 1e9, tokens,
      assume_tokens > 0 ? " (--tokens-per-round)" : "", b.round_seconds() * 1e3, tokens,
      b.t_full * 1e3, b.speedup());
}

int bench_generate(int argc, char** argv, int first) {
  Args args("strata bench generate",
            "Generates greedily from a checkpoint for a set of prompts and prints prefill and "
            "decode tokens/s (median over prompts and repeats) for plain KV-cache decoding, and "
            "for early exit and self-speculative decoding when asked (with the acceptance rate, "
            "tokens per full-model pass and speed-up over plain decoding on the same prompts). "
            "Decode is compared with the bound set by reading every weight once per token at "
            "the measured memory bandwidth.");
  add_model_options(args);
  args.option("model", "NAME",
              "instead of --checkpoint: a randomly initialised model of a benchmark shape, 288 "
              "(6L-288) or 768 (12L-768, weights larger than most last-level caches), prompted "
              "with fixed random token ids",
              "")
      .option("vocab", "V", "vocabulary of the --model shape", "32000")
      .option("prompts", "FILE", "one prompt per line (default: six novel openings)", "")
      .option("max-new-tokens", "N", "tokens generated per prompt", "128")
      .option("repeat", "R", "repetitions per prompt", "3")
      .option("exit-layer", "E", "also measure early exit and self-speculation at layer E", "0")
      .option("speculations", "D", "drafts per self-speculative round", "4")
      .option("tokens-per-round", "A",
              "for the cost model's bandwidth-bound projection: tokens per round to assume "
              "instead of the measured ones (e.g. a LayerSkip model's, on a --model shape)",
              "0")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0")
      .option("link-delay-us", "US",
              "under --tp: model a link latency, every tp collective completing no earlier than "
              "US microseconds after it starts (an async one overlaps it with compute)",
              "0")
      .flag("self-speculative", "measure self-speculative decoding (needs --exit-layer)")
      .flag("bf16", "bf16 matmuls; decoding reads bf16 copies of the weights (half the bytes)");
  if (!args.parse(argc, argv, first)) return 0;
  const bool random_model = !args.get("model").empty();
  STRATA_USAGE_CHECK(args.has("checkpoint") != random_model,
                     "strata bench generate: give --checkpoint FILE or --model 288|768 (one of the "
                     "two)");
  STRATA_USAGE_CHECK(!random_model || args.get_int("tp") == 1,
                     "strata bench generate: --model runs alone (no --tp)");
  apply_threads(args.get_int("threads"));
  LoadedModel lm;
  std::unique_ptr<Model<float>> owned;
  Model<float>* model = nullptr;
  std::string source = args.get("checkpoint");
  if (random_model) {
    STRATA_USAGE_CHECK(args.get_int("vocab") >= 2, "strata bench generate: --vocab must be >= 2");
    const LlamaConfig cfg = bench_model_config(args.get("model"), args.get_int("vocab"), false);
    const LayerPlan plan = args.get("plan").empty()
                               ? LayerPlan::standard(cfg.num_hidden_layers)
                               : LayerPlan::parse(args.get("plan"), cfg.num_hidden_layers);
    owned = std::make_unique<Model<float>>(cfg, plan, ops::make_backend<float>(args.get("device")));
    owned->init_weights(1);
    model = owned.get();
    source = "random " + args.get("model") + " model";
  } else {
    lm = load_model_from_args(args, "strata bench generate", true, args.get_int("link-delay-us"));
    model = lm.model.get();
    STRATA_CHECK(!lm.info.tokenizer.empty(), args.get("checkpoint"), ": has no tokenizer");
  }
  std::optional<Tokenizer> tok;
  if (!random_model) tok = Tokenizer::from_bytes(lm.info.tokenizer, source);
  std::vector<std::string> prompts;
  if (random_model) {
    STRATA_USAGE_CHECK(args.get("prompts").empty(),
                       "strata bench generate: --prompts needs a checkpoint's tokenizer");
    prompts.assign(6, "");
  } else if (args.get("prompts").empty()) {
    prompts.assign(std::begin(kDefaultPrompts), std::end(kDefaultPrompts));
  } else {
    const std::string text = read_file(args.get("prompts"), "prompts");
    size_t at = 0;
    while (at < text.size()) {
      const size_t nl = text.find('\n', at);
      const std::string line = text.substr(at, nl == std::string::npos ? nl : nl - at);
      if (!line.empty()) prompts.push_back(line);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
    STRATA_CHECK(!prompts.empty(), args.get("prompts"), ": no prompts (one per line)");
  }
  const bool bf16 = args.has("bf16");
  if (bf16) model->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const int E = args.get_int("exit-layer");
  const int L = model->config().num_hidden_layers;
  STRATA_CHECK(E >= 0 && E < L, "strata bench generate: --exit-layer must be in 1..", L - 1);
  if (E > 0) model->plan().check_exit(E, "strata bench generate: --exit-layer");
  STRATA_CHECK(!args.has("self-speculative") || E > 0,
               "strata bench generate: --self-speculative needs --exit-layer E");
  const int repeat = std::max(1, args.get_int("repeat"));

  struct Mode {
    std::string name;
    GenerateOptions o;
    std::vector<double> prefill, decode;
    int64_t drafted = 0, accepted = 0, rounds = 0, tokens = 0;
    double decode_s = 0, draft_s = 0, verify_s = 0;
    std::vector<std::vector<int32_t>> outputs;
  };
  std::vector<Mode> modes;
  GenerateOptions base;
  base.max_new_tokens = args.get_int("max-new-tokens");
  base.eos_id = -1;  // fixed lengths: every mode generates the same number of tokens
  auto mode = [](std::string name, const GenerateOptions& o) {
    Mode m;
    m.name = std::move(name);
    m.o = o;
    return m;
  };
  modes.push_back(mode("plain", base));
  if (E > 0) {
    GenerateOptions e = base;
    e.exit_layer = E;
    modes.push_back(mode("early exit E=" + std::to_string(E), e));
    if (args.has("self-speculative")) {
      GenerateOptions s = e;
      s.speculations = args.get_int("speculations");
      modes.push_back(mode(
          "self-speculative E=" + std::to_string(E) + " d=" + std::to_string(s.speculations), s));
    }
  }
  std::fprintf(stderr, "bench generate: %s: %zu prompts x %d repeats, %d new tokens each\n",
               source.c_str(), prompts.size(), repeat, base.max_new_tokens);
  std::vector<std::vector<int32_t>> prompt_ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids;
    if (random_model) {  // 12 fixed pseudo-random ids per prompt
      const int V = model->config().vocab_size;
      for (int k = 0; k < 12; ++k) ids.push_back(int32_t((uint64_t(i * 12 + k) * 2654435761u) % V));
    } else {
      if (tok->bos_id() >= 0) ids.push_back(tok->bos_id());
      const auto enc = tok->encode(prompts[i]);
      ids.insert(ids.end(), enc.begin(), enc.end());
    }
    prompt_ids.push_back(std::move(ids));
  }
  // The bandwidth before and after decoding (a shared host's varies from
  // minute to minute); the higher counts, so the fraction is not flattered.
  const BandwidthPeak peak_before = measure_read_bandwidth(int64_t(1) << 30, 3);
  const double bw_before = peak_before.read_gbs;
  for (auto& m : modes) {
    for (const auto& ids : prompt_ids) {
      std::vector<int32_t> out;
      for (int r = 0; r < repeat; ++r) {
        GenerateStats st;
        out = generate(*model, ids, m.o, {}, &st);
        m.prefill.push_back(st.prefill_s > 0 ? st.prompt_tokens / st.prefill_s : 0);
        m.decode.push_back(st.decode_s > 0 ? st.new_tokens / st.decode_s : 0);
        m.drafted += st.drafted;
        m.accepted += st.accepted;
        m.rounds += st.rounds;
        m.tokens += st.new_tokens;
        m.decode_s += st.decode_s;
        m.draft_s += st.draft_s;
        m.verify_s += st.verify_s;
      }
      m.outputs.push_back(out);
    }
  }
  // Weights read per decoded token (fp32, or bf16 copies): every layer, the
  // final norm and the head.
  const LlamaConfig& c = model->config();
  const double bytes = double(c.num_parameters() -
                              (c.tie_word_embeddings ? 0 : int64_t(c.vocab_size) * c.hidden_size)) *
                       (bf16 ? 2.0 : 4.0);
  const double bw_after = measure_read_bandwidth(int64_t(1) << 30, 3).read_gbs;
  const double bw = std::max(bw_before, bw_after);
  const double bound = bw * 1e9 / bytes;
  const Mode& plain = modes.front();
  const double plain_tps = double(plain.tokens) / plain.decode_s;
  print_bench_machine();
  std::printf("%-28s %12s %12s %10s %12s %9s\n", "mode", "prefill t/s", "decode t/s", "speed-up",
              "acceptance", "tok/pass");
  for (const Mode& m : modes) {
    const double tps = double(m.tokens) / m.decode_s;
    std::printf("%-28s %12.0f %12.1f %9.2fx", m.name.c_str(), median(m.prefill), median(m.decode),
                tps / plain_tps);
    if (m.o.speculations)
      std::printf(" %11.1f%% %9.2f",
                  100.0 * double(m.accepted) / double(std::max<int64_t>(1, m.drafted)),
                  double(m.tokens) / double(std::max<int64_t>(1, m.rounds)));
    std::printf("\n");
    if (m.o.speculations)
      std::printf("%-28s greedy output identical to plain decoding: %s\n", "",
                  m.outputs == plain.outputs ? "yes" : "NO");
  }
  std::printf(
      "\nweights read per token: %.1f MB (%s); memory read bandwidth: %.1f GB/s (before "
      "decoding %.1f, after %.1f); bound: %.0f tokens/s; plain decode reaches %.0f%% of it\n",
      bytes / 1e6, bf16 ? "bf16" : "fp32", bw, bw_before, bw_after, bound,
      100.0 * median(plain.decode) / bound);
  if (bytes < double(peak_before.llc_bytes))
    std::printf(
        "(the weights fit in the %.0f MiB last-level cache, so DRAM bandwidth does not "
        "bound this model's decode)\n",
        double(peak_before.llc_bytes) / (1 << 20));
  if (modes.size() == 3)
    print_cost_model(modes[0], modes[1], modes[2], *model, bytes, bf16 ? 2.0 : 4.0, bw * 1e9,
                     args.get_double("tokens-per-round"));
  return 0;
}

}  // namespace strata::cli
