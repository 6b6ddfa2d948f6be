// The tokenizer files of a Hugging Face export, made from a sentencepiece
// model so that transformers' AutoTokenizer gives sentencepiece's ids:
//
//   tokenizer.json           the fast tokenizer (BPE vocab and merges, or the
//                            unigram vocab with scores; sentencepiece's
//                            normalisation for the model's normalizer spec,
//                            as a normalizer with no pre-tokenizer, so that
//                            the ids are sentencepiece's (checked by
//                            tests/fixtures/hf_export); byte fallback; BOS
//                            added by the post-processor; the decoder)
//   tokenizer_config.json    tokenizer class, BOS/EOS/UNK (and PAD where the
//                            model has one), add_bos_token, model_max_length
//                            and the chat template strata's SFT renders
//   special_tokens_map.json  the special tokens again, for older readers
//
// The sentencepiece model is read with a small protobuf decoder (the Debian
// package ships no model proto header).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sft.h"

namespace strata {

// What the export needs from a sentencepiece ModelProto.
struct SpModelInfo {
  enum class PieceType {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6
  };
  struct Piece {
    std::string text;
    float score = 0;
    PieceType type = PieceType::Normal;
  };
  std::vector<Piece> pieces;
  int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  bool byte_fallback = false;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;

  int find(PieceType t) const;  // the first piece of that type, or -1
};

// Throws strata::Error naming `name` when the bytes are not a sentencepiece model.
SpModelInfo parse_sp_model(const std::string& bytes, const std::string& name);

// The BPE merges a Hugging Face BPE model needs to reproduce sentencepiece's
// BPE: every split of a normal piece into two normal pieces, ranked by the
// merged piece's score (then its id, then the left piece's id).
std::vector<std::pair<std::string, std::string>> bpe_merges(const SpModelInfo& m);

// The Jinja chat template that renders the text strata's SFT trains on.
std::string hf_chat_template(const ChatTemplate& t);

struct HfTokenizerFiles {
  std::string tokenizer_json, tokenizer_config_json, special_tokens_map_json;
  int pad_token_id = -1;  // the model's pad piece, -1 when it has none
};

// The three files for a model with this context length.
HfTokenizerFiles make_hf_tokenizer_files(const std::string& sp_model_bytes, int64_t max_length,
                                         const std::string& name);

}  // namespace strata
