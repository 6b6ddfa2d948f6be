// Sentencepiece in a build without it (libsentencepiece-dev): loading or
// training a .model is refused in one line naming what the build lacks
// (a tokenizer.json still loads: data/bpe.h needs only PCRE2). A
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
           " cannot be ", what,
           " (use a prepared dataset with data.tokenizer = \"\", or rebuild "
           "with sentencepiece)"));
}

}  // namespace

std::shared_ptr<const TokenizerModel> load_sentencepiece(const std::string& bytes,
                                                         const std::string& name) {
  (void)bytes;
  no_sentencepiece(name, "loaded");
}

Tokenizer train_tokenizer(const TokenizerTrainOptions& options) {
  no_sentencepiece(options.out, "trained");
}

}  // namespace strata
