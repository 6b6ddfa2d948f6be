// `strata generate --checkpoint C --prompt TEXT [--max-new-tokens N] [--temperature T] ...`
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "io/model_io.h"

#include <nlohmann/json.hpp>

namespace strata::cli {

namespace {

// The text of the new tokens `toks` as it reads after `prompt` (whose text is
// prompt_text): decoded together with the prompt (a word's leading space
// belongs to its token, and a decoder drops it at the start of a text), minus
// the prompt's text.
std::string text_after(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                       const std::string& base, const std::vector<int32_t>& toks) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), toks.begin(), toks.end());
  const std::string full = tok.decode(all);
  return full.compare(0, base.size(), base) == 0 ? full.substr(base.size()) : tok.decode(toks);
}

GenerateOptions options_from(const Args& args, const Tokenizer& tok) {
  GenerateOptions g;
  g.max_new_tokens = args.get_int("max-new-tokens");
  g.sampling.temperature = args.get_double("temperature");
  g.sampling.top_k = args.get_int("top-k");
  g.sampling.top_p = args.get_double("top-p");
  g.sampling.seed = uint64_t(args.get_int("seed"));
  g.eos_id = args.has("ignore-eos") ? -1 : tok.eos_id();
  g.exit_layer = args.get_int("exit-layer");
  if (args.has("self-speculative")) {
    STRATA_CHECK(g.exit_layer > 0, "strata generate: --self-speculative needs --exit-layer E");
    g.speculations = args.get_int("speculations");
    STRATA_CHECK(g.speculations >= 1, "strata generate: --speculations must be >= 1");
  }
  return g;
}

// --prompts FILE.jsonl: every prompt in one batch; one result per prompt
// (text blocks, or JSON lines with --json), a summary on stderr.
int generate_prompts_file(const Args& args, Model<float>& model, const Tokenizer& tok, bool root) {
  const std::string path = args.get("prompts");
  STRATA_CHECK(args.get("prompt").empty(), "strata generate: give --prompt or --prompts, not both");
  STRATA_CHECK(!args.has("no-cache"), "strata generate: --no-cache takes a single --prompt");
  const std::string body = read_file(path, "prompts");
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> prompts;
  size_t at = 0;
  int line_no = 0;
  while (at < body.size()) {
    const size_t nl = body.find('\n', at);
    const std::string line = body.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? body.size() : nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      fail(cat(path, ":", line_no, ": not valid JSON"));
    }
    STRATA_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), path, ":",
                 line_no, ": expected an object with a string \"prompt\"");
    texts.push_back(j["prompt"].get<std::string>());
    std::vector<int32_t> ids;
    if (!args.has("no-bos") && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    const auto enc = tok.encode(texts.back());
    ids.insert(ids.end(), enc.begin(), enc.end());
    STRATA_CHECK(!ids.empty(), path, ":", line_no, ": empty prompt (and --no-bos)");
    prompts.push_back(std::move(ids));
  }
  STRATA_CHECK(!prompts.empty(), path, ": no prompts");
  const GenerateOptions g = options_from(args, tok);
  GenerateStats st;
  Timer timer;
  const auto outs = generate_batch(model, prompts, g, {}, &st);
  const double total = timer.seconds();
  const std::string stop = args.get("stop");
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<int32_t> toks = outs[i];
    if (!toks.empty() && toks.back() == tok.eos_id() && !args.has("ignore-eos")) toks.pop_back();
    std::string text = text_after(tok, prompts[i], tok.decode(prompts[i]), toks);
    if (!stop.empty() && text.find(stop) != std::string::npos) text.resize(text.find(stop));
    if (args.has("json")) {
      std::printf(
          "%s\n",
          nlohmann::json{{"prompt", texts[i]}, {"text", text}, {"new_tokens", outs[i].size()}}
              .dump()
              .c_str());
    } else {
      std::printf("%s%s\n%s", texts[i].c_str(), text.c_str(), i + 1 < outs.size() ? "---\n" : "");
    }
  }
  std::fflush(stdout);
  if (root)
    std::fprintf(
        stderr,
        "generated %d tokens for %zu prompts in %.2f s: prefill %d tokens at %.0f tokens/s, "
        "decode %.1f tokens/s\n",
        st.new_tokens, outs.size(), total, st.prompt_tokens,
        st.prefill_s > 0 ? st.prompt_tokens / st.prefill_s : 0.0,
        st.decode_s > 0 ? st.new_tokens / st.decode_s : 0.0);
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv, int first) {
  Args args(
      "strata generate",
      "Continues a prompt with a trained model. Temperature 0 is greedy decoding. The text is "
      "streamed to stdout; a summary (tokens, tokens/s) goes to stderr.");
  add_model_options(args);
  args.option("prompt", "TEXT", "text to continue", "")
      .option("prompts", "FILE",
              "JSONL file, one {\"prompt\": TEXT} per line: generated as one batch", "")
      .option("max-new-tokens", "N", "tokens to generate", "64")
      .option("temperature", "T", "sampling temperature (0: greedy)", "0")
      .option("top-k", "K", "sample from the K most likely tokens (0: all)", "0")
      .option("top-p", "P", "sample from the smallest set with probability >= P", "1")
      .option("seed", "S", "sampling seed", "0")
      .option("exit-layer", "E", "early exit: run only the first E layers, then the head (0: all)",
              "0")
      .option("speculations", "D", "self-speculative decoding: tokens drafted per round", "4")
      .option("stop", "STR", "stop once the text contains STR (not printed)", "")
      .option("tokenizer", "FILE", "sentencepiece model (default: the checkpoint's)")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0")
      .flag("no-bos", "do not start the sequence with BOS")
      .flag("ignore-eos", "keep generating after the end-of-sequence token")
      .flag("self-speculative",
            "draft with the first --exit-layer layers, verify with the rest (greedy: the same "
            "text as plain decoding; sampling: the same distribution)")
      .flag("no-cache", "recompute the whole sequence for every token (reference path)")
      .flag("bf16",
            "bf16 matmuls (operands rounded to bf16, fp32 sums): decoding reads bf16 copies of "
            "the weights, half the bytes of fp32, at the cost of half again the weights' memory")
      .flag("json", "print the text and timings as one JSON object instead");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("checkpoint"), "strata generate: --checkpoint is required");
  apply_threads(args.get_int("threads"));
  // Options are checked before the model loads (and before any output).
  STRATA_CHECK(args.get_int("max-new-tokens") >= 0,
               "strata generate: --max-new-tokens must be >= 0");
  const double temperature = args.get_double("temperature"), top_p = args.get_double("top-p");
  STRATA_CHECK(std::isfinite(temperature) && temperature >= 0,
               "strata generate: --temperature must be finite and >= 0 (0: greedy), got ",
               args.get("temperature"));
  STRATA_CHECK(top_p > 0 && top_p <= 1, "strata generate: --top-p must be in (0, 1], got ",
               args.get("top-p"));
  STRATA_CHECK(args.get_int("top-k") >= 0, "strata generate: --top-k must be >= 0 (0: all), got ",
               args.get_int("top-k"));
  STRATA_CHECK(args.get_int("exit-layer") >= 0,
               "strata generate: --exit-layer must be >= 0 (0: every layer), got ",
               args.get_int("exit-layer"));

  MemoryPlan memory;
  if (!args.get("prompts").empty())
    memory.hint = "give fewer prompts per run (--prompts) or split the model with --tp";
  memory.use = [&](const CheckpointInfo& info) {
    MemoryUse u;
    const int ctx = info.config.max_position_embeddings;
    if (args.has("no-cache")) {  // the whole model over the whole sequence, per token
      u.batch = 1, u.seq = ctx, u.logits_rows = ctx;
      return u;
    }
    int prompts = 1;
    if (!args.get("prompts").empty()) {  // one cache per prompt (the file's non-blank lines)
      prompts = 0;
      std::istringstream lines(read_file(args.get("prompts"), "prompts"));
      for (std::string line; std::getline(lines, line);)
        prompts += line.find_first_not_of(" \t\r") != std::string::npos;
      prompts = std::max(prompts, 1);
    }
    u.kv_batch = prompts, u.kv_len = ctx, u.logits_rows = prompts;
    if (args.has("bf16")) {  // the decode weights' bf16 copies: 2 bytes per parameter
      u.other_bytes = info.config.num_parameters() * 2;
      u.other_name = "bf16 weight copies";
    }
    return u;
  };
  LoadedModel lm = load_model_from_args(args, "strata generate", false, 0, memory);
  Model<float>* model = lm.model.get();
  if (args.has("bf16")) model->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const CheckpointInfo& info = lm.info;
  STRATA_CHECK(args.has("tokenizer") || !info.tokenizer.empty(), args.get("checkpoint"),
               ": has no tokenizer; pass --tokenizer");
  const Tokenizer tok = args.has("tokenizer")
                            ? Tokenizer::load(args.get("tokenizer"))
                            : Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint"));
  STRATA_CHECK(tok.vocab_size() <= model->config().vocab_size, "strata generate: ",
               args.has("tokenizer") ? args.get("tokenizer") : args.get("checkpoint"),
               ": the tokenizer has ", tok.vocab_size(), " pieces but the model's vocabulary is ",
               model->config().vocab_size);
  if (args.has("tokenizer") && !info.tokenizer.empty())
    STRATA_CHECK(
        Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint")).sha256() == tok.sha256(),
        "strata generate: --tokenizer ", args.get("tokenizer"), " is not the tokenizer stored in ",
        args.get("checkpoint"), " (drop --tokenizer to use the stored one)");
  if (args.get_int("exit-layer") > 0)
    info.plan.check_exit(args.get_int("exit-layer"), "strata generate: --exit-layer");
  if (!args.get("prompts").empty()) return generate_prompts_file(args, *model, tok, lm.root());
  std::vector<int32_t> ids;
  if (!args.has("no-bos") && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto enc = tok.encode(args.get("prompt"));
  ids.insert(ids.end(), enc.begin(), enc.end());

  GenerateOptions g = options_from(args, tok);
  const bool json = args.has("json");
  const std::string stop = args.get("stop");
  STRATA_CHECK(!args.has("no-cache") || (g.exit_layer == 0 && g.speculations == 0),
               "strata generate: --no-cache runs the whole model (no --exit-layer)");

  if (!json) {
    std::fputs(args.get("prompt").c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<int32_t> out;
  std::string shown;
  bool stopped = false;
  const std::string prompt_text = tok.decode(ids);
  auto continuation = [&](const std::vector<int32_t>& toks) {
    return text_after(tok, ids, prompt_text, toks);
  };
  // Streams the text; with --stop, holds back what could be the start of the
  // stop string and ends generation when it appears.
  auto on_token = [&](int32_t t) {
    if (stopped || (t == tok.eos_id() && !args.has("ignore-eos"))) return;
    out.push_back(t);
    // Decode the whole continuation and print what is new, so multi-byte
    // characters split over byte-fallback tokens come out whole.
    std::string text = continuation(out);
    size_t limit = text.size();
    if (!stop.empty()) {
      const size_t at = text.find(stop);
      if (at != std::string::npos) {
        limit = at;
        stopped = true;
      } else {
        limit = text.size() >= stop.size() - 1 ? text.size() - (stop.size() - 1) : 0;
      }
    }
    if (limit > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      if (!json) {
        std::fwrite(text.data() + shown.size(), 1, limit - shown.size(), stdout);
        std::fflush(stdout);
      }
      shown = text.substr(0, limit);
    }
  };
  g.stop_requested = [&] { return stopped; };
  GenerateStats st;
  Timer timer;
  if (args.has("no-cache")) {
    generate_simple(*model, ids, g, on_token);
    st.prompt_tokens = int(ids.size());
    st.new_tokens = int(out.size());
    st.decode_s = timer.seconds();
  } else {
    generate(*model, ids, g, on_token, &st);
  }
  if (!stopped && !stop.empty() && shown.size() < continuation(out).size()) {
    // The end of the text held back for a stop string that never came.
    const std::string text = continuation(out);
    if (!json) std::fputs(text.c_str() + shown.size(), stdout);
    shown = text;
  }
  const double total = timer.seconds();
  const double decode_tps = st.decode_s > 0 ? double(st.new_tokens) / st.decode_s : 0.0;
  const double prefill_tps = st.prefill_s > 0 ? double(st.prompt_tokens) / st.prefill_s : 0.0;
  if (json) {
    nlohmann::json j = {{"prompt", args.get("prompt")},        {"text", shown},
                        {"prompt_tokens", st.prompt_tokens},   {"new_tokens", st.new_tokens},
                        {"prefill_s", st.prefill_s},           {"decode_s", st.decode_s},
                        {"prefill_tokens_per_s", prefill_tps}, {"decode_tokens_per_s", decode_tps},
                        {"exit_layer", g.exit_layer},          {"hit_context", st.hit_context}};
    if (g.speculations) {
      j["speculations"] = g.speculations;
      j["acceptance_rate"] = st.acceptance();
      j["tokens_per_full_pass"] = st.tokens_per_round();
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);  // before the summary on stderr, so the two never interleave
  if (!lm.root()) return 0;
  std::fprintf(stderr,
               "generated %d tokens in %.2f s: prefill %d tokens at %.0f tokens/s, decode "
               "%.1f tokens/s%s\n",
               st.new_tokens, total, st.prompt_tokens, prefill_tps, decode_tps,
               st.hit_context ? " (stopped at the model's context length)" : "");
  if (g.speculations)
    std::fprintf(stderr,
                 "self-speculative: exit layer %d, %d drafts per round: acceptance %.1f%%, "
                 "%.2f tokens per full-model pass\n",
                 g.exit_layer, g.speculations, 100 * st.acceptance(), st.tokens_per_round());
  return 0;
}

}  // namespace strata::cli
