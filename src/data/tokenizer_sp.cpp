// Sentencepiece tokenizers (the kind behind Tokenizer for a .model), always
// loaded from the serialized model bytes through LoadFromSerializedProto, and
// their training (`strata tokenizer train`).
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/timer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The random seed sentencepiece's trainer uses for sentence sampling and
// shuffling. Fixed, so a training run is reproducible.
constexpr unsigned int kTrainSeed = 20240607u;

}  // namespace

namespace {

class SentencePieceModel final : public TokenizerModel {
 public:
  SentencePieceModel(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string name)
      : sp_(std::move(sp)), name_(std::move(name)) {}

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto status = sp_->Encode(text, &ids);
    STRATA_CHECK(status.ok(), "tokenizer ", name_, ": encode failed (", one_line(status.ToString()),
                 ")");
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    const int V = vocab_size();
    std::vector<int> v(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      STRATA_CHECK(ids[i] >= 0 && ids[i] < V, "tokenizer ", name_, ": token id ", ids[i],
                   " out of range [0, ", V, ")");
      v[i] = ids[i];
    }
    std::string text;
    const auto status = sp_->Decode(v, &text);
    STRATA_CHECK(status.ok(), "tokenizer ", name_, ": decode failed (", one_line(status.ToString()),
                 ")");
    return text;
  }

  std::string id_to_piece(int32_t id) const override {
    STRATA_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", name_, ": token id ", id,
                 " out of range [0, ", vocab_size(), ")");
    return sp_->IdToPiece(id);
  }

  int vocab_size() const override { return sp_->GetPieceSize(); }
  int32_t bos_id() const override { return sp_->bos_id(); }
  int32_t eos_id() const override { return sp_->eos_id(); }
  int32_t unk_id() const override { return sp_->unk_id(); }
  int32_t pad_id() const override { return sp_->pad_id(); }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string name_;
};

}  // namespace

std::shared_ptr<const TokenizerModel> load_sentencepiece(const std::string& model_bytes,
                                                         const std::string& name) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = sp->LoadFromSerializedProto(model_bytes);
  } catch (const std::exception& e) {
    // Sentencepiece reports most bad models in the status, but a piece table
    // it cannot index (an empty piece) throws from its trie builder.
    fail(cat("tokenizer ", name, ": not a sentencepiece model (", one_line(e.what()), ")"));
  }
  STRATA_CHECK(status.ok(), "tokenizer ", name, ": not a sentencepiece model (",
               one_line(status.ToString()), ")");
  STRATA_CHECK(sp->GetPieceSize() > 0, "tokenizer ", name, ": the model has no pieces");
  return std::make_shared<SentencePieceModel>(std::move(sp), name);
}

Tokenizer train_tokenizer(const TokenizerTrainOptions& o) {
  STRATA_CHECK(!o.inputs.empty(), "tokenizer train: no input files");
  STRATA_CHECK(!o.out.empty(), "tokenizer train: no output path");
  STRATA_CHECK(o.model_type == "bpe" || o.model_type == "unigram",
               "tokenizer train: unknown model type '", o.model_type, "' (choose bpe or unigram)");
  STRATA_CHECK(o.vocab_size >= 4, "tokenizer train: vocab size ", o.vocab_size, " is too small");
  STRATA_CHECK(o.character_coverage > 0 && o.character_coverage <= 1,
               "tokenizer train: character coverage ", o.character_coverage, " must be in (0, 1]");
  STRATA_CHECK(o.input_sentence_size >= 0, "tokenizer train: input sentence size must be >= 0");
  STRATA_CHECK(o.num_threads >= 1, "tokenizer train: threads must be >= 1");

  // Sentencepiece reads the inputs itself and reports a missing one with a
  // long multi-line message: check them here so the error names the file.
  std::string input_list;
  uintmax_t input_bytes = 0;
  for (const auto& in : o.inputs) {
    std::error_code ec;
    STRATA_CHECK(fs::exists(in, ec), "tokenizer train: input ", in, ": no such file");
    STRATA_CHECK(!fs::is_directory(in, ec), "tokenizer train: input ", in,
                 ": is a directory, not a file");
    STRATA_CHECK(fs::is_regular_file(in, ec), "tokenizer train: input ", in,
                 ": is not a regular file (sentencepiece reads its inputs from disk)");
    std::ifstream probe(in, std::ios::binary);
    STRATA_CHECK(probe, "tokenizer train: input ", in, ": cannot open for reading");
    // Binary or empty input fails deep inside sentencepiece ("Internal: ...");
    // the first megabyte says whether this is text.
    std::string head(size_t(1) << 20, '\0');
    probe.read(head.data(), std::streamsize(head.size()));
    head.resize(size_t(probe.gcount()));
    STRATA_CHECK(!head.empty(), "tokenizer train: input ", in, ": is empty");
    if (fs::file_size(in, ec) > head.size())
      while (!head.empty() && uint8_t(head.back()) >= 0x80) head.pop_back();  // a cut sequence
    require_text(head, cat("tokenizer train: input ", in));
    STRATA_CHECK(in.find(',') == std::string::npos, "tokenizer train: input ", in,
                 ": file names with commas are not supported by sentencepiece");
    input_bytes += fs::file_size(in, ec);
    input_list += (input_list.empty() ? "" : ",") + in;
  }

  const fs::path out(o.out);
  std::error_code ec;
  if (out.has_parent_path()) {
    fs::create_directories(out.parent_path(), ec);
    STRATA_CHECK(!ec, "tokenizer train: cannot create directory ", out.parent_path().string(), ": ",
                 ec.message());
  }
  fs::path vocab_out = out;
  vocab_out.replace_extension(".vocab");
  if (vocab_out == out) vocab_out = fs::path(o.out + ".vocab");

  char mb[32];
  std::snprintf(mb, sizeof mb, "%.1f", double(input_bytes) / 1e6);
  log::info("tokenizer: training ", o.model_type, ", vocab ", o.vocab_size, ", on ",
            o.inputs.size(), " file(s) (", mb, " MB), ", o.num_threads, " thread(s)");

  // The model comes back serialized (nothing is written by sentencepiece), so
  // the trainer spec stored inside it holds no temporary or output path: the
  // same inputs and options give the same bytes wherever the model is written.
  const std::unordered_map<std::string, std::string> kwargs = {
      {"input", input_list},
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "true"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(1 << 24)},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(o.num_threads)},
      {"minloglevel", "2"},  // sentencepiece's own INFO/WARNING logging is very verbose
  };

  // Sentencepiece's sampler and shuffles draw from a generator seeded from a
  // process-wide seed, thread-local and created on first use. Setting the seed
  // and training on a fresh thread means a run never depends on what used the
  // generator before in this process; with num_threads fixed, the same inputs
  // and options give the same model bytes (tests/data_test.cpp checks it).
  Timer timer;
  sentencepiece::util::Status status;
  std::string model_bytes;
  std::thread worker([&] {
    sentencepiece::SetRandomGeneratorSeed(kTrainSeed);
    status = sentencepiece::SentencePieceTrainer::Train(kwargs, nullptr, &model_bytes);
  });
  worker.join();
  STRATA_CHECK(status.ok(), "tokenizer train: sentencepiece failed: ", one_line(status.ToString()));
  // Check that the result loads before it replaces anything.
  Tokenizer tok = Tokenizer::from_bytes(model_bytes, o.out);
  write_file_atomic(o.out, model_bytes);
  // The .vocab file, as sentencepiece writes it: piece <TAB> score, one per line.
  sentencepiece::SentencePieceProcessor sp;
  STRATA_CHECK(sp.LoadFromSerializedProto(model_bytes).ok(), "tokenizer ", o.out,
               ": cannot reload the trained model");
  std::string vocab;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    char score[32];
    std::snprintf(score, sizeof score, "%g", double(sp.GetScore(id)));
    vocab += sp.IdToPiece(id) + "\t" + score + "\n";
  }
  write_file_atomic(vocab_out.string(), vocab);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", timer.seconds());
  log::info("tokenizer: wrote ", o.out, " (vocab ", tok.vocab_size(), ", ",
            tok.model_bytes().size(), " bytes) in ", secs, " s");
  return tok;
}

}  // namespace strata
