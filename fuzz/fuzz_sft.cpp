// Fuzz target: SFT conversations (JSONL), as `strata train` reads data.sft_train
// and data.sft_val when data.kind = "sft" (src/train/run_setup.cpp).
//
// Input: the JSONL file. It is loaded with SftDataset::load_jsonl, rendered
// with the default chat template and the shipped 512-piece tokenizer
// (data/tokenizers/tok512.model), and, when it loads, fed to the SFT loader
// (one example per row, then packed) for a few batches.
#include <cstdint>
#include <memory>
#include <string>

#include "data/sft.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  static const Tokenizer tok =
      Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model");
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path =
      scratch.write("train.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  std::shared_ptr<const SftDataset> ds;
  guarded([&] {
    ds = SftDataset::load_jsonl(path, tok, ChatTemplate{});
    for (const SftExample& ex : ds->examples())
      check(ex.tokens.size() == ex.loss.size(), "an SFT example's loss mask has another length");
  });
  if (!ds) return 0;
  for (const bool packing : {false, true}) {
    guarded([&] {
      auto loader = make_sft_loader(ds, 16, 1234, packing, tok.pad_id());
      Batch b;
      for (int i = 0; i < 2; ++i) loader->next(2, b);
    });
  }
  return 0;
}
