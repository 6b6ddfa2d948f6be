// Fuzz target: HDF5 checkpoints, as `strata inspect`, `generate`, `eval` and
// `train` (resume, model.init_from) open them.
//
// Input: the .h5 file. It is opened with CheckpointReader, then read as the
// commands do: the header fields `strata inspect` prints (src/cli/inspect.cpp),
// the config, plan, recipe, state and tokenizer as read_checkpoint_info()
// reads them (src/io/model_io.cpp; the tokenizer bytes then loaded as
// generate does), and the tensors of params/ and optimizer/ (those of at
// most 1M elements) as load_model() and a resume read them.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/plan.h"

namespace {

using namespace strata;

constexpr int64_t kMaxTensor = int64_t(1) << 20;

// Reads every listed tensor of `group` that is small enough.
void read_group(const CheckpointReader& r, const std::string& group) {
  std::vector<float> buf;
  for (const auto& [name, shape] : r.list(group)) {
    int64_t n = 1;
    bool small = true;
    for (const int64_t d : shape) {
      small = small && d >= 0 && d <= kMaxTensor && (n *= d) <= kMaxTensor;
      if (!small) break;
    }
    if (!small) continue;
    buf.assign(size_t(n), 0.0f);
    r.read(group, {TensorRef{name, shape, buf.data()}});
  }
}

}  // namespace

#ifdef STRATA_LIBFUZZER
// Under libFuzzer the file is opened in this process, not first in a child
// (io/checkpoint_precheck.h): a sanitizer report or crash in a child would be
// hidden from the fuzzer. The replay build (fuzz_replay_checkpoint) keeps the
// pre-check, as strata runs, and replays library-crashes/checkpoint.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("STRATA_CHECKPOINT_CHECK", "0", 1);
  return 0;
}
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::fuzz;
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path = scratch.write(
      "step_00000001.h5", std::string_view(reinterpret_cast<const char*>(data), size));
  return guarded([&] {
    const CheckpointReader r(path);
    // strata inspect
    (void)r.version();
    (void)r.created();
    if (r.has_optimizer()) {
      (void)r.optimizer_step();
      (void)r.optimizer_kind();
      (void)r.list("optimizer/exp_avg");
    }
    if (r.has_tokenizer()) {
      (void)r.tokenizer_size();
      (void)r.tokenizer_sha256();
    }
    // read_checkpoint_info()
    const LlamaConfig cfg = LlamaConfig::from_json(r.config(), r.path() + " (config)");
    const LayerPlan plan = LayerPlan::parse(r.plan(), cfg.num_hidden_layers);
    (void)plan.to_string();
    (void)r.recipe();
    (void)r.state();
    const std::string tokenizer = r.tokenizer();
    if (!tokenizer.empty()) (void)Tokenizer::from_bytes(tokenizer, r.path());
    // load_model() and a resume
    read_group(r, "params");
    if (r.has_optimizer()) {
      read_group(r, "optimizer/exp_avg");
      read_group(r, "optimizer/exp_avg_sq");
    }
  });
}
