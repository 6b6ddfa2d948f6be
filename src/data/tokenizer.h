// Tokenizers: a sentencepiece .model (Llama 1/2, Mistral, what `strata
// tokenizer train` makes) or a Hugging Face byte-level BPE tokenizer.json
// (Llama 3 and later, GPT-2; data/bpe.h), loaded from a file or from its
// bytes as a checkpoint stores them; the kind is told by the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// One kind of tokenizer behind Tokenizer.
class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t unk_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual std::vector<int32_t> end_of_turn_ids() const { return {}; }
};

class Tokenizer {
 public:
  enum class Kind { None, SentencePiece, Bpe };

  // Throws strata::Error naming the file when it is missing or neither a
  // sentencepiece model nor a supported tokenizer.json.
  static Tokenizer load(const std::string& path);
  // From the file's bytes; `name` is used in error messages. Bytes that
  // start with '{' are a tokenizer.json, anything else a sentencepiece model.
  static Tokenizer from_bytes(const std::string& model_bytes, const std::string& name);

  // Plain encoding: no BOS/EOS added (special tokens written in the text of
  // a tokenizer.json are their ids, as Hugging Face's encode does).
  std::vector<int32_t> encode(const std::string& text) const;
  // Special and control tokens (BOS, EOS, ...) decode to nothing.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string id_to_piece(int32_t id) const;

  Kind kind() const { return kind_; }
  // The file name a run directory or an export gives these bytes:
  // "tokenizer.model" or "tokenizer.json".
  const char* file_name() const;

  int vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  // Special tokens other than EOS that end a generation the same way: a chat
  // model's end of turn or of message (<|eot_id|>, <|eom_id|>, <|im_end|>,
  // <end_of_turn>), where the vocabulary has them.
  std::vector<int32_t> end_of_turn_ids() const;

  const std::string& model_bytes() const { return bytes_; }  // the serialized model
  const std::string& sha256() const { return sha256_; }      // hex digest of model_bytes()
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<const TokenizerModel> model_;
  Kind kind_ = Kind::None;
  std::string bytes_, sha256_, name_;
};

// The sentencepiece kind (data/tokenizer_sp.cpp; tokenizer_sp_none.cpp in a
// build without sentencepiece refuses) and the tokenizer.json kind.
std::shared_ptr<const TokenizerModel> load_sentencepiece(const std::string& bytes,
                                                         const std::string& name);
std::shared_ptr<const TokenizerModel> load_bpe_json(const std::string& bytes,
                                                    const std::string& name);

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
