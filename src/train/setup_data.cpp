// `strata train`: the data (run.h): pretraining token shards (prepared from
// data.inputs by the first rank when missing) or SFT conversations, and the
// loaders over them.
#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/text.h"
#include "data/sft.h"
#include "data/shards.h"
#include "train/run.h"

namespace strata::train_internal {

namespace {
namespace fs = std::filesystem;

std::vector<std::string> expand_globs(const TrainConfig& c,
                                      const std::vector<std::string>& patterns,
                                      const std::string& key) {
  std::vector<std::string> out;
  for (const auto& p : patterns) {
    glob_t g{};
    const int rc = glob(p.c_str(), GLOB_NOCHECK, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  for (const auto& f : out)
    if (!fs::exists(f)) c.fail(key, cat("no such file: ", f));
  return out;
}

void setup_pretrain(Run& run) {
  const TrainConfig& c = run.c;
  const DataSection& d = c.data;
  const int seq_len = c.training.seq_len;
  const uint64_t seed = c.run.seed;
  const std::string& dir = d.dataset;
  if (dir.empty()) c.fail("data.dataset", "a pretraining run needs a prepared dataset directory");
  // The first rank prepares a missing dataset while the others wait.
  if (run.root() && !fs::exists(dir + "/meta.json")) {
    const auto inputs = expand_globs(c, d.inputs, "data.inputs");
    if (inputs.empty())
      c.fail("data.dataset", cat(dir,
                                 " has no meta.json and data.inputs is empty: run "
                                 "`strata data prepare` or list the raw files in data.inputs"));
    STRATA_CHECK(run.tokenizer, c.where("data.tokenizer"), ": data.tokenizer is needed to prepare ",
                 dir);
    log::info("data: preparing ", dir, " from ", inputs.size(), " file(s)");
    PrepareOptions p;
    // The run's tokenizer, wherever it came from.
    p.tokenizer = run.dir() + "/" + run.tokenizer->file_name();
    p.inputs = inputs;
    p.out_dir = dir;
    p.doc_split = d.doc_split;
    p.val_fraction = d.val_fraction;
    p.seed = seed;
    prepare_dataset(p);
  }
  if (run.world() > 1) run.grid.world->barrier();
  auto train = std::make_shared<const TokenDataset>(TokenDataset::open(dir, "train"));
  if (run.tokenizer && train->meta().tokenizer_sha256 != run.tokenizer->sha256())
    fail(cat(dir, "/meta.json: the dataset was tokenised with tokenizer sha256 ",
             train->meta().tokenizer_sha256.substr(0, 12), "..., but this run's tokenizer (",
             run.tokenizer->name(), ") is ", run.tokenizer->sha256().substr(0, 12),
             "...; prepare the data again with the run's tokenizer"));
  STRATA_CHECK(train->meta().vocab_size <= run.model->config().vocab_size, dir,
               "/meta.json: dataset vocabulary (", train->meta().vocab_size,
               ") exceeds the model's (", run.model->config().vocab_size, ")");
  run.train_loader = make_pretrain_loader(train, seq_len, seed, true);
  if (train->meta().val.tokens > seq_len) {
    auto val = std::make_shared<const TokenDataset>(TokenDataset::open(dir, "val"));
    run.make_val_loader = [val, seq_len, seed] {
      return make_pretrain_loader(val, seq_len, seed, false);
    };
  } else {
    log::warn("data: ", dir, " has no validation split longer than one sequence; no val_loss");
  }
  log::info("data: ", dir, ": train ", human_count(double(train->num_tokens())), " tokens (",
            run.train_loader->rows_per_epoch(), " sequences of ", seq_len, "), val ",
            human_count(double(train->meta().val.tokens)), " tokens");
}

void setup_sft(Run& run) {
  const TrainConfig& c = run.c;
  const DataSection& d = c.data;
  const int seq_len = c.training.seq_len;
  const uint64_t seed = c.run.seed;
  STRATA_CHECK(run.tokenizer, c.where("data.tokenizer"), ": SFT needs a tokenizer");
  const std::string& path = d.sft_train;
  if (path.empty()) c.fail("data.sft_train", "an SFT run needs a JSONL file");
  if (!fs::exists(path)) c.fail("data.sft_train", cat("no such file: ", path));
  ChatTemplate tmpl;
  if (!d.chat_template.empty()) {
    try {
      tmpl = load_chat_template(d.chat_template, *run.tokenizer);
    } catch (const Error& e) {
      c.fail("data.chat_template", e.what());
    }
  }
  const int32_t pad = run.tokenizer->eos_id() >= 0 ? run.tokenizer->eos_id() : 0;
  auto train = SftDataset::load_jsonl(path, *run.tokenizer, tmpl);
  // Rows keep the first seq_len + 1 tokens: an example whose response starts
  // later contributes nothing.
  int64_t lost = 0;
  for (const SftExample& e : train->examples()) {
    const size_t n = std::min(e.loss.size(), size_t(seq_len) + 1);
    lost += std::find(e.loss.begin(), e.loss.begin() + n, uint8_t(1)) == e.loss.begin() + n;
  }
  if (lost == int64_t(train->examples().size()) && !d.packing)
    c.fail("training.seq_len", cat("every example of ", path, " is cut before its response at ",
                                   seq_len, " tokens; raise training.seq_len"));
  if (lost && !d.packing)
    log::warn("data: ", lost, " of ", train->examples().size(), " examples of ", path,
              " are cut before their response at ", seq_len, " tokens (no loss from them)");
  run.train_loader = make_sft_loader(train, seq_len, seed, d.packing, pad);
  if (!d.sft_val.empty()) {
    if (!fs::exists(d.sft_val)) c.fail("data.sft_val", cat("no such file: ", d.sft_val));
    auto val = SftDataset::load_jsonl(d.sft_val, *run.tokenizer, tmpl);
    run.make_val_loader = [val, seq_len, seed, pad, packing = d.packing] {
      return make_sft_loader(val, seq_len, seed, packing, pad);
    };
  }
  log::info("data: SFT ", path, ": ", train->examples().size(), " conversations",
            d.packing ? " (packed)" : "", ", chat template ",
            tmpl.jinja ? tmpl.source : std::string("strata's own"));
}

}  // namespace

void setup_data(Run& run) {
  if (run.c.data.kind == DataKind::Sft)
    setup_sft(run);
  else
    setup_pretrain(run);
}

}  // namespace strata::train_internal
