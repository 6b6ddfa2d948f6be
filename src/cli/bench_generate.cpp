// `strata bench generate`: prefill and decode throughput with the KV cache,
// early exit and self-speculative decoding, against the machine's memory
// bandwidth.
#include <algorithm>
#include <cstdio>
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
#include "io/model_io.h"

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

int bench_generate(int argc, char** argv, int first) {
  Args args("strata bench generate",
            "Generates greedily from a checkpoint for a set of prompts and prints prefill and "
            "decode tokens/s (median over prompts and repeats) for plain KV-cache decoding, and "
            "for early exit and self-speculative decoding when asked (with the acceptance rate, "
            "tokens per full-model pass and speed-up over plain decoding on the same prompts). "
            "Decode is compared with the bound set by reading every weight once per token at "
            "the measured memory bandwidth.");
  add_model_options(args);
  args.option("prompts", "FILE", "one prompt per line (default: six novel openings)", "")
      .option("max-new-tokens", "N", "tokens generated per prompt", "128")
      .option("repeat", "R", "repetitions per prompt", "3")
      .option("exit-layer", "E", "also measure early exit and self-speculation at layer E", "0")
      .option("speculations", "D", "drafts per self-speculative round", "4")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0")
      .option("link-delay-us", "US",
              "under --tp: model a link latency, every tp collective completing no earlier than "
              "US microseconds after it starts (an async one overlaps it with compute)",
              "0")
      .flag("self-speculative", "measure self-speculative decoding (needs --exit-layer)");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("checkpoint"), "strata bench generate: --checkpoint is required");
  apply_threads(args.get_int("threads"));
  LoadedModel lm =
      load_model_from_args(args, "strata bench generate", true, args.get_int("link-delay-us"));
  Model<float>* model = lm.model.get();
  const CheckpointInfo& info = lm.info;
  STRATA_CHECK(!info.tokenizer.empty(), args.get("checkpoint"), ": has no tokenizer");
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint"));
  std::vector<std::string> prompts;
  if (args.get("prompts").empty()) {
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
    double decode_s = 0;
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
               args.get("checkpoint").c_str(), prompts.size(), repeat, base.max_new_tokens);
  for (auto& m : modes) {
    for (const std::string& p : prompts) {
      std::vector<int32_t> ids;
      if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
      const auto enc = tok.encode(p);
      ids.insert(ids.end(), enc.begin(), enc.end());
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
      }
      m.outputs.push_back(out);
    }
  }
  // Weights read per decoded token (fp32): every layer, the final norm and the head.
  const LlamaConfig& c = model->config();
  const double bytes = double(c.num_parameters() -
                              (c.tie_word_embeddings ? 0 : int64_t(c.vocab_size) * c.hidden_size)) *
                       4.0;
  const double bw = measure_read_bandwidth(int64_t(1) << 30, 3).read_gbs;
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
      "\nweights read per token: %.1f MB (fp32); memory read bandwidth: %.1f GB/s; bound: %.0f "
      "tokens/s; plain decode reaches %.0f%% of it\n",
      bytes / 1e6, bw, bound, 100.0 * median(plain.decode) / bound);
  return 0;
}

}  // namespace strata::cli
