// `strata tokenizer train|encode|decode`: training sentencepiece tokenizers;
// encoding and decoding with a .model or a tokenizer.json.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer.h"

namespace strata::cli {
namespace {

int tokenizer_train(int argc, char** argv, int first) {
  Args args("strata tokenizer train",
            "Trains a sentencepiece tokenizer (UNK=0, BOS=1, EOS=2, no PAD; identity "
            "normalization, digits split) on text files read one sentence per line, and writes "
            "the .model (and a .vocab next to it) atomically. Training is reproducible for a "
            "given thread count.");
  args.repeated("input", "FILE", "training text file")
      .option("vocab-size", "N", "vocabulary size, including the special and byte pieces")
      .option("out", "FILE", "output model path, e.g. tok.model")
      .option("model-type", "TYPE", "bpe or unigram", "bpe")
      .flag("no-byte-fallback", "map unseen characters to UNK instead of <0xNN> byte pieces")
      .option("character-coverage", "F", "share of characters covered by the vocabulary", "1.0")
      .option("input-sentence-size", "N", "sentences sampled for training (0: all)", "2000000")
      .option("threads", "N", "sentencepiece training threads (1 keeps runs identical)", "1");
  if (!args.parse(argc, argv, first)) return 0;
  TokenizerTrainOptions o;
  o.inputs = args.get_all("input");
  STRATA_CHECK(!o.inputs.empty(), "strata tokenizer train: give at least one --input FILE");
  STRATA_USAGE_CHECK(args.has("vocab-size"), "strata tokenizer train: --vocab-size N is required");
  STRATA_USAGE_CHECK(args.has("out"), "strata tokenizer train: --out FILE is required");
  o.out = args.get("out");
  check_output_file(o.out, "strata tokenizer train: --out", true);
  check_output_not_input(o.out, o.inputs, "strata tokenizer train: --out");
  o.vocab_size = args.get_int("vocab-size");
  o.model_type = args.get("model-type");
  o.byte_fallback = !args.has("no-byte-fallback");
  o.character_coverage = args.get_double("character-coverage");
  o.input_sentence_size = args.get_int("input-sentence-size");
  o.num_threads = args.get_int("threads");
  STRATA_CHECK(o.vocab_size > 0, "strata tokenizer train: --vocab-size must be positive");
  STRATA_CHECK(o.num_threads >= 1, "strata tokenizer train: --threads must be at least 1");
  const Tokenizer tok = train_tokenizer(o);
  std::printf("%s: vocab %d, sha256 %s\n", o.out.c_str(), tok.vocab_size(), tok.sha256().c_str());
  return 0;
}

int tokenizer_encode(int argc, char** argv, int first) {
  Args args("strata tokenizer encode",
            "Prints the token ids of TEXT (no BOS/EOS added), space-separated.");
  args.option("tokenizer", "FILE", "sentencepiece .model or Hugging Face tokenizer.json")
      .option("text", "TEXT", "text to encode")
      .flag("pieces", "print the pieces instead of the ids");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("tokenizer"),
                     "strata tokenizer encode: --tokenizer FILE is required");
  STRATA_USAGE_CHECK(args.has("text"), "strata tokenizer encode: --text TEXT is required");
  const Tokenizer tok = Tokenizer::load(args.get("tokenizer"));
  std::string line;
  for (const int32_t id : tok.encode(args.get("text"))) {
    if (!line.empty()) line += ' ';
    line += args.has("pieces") ? tok.id_to_piece(id) : std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int tokenizer_decode(int argc, char** argv, int first) {
  Args args("strata tokenizer decode",
            "Prints the text of a list of token ids (separated by spaces or commas).");
  args.option("tokenizer", "FILE", "sentencepiece .model or Hugging Face tokenizer.json")
      .option("ids", "IDS", "token ids, e.g. \"403 407 261 378\"");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("tokenizer"),
                     "strata tokenizer decode: --tokenizer FILE is required");
  STRATA_USAGE_CHECK(args.has("ids"), "strata tokenizer decode: --ids IDS is required");
  const std::string text = args.get("ids");
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\t' &&
           text[j] != '\n')
      ++j;
    const std::string word = text.substr(i, j - i);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used == word.size() && v >= 0 && v <= INT32_MAX,
                 "strata tokenizer decode: --ids: '", word, "' is not a token id");
    ids.push_back(int32_t(v));
    i = j;
  }
  const Tokenizer tok = Tokenizer::load(args.get("tokenizer"));
  std::printf("%s\n", tok.decode(ids).c_str());
  return 0;
}

}  // namespace

int cmd_tokenizer(int argc, char** argv, int first) {
  const std::string usage =
      "usage: strata tokenizer <train|encode|decode> [options]\n\n"
      "  train    train a sentencepiece tokenizer on text files\n"
      "  encode   print the token ids of a text\n"
      "  decode   print the text of token ids\n\n"
      "see strata tokenizer <train|encode|decode> --help\n";
  STRATA_CHECK(first < argc,
               "strata tokenizer: which action? (train, encode or decode; see strata tokenizer "
               "--help)");
  const std::string sub = argv[first];
  if (sub == "--help" || sub == "-h") {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (sub == "train") return tokenizer_train(argc, argv, first + 1);
  if (sub == "encode") return tokenizer_encode(argc, argv, first + 1);
  if (sub == "decode") return tokenizer_decode(argc, argv, first + 1);
  fail(cat("strata tokenizer: unknown action '", sub, "' (choose train, encode or decode)"));
}

}  // namespace strata::cli
