// Sentencepiece tokenizers: load a .model file (or its bytes, as stored in a
// checkpoint), encode/decode, and train new ones (`strata tokenizer train`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata {

class Tokenizer {
 public:
  // Throws strata::Error naming the file when it is missing or not a
  // sentencepiece model.
  static Tokenizer load(const std::string& path);
  // From serialized model bytes; `name` is used in error messages.
  static Tokenizer from_bytes(const std::string& model_bytes, const std::string& name);

  // Plain encoding: no BOS/EOS added.
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string id_to_piece(int32_t id) const;

  int vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;

  const std::string& model_bytes() const { return bytes_; }  // the serialized model
  const std::string& sha256() const { return sha256_; }      // hex digest of model_bytes()
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  std::string bytes_, sha256_, name_;
};

struct TokenizerTrainOptions {
  std::vector<std::string>
      inputs;       // text files (one sentence per line, as sentencepiece reads them)
  std::string out;  // output .model path (a .vocab is written next to it)
  int vocab_size = 4096;
  std::string model_type = "bpe";  // "bpe" or "unigram"
  bool byte_fallback = true;       // unknown characters become <0xNN> byte pieces
  double character_coverage = 1.0;
  int64_t input_sentence_size = 2000000;  // sentences sampled for training (0: all)
  int num_threads = 1;                    // 1 keeps training deterministic
};

// Trains a sentencepiece model with BOS=1, EOS=2, UNK=0 and no PAD (the
// llama2.c / Llama convention), writes it atomically to options.out and
// returns it loaded. Throws strata::Error naming the bad input.
Tokenizer train_tokenizer(const TokenizerTrainOptions& options);

}  // namespace strata
