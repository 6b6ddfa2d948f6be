// Tokenizers in a build without sentencepiece (libsentencepiece-dev): loading
// or training a .model is refused in one line naming what the build lacks. A
// dataset already tokenised (data.dataset with its meta.json) still trains
// with data.tokenizer = "" and model.vocab_size set.
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"

namespace strata {
namespace {

[[noreturn]] void no_sentencepiece(const std::string& name, const char* what) {
  fail(cat("this build has no sentencepiece (libsentencepiece-dev): tokenizer ", name,
           " cannot be ", what, " (use a prepared dataset with data.tokenizer = \"\", or rebuild "
           "with sentencepiece)"));
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) { no_sentencepiece(path, "loaded"); }

Tokenizer Tokenizer::from_bytes(const std::string& model_bytes, const std::string& name) {
  (void)model_bytes;
  no_sentencepiece(name, "loaded");
}

// No Tokenizer is ever loaded here: the rest behaves as on an empty one.
std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  (void)text;
  fail("tokenizer: encode on an empty Tokenizer (nothing loaded)");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  (void)ids;
  fail("tokenizer: decode on an empty Tokenizer (nothing loaded)");
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  (void)id;
  fail("tokenizer: id_to_piece on an empty Tokenizer (nothing loaded)");
}

int Tokenizer::vocab_size() const { return 0; }
int32_t Tokenizer::bos_id() const { return -1; }
int32_t Tokenizer::eos_id() const { return -1; }
int32_t Tokenizer::unk_id() const { return -1; }
int32_t Tokenizer::pad_id() const { return -1; }

Tokenizer train_tokenizer(const TokenizerTrainOptions& options) {
  no_sentencepiece(options.out, "trained");
}

}  // namespace strata
