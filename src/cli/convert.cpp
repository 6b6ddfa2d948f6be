// `strata convert hf|llama2c ...` and `strata export hf ...`: models in and out.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "data/tokenizer.h"
#include "io/hf.h"
#include "io/llama2c.h"
#include "io/model_io.h"
#include "io/model_surgery.h"
#include "model/memory.h"
#include "ops/backend.h"

namespace strata::cli {
namespace {

// Loads an optional tokenizer and checks it fits the model's vocabulary.
std::string tokenizer_for(const std::string& path, const std::string& fallback_bytes,
                          const LlamaConfig& cfg, const std::string& source) {
  if (path.empty() && fallback_bytes.empty()) {
    log::warn(source,
              ": no tokenizer; the checkpoint will not be able to encode text "
              "(pass --tokenizer tok.model or tokenizer.json)");
    return "";
  }
  const Tokenizer tok =
      path.empty() ? Tokenizer::from_bytes(fallback_bytes, source) : Tokenizer::load(path);
  STRATA_CHECK(tok.vocab_size() <= cfg.vocab_size, tok.name(), ": the tokenizer has ",
               tok.vocab_size(), " pieces but the model's vocabulary is ", cfg.vocab_size);
  return tok.model_bytes();
}

void summary(const std::string& out, const Model<float>& m) {
  const LlamaConfig& c = m.config();
  std::printf("wrote %s: %d layers, hidden %d, heads %d/%d, vocab %d, %.2fM parameters%s\n",
              out.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
              c.num_key_value_heads, c.vocab_size, double(c.num_parameters()) * 1e-6,
              c.tie_word_embeddings ? ", tied head" : "");
}

int convert_hf(int argc, char** argv, int first) {
  Args args("strata convert hf",
            "Converts a Hugging Face Llama directory (config.json, model.safetensors or a "
            "sharded index, F32/F16/BF16, tokenizer.model or tokenizer.json) into a strata "
            "checkpoint.");
  args.positional("dir", "Hugging Face model directory")
      .positional("out.h5", "strata checkpoint to write")
      .option("tokenizer", "FILE",
              "sentencepiece .model or tokenizer.json (default: the directory's "
              "tokenizer.model, else its tokenizer.json)");
  if (!args.parse(argc, argv, first)) return 0;
  check_output_file(args.get("out.h5"), "strata convert hf", true);
  check_output_not_input(args.get("out.h5"), {args.get("dir"), args.get("tokenizer")},
                         "strata convert hf");
  HfImportInfo info;
  auto model = import_hf(args.get("dir"), &info);
  const std::string tok =
      tokenizer_for(args.get("tokenizer"), info.tokenizer, model->config(),
                    info.tokenizer_file.empty() ? args.get("dir") : info.tokenizer_file);
  save_model(args.get("out.h5"), *model, tok,
             {{"step", 0}, {"tokens_seen", 0}, {"source", "hf:" + args.get("dir")}});
  summary(args.get("out.h5"), *model);
  return 0;
}

int convert_llama2c(int argc, char** argv, int first) {
  Args args("strata convert llama2c",
            "Converts a llama2.c model file (legacy version 0 or version 1 \"ak42\", shared or "
            "separate classifier) into a strata checkpoint. q and k are permuted from "
            "llama2.c's interleaved RoPE layout to Hugging Face's rotate-half layout.");
  args.positional("model.bin", "llama2.c checkpoint")
      .positional("out.h5", "strata checkpoint to write")
      .option("tokenizer", "FILE",
              "tokenizer of the same vocabulary: sentencepiece .model (tok512.model ...) or "
              "tokenizer.json");
  if (!args.parse(argc, argv, first)) return 0;
  check_output_file(args.get("out.h5"), "strata convert llama2c", true);
  check_output_not_input(args.get("out.h5"), {args.get("model.bin"), args.get("tokenizer")},
                         "strata convert llama2c");
  const Llama2cModel src = read_llama2c(args.get("model.bin"));
  // The file's tensors are in memory already; the model needs as much again.
  check_memory(estimate_memory(src.config, LayerPlan{}, MemoryUse{}), host_memory_available(), 1,
               cat("strata convert llama2c: ", args.get("model.bin")),
               "use a machine with more memory");
  Model<float> model(src.config, ops::make_backend<float>());
  for (const auto& [name, data] : src.tensors) {
    const int i = model.layout().find(name);
    STRATA_CHECK(i >= 0 && size_t(model.layout()[i].numel) == data.size(), args.get("model.bin"),
                 ": internal error mapping tensor ", name);
    std::copy(data.begin(), data.end(), model.param(i));
  }
  const std::string tok =
      tokenizer_for(args.get("tokenizer"), "", src.config, args.get("model.bin"));
  save_model(args.get("out.h5"), model, tok,
             {{"step", 0},
              {"tokens_seen", 0},
              {"source", cat("llama2c:", args.get("model.bin"), " (version ", src.version, ")")}});
  summary(args.get("out.h5"), model);
  return 0;
}

int convert_plan(int argc, char** argv, int first) {
  Args args("strata convert plan",
            "Writes a checkpoint's weights under another layer plan (e.g. the upper layers as "
            "ladder layers: a Hybrid Ladder model), with its tokenizer, step and recipe; no "
            "optimizer state. The weights are unchanged: only the computation differs. "
            "model.init_from + model.plan in a recipe does the same without a file.");
  args.positional("in.h5", "strata checkpoint")
      .positional("out.h5", "checkpoint to write")
      .checkpoint_option("in.h5")
      .option("plan", "TEXT", "the new layer plan (e.g. \"standard*3,ladder*3\")");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("plan"), "strata convert plan: --plan is required");
  const std::string in = args.get("in.h5"), out = args.get("out.h5");
  const PlanConversion c = strata::convert_plan(in, out, args.get("plan"), "strata convert plan");
  std::printf("wrote %s: plan %s on the weights of %s (plan %s)\n", out.c_str(), c.plan.c_str(),
              in.c_str(), c.saved_plan.c_str());
  return 0;
}

int convert_weights(int argc, char** argv, int first) {
  Args args("strata convert weights",
            "Writes a checkpoint's weights alone: the config, plan, tokenizer, recipe and step, "
            "without the optimizer state (a third of a training checkpoint), in float32 or "
            "rounded to bfloat16 (a sixth). For sharing and shipping models; the result loads "
            "wherever a checkpoint does (eval, generate, export, model.init_from) but cannot "
            "resume training.");
  args.positional("in.h5", "strata checkpoint")
      .positional("out.h5", "checkpoint to write")
      .checkpoint_option("in.h5")
      .option("dtype", "f32|bf16", "how to store the weights (also fp32, float32, bfloat16)",
              "f32");
  if (!args.parse(argc, argv, first)) return 0;
  const std::string in = args.get("in.h5"), out = args.get("out.h5");
  std::string dtype = canonical_dtype(args.get("dtype"));
  STRATA_USAGE_CHECK(dtype == "fp32" || dtype == "bf16", "strata convert weights: --dtype '",
                     args.get("dtype"), "' is not f32 or bf16");
  if (dtype == "fp32") dtype = "f32";  // as the summary line has always said
  const uint64_t bytes = write_weights(in, out, dtype == "bf16", "strata convert weights");
  std::printf("wrote %s: the %s weights of %s (%s)\n", out.c_str(), dtype.c_str(), in.c_str(),
              human_bytes(double(bytes)).c_str());
  return 0;
}

}  // namespace

int cmd_convert(int argc, char** argv, int first) {
  const std::string usage =
      "usage: strata convert <hf|llama2c|plan|weights> ...\n\n"
      "  hf <dir> <out.h5>                  Hugging Face Llama directory -> strata checkpoint\n"
      "  llama2c <model.bin> <out.h5>       llama2.c model file -> strata checkpoint\n"
      "  plan <in.h5> <out.h5> --plan P     the same weights under another layer plan\n"
      "  weights <in.h5> <out.h5> [--dtype bf16]  the weights alone (no optimizer state)\n\n"
      "see strata convert <hf|llama2c|plan|weights> --help; the reverse of hf is strata export "
      "hf\n";
  STRATA_CHECK(
      first < argc,
      "strata convert: which format? (hf, llama2c, plan or weights; see strata convert --help)");
  const std::string sub = argv[first];
  if (sub == "--help" || sub == "-h") {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (sub == "hf") return convert_hf(argc, argv, first + 1);
  if (sub == "llama2c") return convert_llama2c(argc, argv, first + 1);
  if (sub == "plan") return convert_plan(argc, argv, first + 1);
  if (sub == "weights") return convert_weights(argc, argv, first + 1);
  fail(cat("strata convert: unknown format '", sub, "' (hf, llama2c, plan or weights)"));
}

int cmd_export(int argc, char** argv, int first) {
  STRATA_CHECK(first < argc, "strata export: which format? (hf; see strata export hf --help)");
  const std::string sub = argv[first];
  if (sub == "--help" || sub == "-h") {
    std::fputs(
        "usage: strata export hf <ckpt.h5> <dir> [options]\n\n"
        "see strata export hf --help\n",
        stdout);
    return 0;
  }
  STRATA_CHECK(sub == "hf", "strata export: unknown format '", sub, "' (hf)");
  Args args("strata export hf",
            "Writes a strata checkpoint as a Hugging Face Llama directory (config.json, "
            "generation_config.json, model.safetensors or shards, the tokenizer) that "
            "transformers.AutoModelForCausalLM.from_pretrained loads.");
  args.positional("ckpt.h5", "strata checkpoint")
      .checkpoint_option("ckpt.h5")
      .positional("dir", "output directory")
      .option("dtype", "TYPE", "weight dtype: f32, bf16 or f16", "f32")
      .option("max-shard-size", "SIZE", "shard the weights above this size (e.g. 5GB, 200MB)",
              "5GB");
  if (!args.parse(argc, argv, first + 1)) return 0;
  // F32, BF16 or F16 from any spelling (fp32, float32, bfloat16, float16, ...).
  const std::string canonical = canonical_dtype(args.get("dtype"));
  std::string dtype = canonical == "fp32"   ? "F32"
                      : canonical == "bf16" ? "BF16"
                      : canonical == "fp16" ? "F16"
                                            : args.get("dtype");
  HfExportOptions o;
  o.dtype = dtype;
  const int64_t shard =
      parse_bytes(args.get("max-shard-size"), "strata export hf: --max-shard-size");
  STRATA_CHECK(shard > 0, "strata export hf: --max-shard-size must be positive, got '",
               args.get("max-shard-size"), "'");
  o.max_shard_bytes = uint64_t(shard);
  STRATA_CHECK(dtype == "F32" || dtype == "BF16" || dtype == "F16",
               "strata export hf: unknown dtype '", dtype, "' (f32, bf16 or f16)");
  check_output_dir(args.get("dir"), "strata export hf");
  check_output_not_input(args.get("dir"), {args.get("ckpt.h5")}, "strata export hf");
  CheckpointInfo info;
  auto model = load_model(args.get("ckpt.h5"), &info);
  export_hf(*model, info.tokenizer, args.get("dir"), o);
  std::printf(
      "wrote %s (%s weights%s)\n", args.get("dir").c_str(), dtype.c_str(),
      info.tokenizer.empty() ? ", no tokenizer in the checkpoint"
      : Tokenizer::from_bytes(info.tokenizer, args.get("ckpt.h5")).kind() == Tokenizer::Kind::Bpe
          ? ", tokenizer.json"
          : ", tokenizer.model and tokenizer.json");
  return 0;
}

}  // namespace strata::cli
