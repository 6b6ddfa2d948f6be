// `strata generate --checkpoint C --prompt TEXT [--max-new-tokens N] [--temperature T] ...`
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "io/model_io.h"

namespace strata::cli {

int cmd_generate(int argc, char** argv, int first) {
  Args args(
      "strata generate",
      "Continues a prompt with a trained model. Temperature 0 is greedy decoding. The text is "
      "streamed to stdout; a summary (tokens, tokens/s) goes to stderr.");
  args.option("checkpoint", "FILE", "checkpoint (.h5) to load")
      .option("prompt", "TEXT", "text to continue", "")
      .option("max-new-tokens", "N", "tokens to generate", "64")
      .option("temperature", "T", "sampling temperature (0: greedy)", "0")
      .option("top-k", "K", "sample from the K most likely tokens (0: all)", "0")
      .option("top-p", "P", "sample from the smallest set with probability >= P", "1")
      .option("seed", "S", "sampling seed", "0")
      .option("tokenizer", "FILE", "sentencepiece model (default: the checkpoint's)")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0")
      .flag("no-bos", "do not start the sequence with BOS")
      .flag("ignore-eos", "keep generating after the end-of-sequence token");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_CHECK(args.has("checkpoint"), "strata generate: --checkpoint is required");
  apply_threads(args.get_int("threads"));
  const int max_new = args.get_int("max-new-tokens");
  STRATA_CHECK(max_new >= 0, "strata generate: --max-new-tokens must be >= 0");

  CheckpointInfo info;
  auto model = load_model(args.get("checkpoint"), &info);
  STRATA_CHECK(args.has("tokenizer") || !info.tokenizer.empty(), args.get("checkpoint"),
               ": has no tokenizer; pass --tokenizer");
  const Tokenizer tok = args.has("tokenizer")
                            ? Tokenizer::load(args.get("tokenizer"))
                            : Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint"));
  std::vector<int32_t> ids;
  if (!args.has("no-bos") && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto enc = tok.encode(args.get("prompt"));
  ids.insert(ids.end(), enc.begin(), enc.end());

  GenerateOptions g;
  g.max_new_tokens = max_new;
  g.sampling.temperature = args.get_double("temperature");
  g.sampling.top_k = args.get_int("top-k");
  g.sampling.top_p = args.get_double("top-p");
  g.sampling.seed = uint64_t(args.get_int("seed"));
  g.eos_id = args.has("ignore-eos") ? -1 : tok.eos_id();

  std::fputs(args.get("prompt").c_str(), stdout);
  std::fflush(stdout);
  std::vector<int32_t> out;
  std::string shown;
  Timer timer;
  generate_simple(*model, ids, g, [&](int32_t t) {
    if (t == tok.eos_id() && !args.has("ignore-eos")) return;
    out.push_back(t);
    // Decode the whole continuation and print what is new, so multi-byte
    // characters split over byte-fallback tokens come out whole.
    const std::string text = tok.decode(out);
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::fputs(text.c_str() + shown.size(), stdout);
      std::fflush(stdout);
      shown = text;
    }
  });
  const double s = timer.seconds();
  std::fputs("\n", stdout);
  std::fflush(stdout);  // before the summary on stderr, so the two never interleave
  std::fprintf(stderr, "generated %zu tokens in %.2f s (%.1f tokens/s)\n", out.size(), s,
               s > 0 ? double(out.size()) / s : 0.0);
  return 0;
}

}  // namespace strata::cli
