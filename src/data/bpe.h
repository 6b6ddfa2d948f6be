// Byte-level BPE tokenizers as Hugging Face's `tokenizers` saves them in a
// tokenizer.json (Llama 3 and later, GPT-2, Qwen-style models): the BPE model
// (vocab, merges in either of their two spellings, ignore_merges, unk), the
// pre-tokenizer (Split by a regex, ByteLevel with or without its own GPT-2
// pattern and prefix space, a Sequence of them), the added and special tokens
// (matched in the text before pre-tokenization, with lstrip/rstrip and
// single_word), the post-processor's BOS (TemplateProcessing) and the
// ByteLevel decoder. What a file uses beyond that (a normalizer, another
// model type or pre-tokenizer) is refused in one line naming the file and
// the field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/regex.h"
#include "data/tokenizer.h"

namespace strata {

// The tokenizer.json kind behind Tokenizer.
class BpeTokenizer final : public TokenizerModel {
 public:
  // Parses the JSON text of a tokenizer.json; `name` is used in errors.
  static std::shared_ptr<const BpeTokenizer> parse(const std::string& json,
                                                   const std::string& name);

  // The ids of `text` without the post-processor's additions (as
  // tokenizers' encode(text, add_special_tokens=False)): added tokens found
  // in the text are their ids.
  std::vector<int32_t> encode(const std::string& text) const override;
  // The text of `ids`, special tokens left out (skip_special_tokens=True);
  // bytes that do not form valid UTF-8 become U+FFFD as tokenizers does.
  std::string decode(const std::vector<int32_t>& ids) const override;
  // The raw bytes of `ids` (special tokens left out), before any UTF-8
  // repair: for streaming output that must not split a character.
  std::string decode_bytes(const std::vector<int32_t>& ids) const;
  std::string id_to_piece(int32_t id) const override;   // the vocabulary's string
  int32_t piece_to_id(const std::string& piece) const;  // -1 when absent

  int vocab_size() const override { return int(pieces_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t unk_id() const override { return unk_; }
  int32_t pad_id() const override { return pad_; }
  bool is_special(int32_t id) const;
  // The special tokens that end a turn besides EOS (Tokenizer::end_of_turn_ids).
  std::vector<int32_t> end_of_turn_ids() const override;

  struct Added {
    std::string content;
    int32_t id = 0;
    bool special = false, lstrip = false, rstrip = false, single_word = false;
  };
  // One step of the pre-tokenizer.
  struct PreStep {
    enum Kind { Split, ByteLevel } kind = ByteLevel;
    Regex regex;  // Split's pattern, or ByteLevel's own (use_regex)
    bool has_regex = false;
    bool isolated = true;           // Split: Isolated (matches kept) or Removed
    bool invert = false;            // Split: the matches are the separators
    bool add_prefix_space = false;  // ByteLevel
  };

 private:
  // Splits a segment (text without added tokens) into pre-tokens.
  std::vector<std::string> pre_tokenize(const std::string& segment) const;
  void encode_word(const std::string& mapped, std::vector<int32_t>* out) const;
  void encode_segment(const std::string& segment, std::vector<int32_t>* out) const;

  std::string name_;
  std::vector<std::string> pieces_;                 // id -> string ("" where no id)
  std::unordered_map<std::string, int32_t> vocab_;  // string -> id (model and added)
  // (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<int32_t> byte_ids_;  // the id of each byte's byte-level character, or -1
  std::vector<Added> added_;       // longest content first
  std::vector<uint8_t> special_;   // per id
  std::vector<PreStep> pre_;
  bool ignore_merges_ = false;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1;
};

// GPT-2's byte-to-character table: the character (as UTF-8) that stands for
// each byte in a byte-level vocabulary.
const std::vector<std::string>& byte_level_chars();

}  // namespace strata
