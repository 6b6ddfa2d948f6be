// `strata data prepare`: text or JSONL files -> token shards + meta.json.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "data/shards.h"

namespace strata::cli {
namespace {

// A non-negative 64-bit integer option.
uint64_t get_u64(const Args& args, const std::string& name, const std::string& command) {
  const std::string v = args.get(name);
  size_t used = 0;
  unsigned long long x = 0;
  try {
    if (!v.empty() && v[0] != '-') x = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STRATA_CHECK(!v.empty() && used == v.size(), command, ": --", name,
               " expects a non-negative integer, got '", v, "'");
  return uint64_t(x);
}

int data_prepare(int argc, char** argv, int first) {
  const std::string cmd = "strata data prepare";
  Args args(cmd,
            "Tokenises plain-text or JSONL files (*.jsonl: one JSON object per line) into token "
            "shards in DIR, split into train and val by a seeded hash of each document's index, "
            "and writes DIR/meta.json last (tokenizer sha256, vocab size, shard lists, sources).");
  args.option("tokenizer", "FILE", "sentencepiece .model or Hugging Face tokenizer.json")
      .repeated("input", "FILE", "text or .jsonl file")
      .option("out", "DIR", "output dataset directory")
      .option("doc-split", "MODE",
              "documents of a text file: paragraph (blank lines), line, or file", "paragraph")
      .option("jsonl-field", "NAME", "JSONL field holding the text", "text")
      .option("val-fraction", "F", "share of documents held out for validation", "0.01")
      .option("seed", "S", "seed of the train/val assignment", "1234")
      .flag("no-bos", "do not start documents with BOS")
      .flag("eos", "end documents with EOS")
      .option("shard-tokens", "N", "tokens per shard before a new one starts", "67108864")
      .option("threads", "N", "OpenMP threads for tokenising (0: OMP_NUM_THREADS or all cores)",
              "0");
  if (!args.parse(argc, argv, first)) return 0;
  apply_threads(args.get_int("threads"));
  PrepareOptions o;
  STRATA_USAGE_CHECK(args.has("tokenizer"), cmd, ": --tokenizer FILE is required");
  STRATA_USAGE_CHECK(args.has("out"), cmd, ": --out DIR is required");
  o.tokenizer = args.get("tokenizer");
  o.inputs = args.get_all("input");
  STRATA_CHECK(!o.inputs.empty(), cmd, ": give at least one --input FILE");
  o.out_dir = args.get("out");
  check_output_dir(o.out_dir, cmd + ": --out");
  std::vector<std::string> inputs = o.inputs;
  inputs.push_back(o.tokenizer);
  check_output_not_input(o.out_dir, inputs, cmd + ": --out");
  o.doc_split = args.get("doc-split");
  STRATA_CHECK(o.doc_split == "paragraph" || o.doc_split == "line" || o.doc_split == "file", cmd,
               ": unknown --doc-split '", o.doc_split, "' (choose paragraph, line or file)");
  o.jsonl_field = args.get("jsonl-field");
  o.val_fraction = args.get_double("val-fraction");
  STRATA_CHECK(o.val_fraction >= 0 && o.val_fraction <= 1, cmd, ": --val-fraction ", o.val_fraction,
               " must be in [0, 1]");
  o.seed = get_u64(args, "seed", cmd);
  o.add_bos = !args.has("no-bos");
  o.add_eos = args.has("eos");
  o.shard_tokens = int64_t(get_u64(args, "shard-tokens", cmd));
  STRATA_CHECK(o.shard_tokens > 0, cmd, ": --shard-tokens must be positive");
  const DatasetMeta meta = prepare_dataset(o);
  std::printf(
      "%s: train %lld tokens (%lld documents, %zu shards), val %lld tokens (%lld "
      "documents, %zu shards)\n",
      o.out_dir.c_str(), (long long)meta.train.tokens, (long long)meta.train.documents,
      meta.train.shards.size(), (long long)meta.val.tokens, (long long)meta.val.documents,
      meta.val.shards.size());
  return 0;
}

}  // namespace

int cmd_data(int argc, char** argv, int first) {
  const std::string usage =
      "usage: strata data prepare [options]\n\n"
      "  prepare   tokenise text or JSONL files into token shards (train/val) with meta.json\n\n"
      "see strata data prepare --help\n";
  STRATA_CHECK(first < argc, "strata data: which action? (prepare; see strata data --help)");
  const std::string sub = argv[first];
  if (sub == "--help" || sub == "-h") {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  STRATA_CHECK(sub == "prepare", "strata data: unknown action '", sub, "' (choose prepare)");
  return data_prepare(argc, argv, first + 1);
}

}  // namespace strata::cli
