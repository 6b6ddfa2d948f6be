// Fuzz target: tokenizers (sentencepiece models, and tokenizer.json files,
// told apart by the bytes), as `strata tokenizer encode`, `data
// prepare`, `generate --tokenizer` and data.tokenizer in a recipe load them
// (Tokenizer::load), and as the tokenizer bytes of a checkpoint are loaded.
//
// Input: the .model file. It is loaded with Tokenizer::load, then used the way
// training and generation use it: the special ids, a sample text encoded and
// decoded (ids in range), every piece of a small vocabulary looked up.
// (libsentencepiece is a system library without coverage instrumentation:
// libFuzzer sees only strata's side, so mutations inside the model are blind.)
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path =
      scratch.write("tokenizer.model", std::string_view(reinterpret_cast<const char*>(data), size));
  return guarded([&] {
    const Tokenizer tok = Tokenizer::load(path);
    const int V = tok.vocab_size();
    check(V > 0, "a loaded tokenizer with no pieces");
    for (const int32_t id : {tok.bos_id(), tok.eos_id(), tok.unk_id(), tok.pad_id()})
      check(id >= -1 && id < V, "special id " + std::to_string(id) + " outside the vocabulary");
    const std::vector<int32_t> ids =
        tok.encode("It is a truth universally acknowledged, 12 caf\xc3\xa9s \xe2\x80\x94 \x01!");
    for (const int32_t id : ids)
      check(id >= 0 && id < V, "encode gave id " + std::to_string(id) + " outside the vocabulary");
    (void)tok.decode(ids);
    for (int32_t id = 0; id < V && id < 1024; ++id) (void)tok.id_to_piece(id);
  });
}
