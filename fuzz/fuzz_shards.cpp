// Fuzz target: prepared token datasets (meta.json and the .tokens shards), as
// `strata train` opens data.dataset (src/train/run_setup.cpp).
//
// Input: parts (fuzz_util.h) written into a dataset directory as meta.json,
// train-00000.tokens, val-00000.tokens and train-00001.tokens. Both splits are
// opened with TokenDataset::open; a split that opens then feeds the
// pretraining loader for a few batches, as training does.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/shards.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  static const char* const kNames[] = {"meta.json", "train-00000.tokens", "val-00000.tokens",
                                       "train-00001.tokens"};
  const std::vector<std::string> parts = split_parts(data, size, 4);
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  for (size_t i = 0; i < parts.size(); ++i) scratch.write(kNames[i], parts[i]);
  for (const char* split : {"train", "val"}) {
    guarded([&] {
      auto ds = std::make_shared<const TokenDataset>(TokenDataset::open(scratch.dir(), split));
      const int seq_len = 8;
      if (ds->num_tokens() < seq_len + 1) return;
      auto loader = make_pretrain_loader(ds, seq_len, 1234, split == std::string("train"));
      Batch b;
      for (int i = 0; i < 3; ++i) loader->next(2, b);
      loader->set_state(loader->state());
    });
  }
  return 0;
}
