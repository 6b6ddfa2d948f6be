// `strata bench generate`: prefill and decode throughput with the KV cache,
// early exit and self-speculative decoding, against the machine's memory
// bandwidth (the measurements: infer/generate_bench.h).
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
#include "core/text.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "infer/generate_bench.h"
#include "infer/text_generation.h"
#include "io/model_io.h"
#include "model/model.h"

namespace strata::cli {
namespace {

const char* kDefaultPrompts[] = {
    "It is a truth universally acknowledged",
    "Emma Woodhouse, handsome, clever, and rich,",
    "The family of Dashwood had long been settled in Sussex.",
    "Sir Walter Elliot, of Kellynch Hall, in Somersetshire,",
    "No one who had ever seen Catherine Morland in her infancy",
    "About thirty years ago Miss Maria Ward, of Huntingdon,",
};

Args bench_generate_args() {
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
      .option("prompts", "FILE",
              "JSONL file, one {\"prompt\": TEXT} per line, as strata generate --prompts takes "
              "(default: six novel openings)",
              "")
      .option("max-new-tokens", "N", "tokens generated per prompt", "128")
      .option("repeat", "R", "repetitions per prompt", "3")
      .option("exit-layer", "E", "also measure early exit and self-speculation at layer E", "0")
      .option("speculations", "D", "drafts per self-speculative round", "4")
      .option("tokens-per-round", "A",
              "for the cost model's bandwidth-bound projection: tokens per round to assume "
              "instead of the measured ones (e.g. a LayerSkip model's, on a --model shape)",
              "0");
  add_threads_option(args)
      .option("link-delay-us", "US",
              "under --tp: model a link latency, every tp collective completing no earlier than "
              "US microseconds after it starts (an async one overlaps it with compute)",
              "0")
      .flag("self-speculative", "measure self-speculative decoding (needs --exit-layer)")
      .flag("bf16", "bf16 matmuls; decoding reads bf16 copies of the weights (half the bytes)")
      .option("kv-cache", "DTYPE", "the KV cache's storage: fp32 or bf16", "fp32")
      .flag("no-graphs",
            "decode every step eagerly (by default a device that records graphs, cuda or simt, "
            "replays each decode step as one graph and plain decoding is also measured without)");
  return args;
}

// The model benchmarked: the checkpoint's (with its tokenizer), or a
// randomly initialised one of a benchmark shape (--model).
struct BenchModel {
  LoadedModel lm;
  std::unique_ptr<Model<float>> owned;
  Model<float>* model = nullptr;
  std::optional<Tokenizer> tok;
  std::string source;
};

BenchModel bench_model(const Args& args) {
  BenchModel b;
  b.source = args.get("checkpoint");
  if (args.get("model").empty()) {
    b.lm = load_model_from_args(args, "strata bench generate", true, args.get_int("link-delay-us"));
    b.model = b.lm.model.get();
    b.tok = checkpoint_tokenizer(b.lm, b.source);
    return b;
  }
  STRATA_USAGE_CHECK(args.get_int("vocab") >= 2, "strata bench generate: --vocab must be >= 2");
  const LlamaConfig cfg = bench_model_config(args.get("model"), args.get_int("vocab"), false);
  const LayerPlan plan = args.get("plan").empty()
                             ? LayerPlan::standard(cfg.num_hidden_layers)
                             : LayerPlan::parse(args.get("plan"), cfg.num_hidden_layers);
  b.owned = std::make_unique<Model<float>>(cfg, plan, ops::make_backend<float>(args.get("device")));
  b.owned->init_weights(1);
  b.model = b.owned.get();
  b.source = "random " + args.get("model") + " model";
  return b;
}

// The prompts' ids: --prompts (JSONL, as generate's), six novel openings, or for a
// random model 12 fixed pseudo-random ids per prompt.
std::vector<std::vector<int32_t>> bench_prompts(const Args& args, const BenchModel& b) {
  std::vector<std::string> prompts;
  if (!b.tok) {
    STRATA_USAGE_CHECK(args.get("prompts").empty(),
                       "strata bench generate: --prompts needs a checkpoint's tokenizer");
    prompts.assign(6, "");
  } else if (args.get("prompts").empty()) {
    prompts.assign(std::begin(kDefaultPrompts), std::end(kDefaultPrompts));
  } else {
    // The JSONL of `strata generate --prompts`: one {"prompt": TEXT} per line.
    const PromptFile file =
        read_prompt_file(args.get("prompts"), [](const std::string&, const std::string&) {
          return std::vector<int32_t>{};  // encoded below, with BOS
        });
    prompts = file.texts;
    STRATA_CHECK(!prompts.empty(), args.get("prompts"), ": no prompts");
  }
  std::vector<std::vector<int32_t>> ids(prompts.size());
  const int V = b.model->config().vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!b.tok) {
      for (int k = 0; k < 12; ++k)
        ids[i].push_back(int32_t((uint64_t(i * 12 + k) * 2654435761u) % V));
      continue;
    }
    if (b.tok->bos_id() >= 0) ids[i].push_back(b.tok->bos_id());
    const auto enc = b.tok->encode(prompts[i]);
    ids[i].insert(ids[i].end(), enc.begin(), enc.end());
  }
  return ids;
}

GenerateBenchOptions bench_options(const Args& args, const Model<float>& model) {
  GenerateBenchOptions o;
  o.exit_layer = args.get_int("exit-layer");
  const int L = model.config().num_hidden_layers;
  STRATA_CHECK(o.exit_layer >= 0 && o.exit_layer < L,
               "strata bench generate: --exit-layer must be in 1..", L - 1);
  if (o.exit_layer > 0)
    model.plan().check_exit(o.exit_layer, "strata bench generate: --exit-layer");
  o.self_speculative = args.has("self-speculative");
  STRATA_CHECK(!o.self_speculative || o.exit_layer > 0,
               "strata bench generate: --self-speculative needs --exit-layer E");
  o.repeat = std::max(1, args.get_int("repeat"));
  o.max_new_tokens = args.get_int("max-new-tokens");
  if (o.self_speculative) o.speculations = args.get_int("speculations");
  o.graphs = !args.has("no-graphs");
  o.kv_cache = kv_cache_option(args, "strata bench generate");
  o.eager_too = o.graphs && model.backend().graphs();
  return o;
}

}  // namespace

int bench_generate(int argc, char** argv, int first) {
  Args args = bench_generate_args();
  if (!args.parse(argc, argv, first)) return 0;
  const bool random_model = !args.get("model").empty();
  STRATA_USAGE_CHECK(args.has("checkpoint") != random_model,
                     "strata bench generate: give --checkpoint FILE or --model 288|768 (one of the "
                     "two)");
  STRATA_USAGE_CHECK(!random_model || args.get_int("tp") == 1,
                     "strata bench generate: --model runs alone (no --tp)");
  apply_threads(args.get_int("threads"));
  BenchModel b = bench_model(args);
  const auto prompts = bench_prompts(args, b);
  const bool bf16 = args.has("bf16");
  if (bf16) b.model->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const GenerateBenchOptions o = bench_options(args, *b.model);
  std::vector<GenerateBenchMode> modes = generate_bench_modes(o);
  std::fprintf(stderr, "bench generate: %s: %zu prompts x %d repeats, %d new tokens each\n",
               b.source.c_str(), prompts.size(), o.repeat, o.max_new_tokens);
  // The bound's bandwidth: on a GPU its DRAM's peak (datasheet or computed,
  // ops::accelerator_peak); on the host the read bandwidth measured before
  // and after decoding (a shared host's varies from minute to minute), the
  // higher of the two, so the fraction is not flattered.
  const std::string device = ops::resolve_device(args.get("device"));
  const ops::AcceleratorPeak gpu =
      device == "cuda" ? ops::accelerator_peak(device) : ops::AcceleratorPeak{};
  const bool on_gpu = gpu.dram_gbs > 0;
  const BandwidthPeak peak_before =
      on_gpu ? BandwidthPeak{} : measure_read_bandwidth(int64_t(1) << 30, 3);
  run_generate_bench(*b.model, prompts, modes, o.repeat);
  const LlamaConfig& c = b.model->config();
  const double bytes = decode_weight_bytes(c, bf16);
  const double bw_before = peak_before.read_gbs;
  const double bw_after = on_gpu ? 0.0 : measure_read_bandwidth(int64_t(1) << 30, 3).read_gbs;
  const double bw = on_gpu ? gpu.dram_gbs : std::max(bw_before, bw_after);
  const double bound = bw * 1e9 / bytes;
  print_bench_machine();
  std::fputs(generate_bench_table(modes).c_str(), stdout);
  const std::string source = on_gpu ? cat("the GPU's DRAM peak: ", gpu.what)
                                    : cat("measured before decoding ", fixed(bw_before, 1),
                                          ", after ", fixed(bw_after, 1));
  std::printf(
      "\nweights read per token: %.1f MB (%s); memory read bandwidth: %.1f GB/s (%s); bound: "
      "%.0f tokens/s; plain decode reaches %.0f%% of it\n",
      bytes / 1e6, bf16 ? "bf16" : "fp32", bw, source.c_str(), bound,
      100.0 * median(modes.front().decode) / bound);
  if (!on_gpu && bytes < double(peak_before.llc_bytes))
    std::printf(
        "(the weights fit in the %.0f MiB last-level cache, so DRAM bandwidth does not "
        "bound this model's decode)\n",
        double(peak_before.llc_bytes) / (1 << 20));
  if (o.self_speculative)
    std::fputs(spec_cost_report(modes[0], modes[1], modes[2], c, bytes, bf16 ? 2.0 : 4.0, bw * 1e9,
                                args.get_double("tokens-per-round"))
                   .c_str(),
               stdout);
  return 0;
}

}  // namespace strata::cli
