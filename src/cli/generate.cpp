// `strata generate --checkpoint C --prompt TEXT [--max-new-tokens N] [--temperature T] ...`
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "data/chat.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/text_generation.h"

#include <nlohmann/json.hpp>

namespace strata::cli {

namespace {

Args generate_args() {
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
      .option("tokenizer", "FILE",
              "sentencepiece .model or tokenizer.json (default: the checkpoint's)")
      .flag("chat",
            "the prompt is a user message: render it in a chat template (strata's own, as SFT "
            "trains, or --chat-template) and print only the answer")
      .option("system", "TEXT", "with --chat: a system message before the user's", "")
      .option("chat-template", "PATH",
              "with --chat: a model's Hugging Face chat template (its directory, its "
              "tokenizer_config.json or a .jinja file) instead of strata's own",
              "");
  add_threads_option(args)
      .flag("no-bos", "do not start the sequence with BOS")
      .flag("ignore-eos", "keep generating after the end-of-sequence token")
      .flag("self-speculative",
            "draft with the first --exit-layer layers, verify with the rest (greedy: the same "
            "text as plain decoding; sampling: the same distribution)")
      .flag("no-cache", "recompute the whole sequence for every token (reference path)")
      .flag("bf16",
            "bf16 matmuls (operands rounded to bf16, fp32 sums): decoding reads bf16 copies of "
            "the weights, half the bytes of fp32, at the cost of half again the weights' memory")
      .option("kv-cache", "DTYPE",
              "the KV cache's storage: fp32, or bf16 (half the memory and the bytes attention "
              "reads; keys and values rounded to bf16)",
              "fp32")
      .flag("no-graphs",
            "on cuda (and simt): decode every step with a launch per kernel instead of "
            "replaying it as one recorded graph (the same tokens; for profiling and debugging)")
      .flag("json", "print the text and timings as one JSON object instead");
  return args;
}

GenerateOptions options_from(const Args& args, const Tokenizer& tok) {
  GenerateOptions g;
  g.max_new_tokens = args.get_int("max-new-tokens");
  g.sampling.temperature = args.get_double("temperature");
  g.sampling.top_k = args.get_int("top-k");
  g.sampling.top_p = args.get_double("top-p");
  g.sampling.seed = uint64_t(args.get_int("seed"));
  g.eos_id = args.has("ignore-eos") ? -1 : tok.eos_id();
  if (!args.has("ignore-eos")) g.more_eos = tok.end_of_turn_ids();
  g.exit_layer = args.get_int("exit-layer");
  g.graphs = !args.has("no-graphs");
  g.kv_cache = kv_cache_option(args, "strata generate");
  if (args.has("self-speculative")) {
    STRATA_CHECK(g.exit_layer > 0, "strata generate: --self-speculative needs --exit-layer E");
    g.speculations = args.get_int("speculations");
    STRATA_CHECK(g.speculations >= 1, "strata generate: --speculations must be >= 1");
  }
  return g;
}

// Options are checked before the model loads (and before any output).
void check_options(const Args& args) {
  kv_cache_option(args, "strata generate");
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
  const bool chat = args.has("chat");
  STRATA_USAGE_CHECK(chat || (args.get("system").empty() && args.get("chat-template").empty()),
                     "strata generate: --system and --chat-template need --chat");
  STRATA_USAGE_CHECK(!chat || !args.has("no-bos"),
                     "strata generate: --no-bos does not apply with --chat (the chat template "
                     "decides where BOS goes)");
}

// The prompts of --prompts: its non-blank lines (one KV cache each).
int prompt_count(const std::string& path) {
  int prompts = 0;
  std::istringstream lines(read_file(path, "prompts"));
  for (std::string line; std::getline(lines, line);)
    prompts += line.find_first_not_of(" \t\r") != std::string::npos;
  return std::max(prompts, 1);
}

MemoryPlan generate_memory(const Args& args) {
  MemoryPlan memory;
  if (!args.get("prompts").empty())
    memory.hint = "give fewer prompts per run (--prompts) or split the model with --tp";
  memory.use = [&args](const CheckpointInfo& info) {
    MemoryUse u;
    const int ctx = info.config.max_position_embeddings;
    u.bf16_weight_copies = args.has("bf16");  // generation's frozen weights: 2 bytes a parameter
    if (args.has("no-cache")) {               // the whole model over the whole sequence, per token
      u.batch = 1, u.seq = ctx, u.logits_rows = ctx;
      return u;
    }
    const int prompts = args.get("prompts").empty() ? 1 : prompt_count(args.get("prompts"));
    u.kv_batch = prompts, u.kv_len = ctx, u.logits_rows = prompts;
    u.kv_bf16 = kv_cache_option(args, "strata generate") == ops::Dtype::BF16;
    return u;
  };
  return memory;
}

// --tokenizer, or the checkpoint's; it must fit the model (and be the
// checkpoint's own when both exist).
Tokenizer load_tokenizer(const Args& args, const LoadedModel& lm) {
  const CheckpointInfo& info = lm.info;
  STRATA_CHECK(args.has("tokenizer") || !info.tokenizer.empty(), args.get("checkpoint"),
               ": has no tokenizer; pass --tokenizer");
  Tokenizer tok = args.has("tokenizer")
                      ? Tokenizer::load(args.get("tokenizer"))
                      : Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint"));
  const int V = lm.model->config().vocab_size;
  STRATA_CHECK(
      tok.vocab_size() <= V,
      "strata generate: ", args.has("tokenizer") ? args.get("tokenizer") : args.get("checkpoint"),
      ": the tokenizer has ", tok.vocab_size(), " pieces but the model's vocabulary is ", V);
  if (args.has("tokenizer") && !info.tokenizer.empty())
    STRATA_CHECK(
        Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint")).sha256() == tok.sha256(),
        "strata generate: --tokenizer ", args.get("tokenizer"), " is not the tokenizer stored in ",
        args.get("checkpoint"), " (drop --tokenizer to use the stored one)");
  return tok;
}

using PromptEncoder = std::function<std::vector<int32_t>(const std::string&)>;

// A prompt's ids: BOS (unless --no-bos), then the text; with --chat, the
// text as a user message (after --system's) in the chat template, the
// assistant's turn opened.
PromptEncoder prompt_encoder(const Args& args, const Tokenizer& tok) {
  if (!args.has("chat"))
    return [&args, &tok](const std::string& text) {
      std::vector<int32_t> ids;
      if (!args.has("no-bos") && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
      const auto enc = tok.encode(text);
      ids.insert(ids.end(), enc.begin(), enc.end());
      return ids;
    };
  auto tmpl = std::make_shared<ChatTemplate>();
  if (!args.get("chat-template").empty())
    *tmpl = load_chat_template(args.get("chat-template"), tok);
  return [tmpl, &tok, system = args.get("system")](const std::string& text) {
    ChatMessages messages;
    if (!system.empty()) messages.emplace_back("system", system);
    messages.emplace_back("user", text);
    return encode_chat_prompt(*tmpl, tok, messages);
  };
}

Detokenizer detokenizer(const Tokenizer& tok) {
  return [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); };
}

// --prompts FILE.jsonl: every prompt in one batch; one result per prompt
// (text blocks, or JSON lines with --json), a summary on stderr.
int generate_prompts_file(const Args& args, Model<float>& model, const Tokenizer& tok,
                          const PromptEncoder& encode, bool root) {
  STRATA_CHECK(args.get("prompt").empty(), "strata generate: give --prompt or --prompts, not both");
  STRATA_CHECK(!args.has("no-cache"), "strata generate: --no-cache takes a single --prompt");
  const PromptFile file =
      read_prompt_file(args.get("prompts"), [&](const std::string& text, const std::string& where) {
        std::vector<int32_t> ids = encode(text);
        STRATA_CHECK(!ids.empty(), where, ": empty prompt (and --no-bos)");
        return ids;
      });
  const GenerateOptions g = options_from(args, tok);
  const GeneratedBatch b = generate_texts(model, file.ids, g, detokenizer(tok), args.get("stop"));
  for (size_t i = 0; i < b.texts.size(); ++i) {
    const std::string& prompt = file.texts[i];
    if (args.has("json"))
      std::printf(
          "%s\n",
          nlohmann::json{{"prompt", prompt}, {"text", b.texts[i]}, {"new_tokens", b.new_tokens[i]}}
              .dump()
              .c_str());
    else
      std::printf("%s%s\n%s", args.has("chat") ? "" : prompt.c_str(), b.texts[i].c_str(),
                  i + 1 < b.texts.size() ? "---\n" : "");
  }
  std::fflush(stdout);
  if (root) std::fputs(batch_summary(b, b.texts.size()).c_str(), stderr);
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv, int first) {
  Args args = generate_args();
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("checkpoint"), "strata generate: --checkpoint is required");
  apply_threads(args.get_int("threads"));
  check_options(args);
  LoadedModel lm = load_model_from_args(args, "strata generate", false, 0, generate_memory(args));
  Model<float>& model = *lm.model;
  if (args.has("bf16")) model.backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const Tokenizer tok = load_tokenizer(args, lm);
  if (args.get_int("exit-layer") > 0)
    lm.info.plan.check_exit(args.get_int("exit-layer"), "strata generate: --exit-layer");
  const PromptEncoder encode = prompt_encoder(args, tok);
  if (!args.get("prompts").empty())
    return generate_prompts_file(args, model, tok, encode, lm.root());
  const std::vector<int32_t> ids = encode(args.get("prompt"));
  const GenerateOptions g = options_from(args, tok);
  const bool json = args.has("json");
  STRATA_CHECK(!args.has("no-cache") || (g.exit_layer == 0 && g.speculations == 0),
               "strata generate: --no-cache runs the whole model (no --exit-layer)");
  if (!json && !args.has("chat")) {
    std::fputs(args.get("prompt").c_str(), stdout);
    std::fflush(stdout);
  }
  const GeneratedText r = generate_text(model, ids, g, detokenizer(tok), args.get("stop"),
                                        args.has("no-cache"), [&](const std::string& piece) {
                                          if (json) return;
                                          std::fwrite(piece.data(), 1, piece.size(), stdout);
                                          std::fflush(stdout);
                                        });
  if (json) {
    std::printf("%s\n", generation_json(args.get("prompt"), r, g).dump().c_str());
    return 0;
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);  // before the summary on stderr, so the two never interleave
  if (lm.root()) std::fputs(generation_summary(r, g).c_str(), stderr);
  return 0;
}

}  // namespace strata::cli
