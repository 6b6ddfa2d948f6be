// Tokenizer: the kind is told by the bytes (a tokenizer.json is a JSON
// object; a sentencepiece model is a protobuf, which never starts with '{'
// after whitespace), and every call goes to that kind. A Tokenizer keeps the
// bytes it was loaded from: checkpoints store them, and the dataset metadata
// records their sha256.
#include "data/tokenizer.h"

#include "core/error.h"
#include "core/file.h"
#include "core/sha256.h"
#include "data/bpe.h"

namespace strata {
namespace {

bool looks_like_json(const std::string& b) {
  for (char c : b) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';
  }
  return false;
}

}  // namespace

std::shared_ptr<const TokenizerModel> load_bpe_json(const std::string& bytes,
                                                    const std::string& name) {
  return BpeTokenizer::parse(bytes, name);
}

Tokenizer Tokenizer::load(const std::string& path) {
  return from_bytes(read_file(path, "tokenizer"), path);
}

Tokenizer Tokenizer::from_bytes(const std::string& model_bytes, const std::string& name) {
  STRATA_CHECK(!model_bytes.empty(), "tokenizer ", name,
               ": empty file, not a sentencepiece model or a tokenizer.json");
  Tokenizer t;
  if (looks_like_json(model_bytes)) {
    t.model_ = load_bpe_json(model_bytes, name);
    t.kind_ = Kind::Bpe;
  } else {
    t.model_ = load_sentencepiece(model_bytes, name);
    t.kind_ = Kind::SentencePiece;
  }
  t.bytes_ = model_bytes;
  t.sha256_ = sha256_hex(model_bytes);
  t.name_ = name;
  return t;
}

const char* Tokenizer::file_name() const {
  return kind_ == Kind::Bpe ? "tokenizer.json" : "tokenizer.model";
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  STRATA_CHECK(model_, "tokenizer: encode on an empty Tokenizer (nothing loaded)");
  return model_->encode(text);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  STRATA_CHECK(model_, "tokenizer: decode on an empty Tokenizer (nothing loaded)");
  return model_->decode(ids);
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  STRATA_CHECK(model_, "tokenizer: id_to_piece on an empty Tokenizer (nothing loaded)");
  return model_->id_to_piece(id);
}

int Tokenizer::vocab_size() const { return model_ ? model_->vocab_size() : 0; }
int32_t Tokenizer::bos_id() const { return model_ ? model_->bos_id() : -1; }
int32_t Tokenizer::eos_id() const { return model_ ? model_->eos_id() : -1; }
int32_t Tokenizer::unk_id() const { return model_ ? model_->unk_id() : -1; }
int32_t Tokenizer::pad_id() const { return model_ ? model_->pad_id() : -1; }
std::vector<int32_t> Tokenizer::end_of_turn_ids() const {
  return model_ ? model_->end_of_turn_ids() : std::vector<int32_t>{};
}

}  // namespace strata
