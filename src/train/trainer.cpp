#include "train/trainer.h"

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/signals.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/sft.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "infer/generate.h"
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "model/model.h"
#include "parallel/grid.h"
#include "parallel/sharding.h"
#include "parallel/timed_comm.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace strata {
namespace fs = std::filesystem;

// ------------------------------------------------------------------ schema

const std::vector<KeySpec>& train_recipe_schema() {
  using K = KeyType;
  static const std::vector<KeySpec> schema = {
      {"run.name", K::String, "\"run\"", "name of the run (used for the default run.dir)"},
      {"run.dir", K::String, "\"\"", "output directory (default: runs/<run.name>)"},
      {"run.seed", K::Int, "1234", "seed for initialisation, data order and sampling"},
      {"run.threads", K::Int, "0", "OpenMP threads (0: OMP_NUM_THREADS or all cores)"},

      {"model.init_from", K::String, "\"\"",
       "start from this checkpoint's config, weights, tokenizer"},
      {"model.config", K::String, "\"\"", "Hugging Face config.json with the model shape"},
      {"model.plan", K::String, "\"\"",
       "layer plan, e.g. \"standard*4,skip,standard\" (default: all standard; with init_from: "
       "run the checkpoint's weights under this plan)"},
      {"model.vocab_size", K::Int, "", "vocabulary size (default: the tokenizer's)"},
      {"model.hidden_size", K::Int, "", "model width"},
      {"model.intermediate_size", K::Int, "", "MLP width"},
      {"model.num_hidden_layers", K::Int, "", "decoder layers"},
      {"model.num_attention_heads", K::Int, "", "query heads"},
      {"model.num_key_value_heads", K::Int, "", "key/value heads (default: query heads)"},
      {"model.head_dim", K::Int, "", "head dimension (default: hidden_size / heads)"},
      {"model.max_position_embeddings", K::Int, "", "context length (default: training.seq_len)"},
      {"model.rope_theta", K::Float, "", "RoPE base (default 10000)"},
      {"model.rms_norm_eps", K::Float, "", "RMSNorm epsilon (default 1e-5)"},
      {"model.tie_word_embeddings", K::Bool, "", "share embedding and LM head (default false)"},
      {"model.attention_bias", K::Bool, "", "biases on q, k, v, o projections (default false)"},
      {"model.initializer_range", K::Float, "", "std of the normal init (default 0.02)"},

      {"data.kind", K::String, "\"pretrain\"", "pretrain (token shards) or sft (JSONL)"},
      {"data.tokenizer", K::String, "\"\"", "sentencepiece .model (default: model.init_from's)"},
      {"data.dataset", K::String, "\"\"", "prepared token-shard directory (pretrain)"},
      {"data.inputs", K::StringList, "[]",
       "text/JSONL files (globs) to prepare into data.dataset when it does not exist"},
      {"data.doc_split", K::String, "\"paragraph\"",
       "documents in text inputs: paragraph, line, file"},
      {"data.val_fraction", K::Float, "0.01", "share of documents held out for validation"},
      {"data.sft_train", K::String, "\"\"", "SFT training JSONL"},
      {"data.sft_val", K::String, "\"\"", "SFT validation JSONL (optional)"},
      {"data.packing", K::Bool, "false", "SFT: pack examples into full rows"},

      {"training.steps", K::Int, "", "optimizer steps", true},
      {"training.micro_batch_size", K::Int, "8",
       "sequences per forward/backward on each data-parallel rank"},
      {"training.seq_len", K::Int, "256", "tokens per sequence"},
      {"training.grad_accum_steps", K::Int, "1", "micro-batches per optimizer step"},
      {"training.grad_clip", K::Float, "1.0", "max global gradient norm (0: off)"},
      {"training.precision", K::String, "\"fp32\"",
       "fp32; bf16 (matmuls in bfloat16, fp32 accumulation and master weights; emulated "
       "with the same numerics where the CPU has no native bf16); or auto (bf16 where "
       "native, else fp32)"},
      {"training.trainable", K::StringList, "[]",
       "only these tensors train (globs or layers:A-B; empty: all)"},
      {"training.freeze", K::StringList, "[]", "these tensors do not train (globs or layers:A-B)"},

      {"optimizer.name", K::String, "\"adamw\"", "optimizer (adamw)"},
      {"optimizer.lr", K::Float, "3e-4", "peak learning rate"},
      {"optimizer.beta1", K::Float, "0.9", "AdamW beta1"},
      {"optimizer.beta2", K::Float, "0.95", "AdamW beta2"},
      {"optimizer.eps", K::Float, "1e-8", "AdamW epsilon"},
      {"optimizer.weight_decay", K::Float, "0.1", "decoupled weight decay (matrices only)"},
      {"optimizer.load_state", K::Bool, "false",
       "with model.init_from: continue from its optimizer moments"},

      {"lr_scheduler.kind", K::String, "\"cosine\"", "cosine, linear or constant"},
      {"lr_scheduler.warmup_steps", K::Int, "0", "linear warm-up steps"},
      {"lr_scheduler.min_lr", K::Float, "0.0", "learning rate at the end of the decay"},
      {"lr_scheduler.decay_steps", K::Int, "0", "end of the decay (0: training.steps)"},

      {"parallelism.tp", K::Int, "1",
       "tensor-parallel degree (Megatron-LM layout; divides heads, KV heads, MLP, vocab)"},
      {"parallelism.dp", K::Int, "0", "data-parallel degree (0: world size / tp)"},
      {"parallelism.zero", K::Int, "0",
       "1: shard the AdamW moments over the data-parallel ranks (ZeRO-1)"},

      {"layerskip.p_max", K::Float, "0.0",
       "LayerSkip layer dropout: rate of the last layer at the end of training (0: off)"},
      {"layerskip.layer_scale", K::String, "\"exp\"",
       "per-layer dropout scale D(l): exp (2^(l/(L-1)) - 1), linear or const"},
      {"layerskip.time_scale", K::String, "\"none\"",
       "dropout scale over training S(t): none (1; continual/fine-tuning) or exp (from scratch)"},
      {"layerskip.e_scale", K::Float, "0.0",
       "early-exit loss scale in [0, 1] (0: only the last layer's loss)"},
      {"layerskip.curriculum", K::String, "\"none\"",
       "which exits get a loss each step: none (all), rotational or gradual"},
      {"layerskip.rotation", K::Int, "0", "R of the rotational curriculum: every R-th layer"},
      {"layerskip.always_last", K::Bool, "true", "the last layer's loss is always on"},
      {"layerskip.e_formula", K::String, "\"paper\"",
       "exit scale e(l): paper (as printed: e(0) = 0) or cumulative (every enabled exit weighted)"},

      {"checkpoint.interval", K::Int, "0", "save every N steps (0: only at the end)"},
      {"checkpoint.keep", K::Int, "2", "keep the newest K checkpoints (0: all)"},
      {"checkpoint.resume", K::String, "\"auto\"",
       "auto (newest in run.dir), none, or a checkpoint path"},
      {"checkpoint.final", K::Bool, "true", "save a checkpoint when training ends"},

      {"eval.interval", K::Int, "0", "validate every N steps (0: only at the end)"},
      {"eval.batches", K::Int, "8", "validation micro-batches per evaluation"},
      {"eval.tasks", K::StringList, "[]",
       "benchmark tasks (eval/*.toml) to run at each evaluation, e.g. [\"arc_easy\", \"piqa\"]"},
      {"eval.task_limit", K::Int, "0", "first N examples of each task (0: all)"},
      {"eval.task_shots", K::Int, "-1", "few-shot examples (-1: each task's default)"},
      {"eval.task_dir", K::String, "\"eval\"", "directory of the task definitions"},

      {"log.interval", K::Int, "10", "print and record metrics every N steps"},
      {"log.sample_prompt", K::String, "\"\"", "at the end, print a sample continuing this prompt"},
      {"log.sample_tokens", K::Int, "64", "tokens in the final sample"},
      {"log.sample_temperature", K::Float, "0.8", "temperature of the final sample (0: greedy)"},
  };
  return schema;
}

// ------------------------------------------------------------ trainable mask

std::vector<bool> resolve_trainable(const std::vector<std::string>& names,
                                    const std::vector<std::string>& trainable,
                                    const std::vector<std::string>& freeze,
                                    const std::string& where) {
  auto matches = [&](const std::string& pattern, const std::string& name) {
    if (pattern.rfind("layers:", 0) == 0) {
      const std::string range = pattern.substr(7);
      int a = -1, b = -1;
      char tail = 0;
      const int got = std::sscanf(range.c_str(), "%d-%d%c", &a, &b, &tail);
      if (got == 1) b = a;
      STRATA_CHECK((got == 1 || got == 2) && a >= 0 && b >= a, where, ": bad layer range '",
                   pattern, "' (use layers:A-B or layers:N)");
      int layer = -1;
      if (std::sscanf(name.c_str(), "model.layers.%d.", &layer) != 1) return false;
      return layer >= a && layer <= b;
    }
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  };
  auto apply = [&](const std::vector<std::string>& patterns, std::vector<bool>& mask, bool value) {
    for (const auto& p : patterns) {
      bool any = false;
      for (size_t i = 0; i < names.size(); ++i)
        if (matches(p, names[i])) {
          mask[i] = value;
          any = true;
        }
      STRATA_CHECK(any, where, ": pattern '", p, "' matches no tensor (names look like ",
                   "'model.layers.0.mlp.up_proj.weight', 'lm_head.weight')");
    }
  };
  std::vector<bool> mask(names.size(), trainable.empty());
  apply(trainable, mask, true);
  apply(freeze, mask, false);
  return mask;
}

namespace {

// ------------------------------------------------------------------ helpers

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string fixed1(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::string human_time(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

std::vector<std::string> expand_globs(const std::vector<std::string>& patterns, const Recipe& r,
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
    if (!fs::exists(f)) r.fail(key, cat("no such file: ", f));
  return out;
}

// Keeps only the lines of metrics.jsonl with step <= last_step (resume).
void truncate_metrics(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      if (nlohmann::json::parse(line).value("step", int64_t(0)) <= last_step) kept += line + "\n";
    } catch (const std::exception&) {
      // a torn last line from a crash: drop it
    }
  }
  write_file_atomic(path, kept);
}

LlamaConfig model_config_from_recipe(const Recipe& r, const Tokenizer* tok, int seq_len) {
  LlamaConfig c;
  if (!r.get_string("model.config").empty()) {
    const std::string path = r.get_string("model.config");
    std::ifstream f(path);
    if (!f) r.fail("model.config", cat("cannot open ", path));
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      r.fail("model.config", cat(path, " is not valid JSON: ", e.what()));
    }
    c = LlamaConfig::from_json(j, path);
  } else {
    for (const char* k : {"model.hidden_size", "model.intermediate_size", "model.num_hidden_layers",
                          "model.num_attention_heads"})
      if (!r.has(k))
        fail(cat(r.files().front(), ": ", k,
                 " is required (or give model.config or model.init_from)"));
    c.vocab_size = 0;
    c.num_key_value_heads = 0;
    c.max_position_embeddings = 0;
  }
  auto set_int = [&](const char* key, int& field) {
    if (r.has(key)) field = int(r.get_int(key));
  };
  auto set_float = [&](const char* key, double& field) {
    if (r.has(key)) field = r.get_float(key);
  };
  auto set_bool = [&](const char* key, bool& field) {
    if (r.has(key)) field = r.get_bool(key);
  };
  set_int("model.vocab_size", c.vocab_size);
  set_int("model.hidden_size", c.hidden_size);
  set_int("model.intermediate_size", c.intermediate_size);
  set_int("model.num_hidden_layers", c.num_hidden_layers);
  set_int("model.num_attention_heads", c.num_attention_heads);
  set_int("model.num_key_value_heads", c.num_key_value_heads);
  set_int("model.head_dim", c.head_dim);
  set_int("model.max_position_embeddings", c.max_position_embeddings);
  set_float("model.rope_theta", c.rope_theta);
  set_float("model.rms_norm_eps", c.rms_norm_eps);
  set_float("model.initializer_range", c.initializer_range);
  set_bool("model.tie_word_embeddings", c.tie_word_embeddings);
  set_bool("model.attention_bias", c.attention_bias);
  if (c.vocab_size == 0 && tok) c.vocab_size = tok->vocab_size();
  if (c.max_position_embeddings == 0) c.max_position_embeddings = seq_len;
  if (tok) {
    c.bos_token_id = tok->bos_id();
    c.eos_token_id = tok->eos_id();
    if (c.vocab_size < tok->vocab_size())
      r.fail("model.vocab_size", cat(c.vocab_size, " is smaller than the tokenizer's vocabulary (",
                                     tok->vocab_size(), ")"));
  }
  c.finalize(r.files().front() + " [model]");
  return c;
}

// Everything a run needs, set up from the recipe before the first step.
struct Run {
  const Recipe& r;
  std::string dir;
  uint64_t seed = 0;
  int64_t steps = 0;
  int micro_batch = 0, seq_len = 0, accum = 0;
  LrSchedule schedule;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model<float>> model;
  std::unique_ptr<AdamW<float>> opt;
  std::unique_ptr<Loader> train_loader;
  std::function<std::unique_ptr<Loader>()> make_val_loader;  // fresh, from the start
  int64_t step = 0, tokens_seen = 0;
  std::string metrics_path;
  // Parallelism: the grid, and its groups wrapped to time communication.
  ProcessGrid grid;
  TimedComm* tp = nullptr;  // owned by grid.tp_comm
  TimedComm* dp = nullptr;  // owned by grid.dp_comm
  int zero = 0;
  LayerSkipConfig layerskip;
  std::vector<int> owner;  // ZeRO-1: the dp rank updating each tensor (-1: frozen)
  bool root() const { return grid.is_root(); }
  int world() const { return grid.world_size; }

  explicit Run(const Recipe& recipe) : r(recipe) {}
};

int positive(const Recipe& r, const char* key, int64_t min = 1) {
  const int64_t v = r.get_int(key);
  if (v < min) r.fail(key, cat("must be >= ", min, ", got ", v));
  STRATA_CHECK(v <= (int64_t(1) << 30), r.where(key), ": ", key, ": value too large");
  return int(v);
}

void setup_data(Run& run) {
  const Recipe& r = run.r;
  const std::string kind = r.get_string("data.kind");
  if (kind == "pretrain") {
    std::string dir = r.get_string("data.dataset");
    if (dir.empty()) r.fail("data.dataset", "a pretraining run needs a prepared dataset directory");
    // The first rank prepares a missing dataset while the others wait.
    if (run.root() && !fs::exists(dir + "/meta.json")) {
      const auto inputs = expand_globs(r.get_strings("data.inputs"), r, "data.inputs");
      if (inputs.empty())
        r.fail("data.dataset", cat(dir,
                                   " has no meta.json and data.inputs is empty: run "
                                   "`strata data prepare` or list the raw files in data.inputs"));
      STRATA_CHECK(run.tokenizer, r.where("data.tokenizer"),
                   ": data.tokenizer is needed to prepare ", dir);
      log::info("data: preparing ", dir, " from ", inputs.size(), " file(s)");
      PrepareOptions p;
      p.tokenizer = run.dir + "/tokenizer.model";  // the run's tokenizer, wherever it came from
      p.inputs = inputs;
      p.out_dir = dir;
      p.doc_split = r.get_string("data.doc_split");
      p.val_fraction = r.get_float("data.val_fraction");
      p.seed = run.seed;
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
    run.train_loader = make_pretrain_loader(train, run.seq_len, run.seed, true);
    if (train->meta().val.tokens > run.seq_len) {
      auto val = std::make_shared<const TokenDataset>(TokenDataset::open(dir, "val"));
      run.make_val_loader = [val, seq = run.seq_len, seed = run.seed] {
        return make_pretrain_loader(val, seq, seed, false);
      };
    } else {
      log::warn("data: ", dir, " has no validation split longer than one sequence; no val_loss");
    }
    log::info("data: ", dir, ": train ", human_count(double(train->num_tokens())), " tokens (",
              run.train_loader->rows_per_epoch(), " sequences of ", run.seq_len, "), val ",
              human_count(double(train->meta().val.tokens)), " tokens");
  } else if (kind == "sft") {
    STRATA_CHECK(run.tokenizer, r.where("data.tokenizer"), ": SFT needs a tokenizer");
    const std::string path = r.get_string("data.sft_train");
    if (path.empty()) r.fail("data.sft_train", "an SFT run needs a JSONL file");
    if (!fs::exists(path)) r.fail("data.sft_train", cat("no such file: ", path));
    const ChatTemplate tmpl;
    const int32_t pad = run.tokenizer->eos_id() >= 0 ? run.tokenizer->eos_id() : 0;
    auto train = SftDataset::load_jsonl(path, *run.tokenizer, tmpl);
    // Rows keep the first seq_len + 1 tokens: an example whose response starts
    // later contributes nothing.
    int64_t lost = 0;
    for (const SftExample& e : train->examples()) {
      const size_t n = std::min(e.loss.size(), size_t(run.seq_len) + 1);
      lost += std::find(e.loss.begin(), e.loss.begin() + n, uint8_t(1)) == e.loss.begin() + n;
    }
    if (lost == int64_t(train->examples().size()) && !r.get_bool("data.packing"))
      r.fail("training.seq_len", cat("every example of ", path, " is cut before its response at ",
                                     run.seq_len, " tokens; raise training.seq_len"));
    if (lost && !r.get_bool("data.packing"))
      log::warn("data: ", lost, " of ", train->examples().size(), " examples of ", path,
                " are cut before their response at ", run.seq_len, " tokens (no loss from them)");
    run.train_loader =
        make_sft_loader(train, run.seq_len, run.seed, r.get_bool("data.packing"), pad);
    const std::string val_path = r.get_string("data.sft_val");
    if (!val_path.empty()) {
      if (!fs::exists(val_path)) r.fail("data.sft_val", cat("no such file: ", val_path));
      auto val = SftDataset::load_jsonl(val_path, *run.tokenizer, tmpl);
      run.make_val_loader = [val, seq = run.seq_len, seed = run.seed, pad,
                             packing = r.get_bool("data.packing")] {
        return make_sft_loader(val, seq, seed, packing, pad);
      };
    }
    log::info("data: SFT ", path, ": ", train->examples().size(), " conversations",
              r.get_bool("data.packing") ? " (packed)" : "");
  } else {
    r.fail("data.kind", cat("unknown kind '", kind, "' (pretrain or sft)"));
  }
}

std::string find_resume_checkpoint(const Run& run) {
  const std::string mode = run.r.get_string("checkpoint.resume");
  if (mode == "none") return "";
  if (mode == "auto") {
    const auto ckpts = list_checkpoints(run.dir);
    return ckpts.empty() ? "" : ckpts.back().second;
  }
  if (!fs::exists(mode)) run.r.fail("checkpoint.resume", cat("no such checkpoint: ", mode));
  return mode;
}

// The process grid (alone: one process), before anything else: every rank
// sees the same recipe, so recipe errors are the same on every rank.
void setup_grid(Run& run) {
  const Recipe& r = run.r;
  const int tp = positive(r, "parallelism.tp");
  const int64_t dp = r.get_int("parallelism.dp");
  if (dp < 0) r.fail("parallelism.dp", cat("must be >= 0 (0: world size / tp), got ", dp));
  run.zero = int(r.get_int("parallelism.zero"));
  if (run.zero != 0 && run.zero != 1)
    r.fail("parallelism.zero", cat("must be 0 or 1 (ZeRO stage 1), got ", run.zero));
  try {
    run.grid = make_grid(tp, int(dp));
  } catch (const Error& e) {
    r.fail(r.given("parallelism.dp") ? "parallelism.dp" : "parallelism.tp", e.what());
  }
  auto wrap = [](std::unique_ptr<Communicator>& c) {
    auto timed = std::make_unique<TimedComm>(std::move(c));
    TimedComm* raw = timed.get();
    c = std::move(timed);
    return raw;
  };
  run.tp = wrap(run.grid.tp_comm);
  run.dp = wrap(run.grid.dp_comm);
  // One rank speaks for the job; the others only report errors.
  if (!run.root()) log::set_level(log::Level::Error);
}

// Reads tensors `tensors` of checkpoint group `group` into this rank's parts.
void read_parts(const Run& run, const CheckpointReader& reader, const std::string& group,
                const std::vector<int>& tensors, const std::function<float*(int)>& dst) {
  read_tensor_parts(reader, group, run.model->layout(), tensors, dst);
}

// ZeRO-1: each trainable tensor's optimizer state lives on one data-parallel
// rank, the largest tensors first to the least loaded rank (deterministic, the
// same on every rank). Without ZeRO every rank owns every trainable tensor.
void assign_owners(Run& run, const std::vector<bool>& trainable) {
  const ParamLayout& L = run.model->layout();
  const int n = int(L.tensors().size());
  run.owner.assign(size_t(n), -1);
  if (!run.zero || run.grid.dp == 1) {
    for (int t = 0; t < n; ++t)
      if (trainable[size_t(t)]) run.owner[size_t(t)] = run.grid.dp_rank;
    return;
  }
  std::vector<int> order;
  for (int t = 0; t < n; ++t)
    if (trainable[size_t(t)]) order.push_back(t);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return L[a].numel > L[b].numel; });
  std::vector<int64_t> load(size_t(run.grid.dp), 0);
  for (int t : order) {
    const auto it = std::min_element(load.begin(), load.end());
    run.owner[size_t(t)] = int(it - load.begin());
    *it += L[t].numel;
  }
}

void setup(Run& run) {
  const Recipe& r = run.r;
  if (r.get_int("run.threads") > 0) set_num_threads(int(r.get_int("run.threads")));
  setup_grid(run);
  run.seed = uint64_t(r.get_int("run.seed"));
  run.steps = positive(r, "training.steps");
  run.micro_batch = positive(r, "training.micro_batch_size");
  run.seq_len = positive(r, "training.seq_len", 2);
  run.accum = positive(r, "training.grad_accum_steps");
  if (r.get_string("optimizer.name") != "adamw")
    r.fail("optimizer.name",
           cat("unknown optimizer '", r.get_string("optimizer.name"), "' (adamw)"));
  run.schedule.kind = r.get_string("lr_scheduler.kind");
  run.schedule.lr = r.get_float("optimizer.lr");
  run.schedule.min_lr = r.get_float("lr_scheduler.min_lr");
  run.schedule.warmup_steps = r.get_int("lr_scheduler.warmup_steps");
  run.schedule.decay_steps =
      r.get_int("lr_scheduler.decay_steps") > 0 ? r.get_int("lr_scheduler.decay_steps") : run.steps;
  try {
    run.schedule.validate();
  } catch (const Error& e) {
    r.fail("lr_scheduler.kind", e.what());
  }
  for (const char* k : {"checkpoint.interval", "checkpoint.keep", "eval.interval", "eval.batches"})
    positive(r, k, 0);
  positive(r, "log.interval");

  run.dir = r.get_string("run.dir").empty() ? "runs/" + r.get_string("run.name")
                                            : r.get_string("run.dir");
  if (run.root()) {
    fs::create_directories(run.dir);
    write_file_atomic(run.dir + "/recipe.toml", r.to_toml());
  }
  run.metrics_path = run.dir + "/metrics.jsonl";

  // Where the weights come from: a checkpoint of this run (resume), another
  // run's checkpoint (init_from), or a fresh initialisation.
  const std::string resume = find_resume_checkpoint(run);
  const std::string init_from = r.get_string("model.init_from");
  if (!init_from.empty() && !fs::exists(init_from))
    r.fail("model.init_from", cat("no such checkpoint: ", init_from));
  const std::string source = !resume.empty() ? resume : init_from;
  std::unique_ptr<CheckpointReader> reader;
  CheckpointInfo info;
  if (!source.empty()) {
    reader = std::make_unique<CheckpointReader>(source);
    info = read_checkpoint_info(*reader);
  }

  // Tokenizer: the recipe's, else the checkpoint's.
  if (!r.get_string("data.tokenizer").empty()) {
    if (!fs::exists(r.get_string("data.tokenizer")))
      r.fail("data.tokenizer", cat("no such file: ", r.get_string("data.tokenizer")));
    run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(r.get_string("data.tokenizer")));
  } else if (!info.tokenizer.empty()) {
    run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_bytes(info.tokenizer, source));
  }

  if (run.tokenizer && run.root())
    write_file_atomic(run.dir + "/tokenizer.model", run.tokenizer->model_bytes());

  // Model.
  LlamaConfig cfg;
  LayerPlan plan;
  if (reader) {
    cfg = info.config;
    plan = info.plan;
    // A new plan on the weights of another run is how a model is converted
    // (init_from); a resumed run keeps its own checkpoint's plan.
    const bool new_plan = resume.empty() && !r.get_string("model.plan").empty();
    if (new_plan) {
      try {
        plan = LayerPlan::parse(r.get_string("model.plan"), cfg.num_hidden_layers);
      } catch (const Error& e) {
        r.fail("model.plan", e.what());
      }
      log::info("plan: ", plan.to_string(), " on the weights of ", source, " (trained as ",
                info.plan.to_string(), ")");
    }
    std::string ignored;
    for (const KeySpec& k : train_recipe_schema())
      if (k.path.rfind("model.", 0) == 0 && k.path != "model.init_from" &&
          !(new_plan && k.path == "model.plan") && r.given(k.path))
        ignored += (ignored.empty() ? "" : ", ") + k.path;
    if (!ignored.empty()) log::warn("the model comes from ", source, "; ignoring ", ignored);
  } else {
    cfg = model_config_from_recipe(r, run.tokenizer.get(), run.seq_len);
    try {
      plan = r.get_string("model.plan").empty()
                 ? LayerPlan::standard(cfg.num_hidden_layers)
                 : LayerPlan::parse(r.get_string("model.plan"), cfg.num_hidden_layers);
    } catch (const Error& e) {
      r.fail("model.plan", e.what());
    }
  }
  if (run.seq_len > cfg.max_position_embeddings)
    r.fail("training.seq_len", cat(run.seq_len, " exceeds the model's max_position_embeddings (",
                                   cfg.max_position_embeddings, ")"));
  if (run.grid.tp > 1 && !r.get_strings("eval.tasks").empty())
    r.fail("eval.tasks", cat("benchmark tasks during training need parallelism.tp = 1 (this run: ",
                             run.grid.tp, "); evaluate the checkpoints with `strata eval`"));
  try {
    run.model = std::make_unique<Model<float>>(cfg, plan, ops::make_backend<float>(),
                                               run.grid.tp > 1 ? run.tp : nullptr);
  } catch (const Error& e) {
    r.fail("parallelism.tp", e.what());
  }
  std::string precision = r.get_string("training.precision");
  ops::MatmulPrecision matmul = ops::MatmulPrecision::FP32;
  if (!ops::parse_matmul_precision(precision, run.model->backend().native_bf16(), &matmul))
    r.fail("training.precision", cat("unknown precision '", precision, "' (fp32, bf16 or auto)"));
  if (precision == "auto") {
    // bf16 only where every process has native bf16 matmuls (nodes may differ).
    const int64_t native = run.model->backend().native_bf16();
    const int64_t all = run.world() > 1 ? run.grid.world->allreduce_sum(native) : native;
    matmul = all == run.world() ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
    precision = cat("auto -> ", matmul == ops::MatmulPrecision::BF16 ? "bf16" : "fp32");
  }
  run.model->backend().set_matmul_precision(matmul);
  LayerSkipConfig& ls = run.layerskip;
  ls.p_max = r.get_float("layerskip.p_max");
  ls.layer_scale = r.get_string("layerskip.layer_scale");
  ls.time_scale = r.get_string("layerskip.time_scale");
  ls.e_scale = r.get_float("layerskip.e_scale");
  ls.curriculum = r.get_string("layerskip.curriculum");
  ls.rotation = int(r.get_int("layerskip.rotation"));
  ls.always_last = r.get_bool("layerskip.always_last");
  ls.e_formula = r.get_string("layerskip.e_formula");
  ls.validate(cfg.num_hidden_layers, r.files().back());
  if (ls.enabled())
    log::info("layerskip: layer dropout p_max ", ls.p_max, " (", ls.layer_scale, " over layers, ",
              ls.time_scale, " over time); early exit ",
              ls.early_exit()
                  ? cat("e_scale ", ls.e_scale, ", curriculum ", ls.curriculum,
                        ls.curriculum == "rotational" ? cat(" R=", ls.rotation) : "",
                        ls.always_last ? ", last layer always on" : "", ", e(l) ", ls.e_formula)
                  : std::string("off"));
  const int n_tensors = int(run.model->layout().tensors().size());
  if (reader) {
    std::vector<int> all(static_cast<size_t>(n_tensors));
    for (int t = 0; t < n_tensors; ++t) all[size_t(t)] = t;
    read_parts(run, *reader, "params", all, [&](int t) { return run.model->param(t); });
  } else
    run.model->init_weights(run.seed);

  std::vector<std::string> names;
  for (const auto& t : run.model->layout().tensors()) names.push_back(t.name);
  const auto mask =
      resolve_trainable(names, r.get_strings("training.trainable"),
                        r.get_strings("training.freeze"), r.where("training.trainable"));
  run.model->set_trainable(mask);
  AdamWConfig oc;
  oc.lr = run.schedule.lr;
  oc.beta1 = r.get_float("optimizer.beta1");
  oc.beta2 = r.get_float("optimizer.beta2");
  oc.eps = r.get_float("optimizer.eps");
  oc.weight_decay = r.get_float("optimizer.weight_decay");
  oc.grad_clip = r.get_float("training.grad_clip");
  assign_owners(run, mask);
  std::vector<bool> owned(mask.size());
  for (size_t t = 0; t < mask.size(); ++t) owned[t] = run.owner[t] == run.grid.dp_rank;
  run.opt =
      std::make_unique<AdamW<float>>(run.model->backend(), run.model->layout(), oc, mask, owned);
  if (run.grid.tp > 1) run.opt->set_tp_comm(run.tp);
  // The moments this rank holds, read from a checkpoint.
  std::vector<int> stateful;
  for (int t = 0; t < n_tensors; ++t)
    if (run.opt->has_state(t)) stateful.push_back(t);
  auto read_moments = [&](const CheckpointReader& rd) {
    read_parts(run, rd, "optimizer/exp_avg", stateful, [&](int t) { return run.opt->exp_avg(t); });
    read_parts(run, rd, "optimizer/exp_avg_sq", stateful,
               [&](int t) { return run.opt->exp_avg_sq(t); });
  };

  // Every rank reads the run directory's files from here on.
  if (run.world() > 1) run.grid.world->barrier();

  setup_data(run);

  if (!resume.empty()) {
    STRATA_CHECK(reader->has_optimizer(), resume, ": has no optimizer state to resume from");
    read_moments(*reader);
    run.opt->set_steps_taken(reader->optimizer_step());
    run.step = info.state.value("step", int64_t(0));
    run.tokens_seen = info.state.value("tokens_seen", int64_t(0));
    STRATA_CHECK(info.state.contains("loader"), resume, ": state has no data loader position");
    run.train_loader->set_state(info.state["loader"]);
    if (run.root()) truncate_metrics(run.metrics_path, run.step);
    log::info("resume: ", resume, " at step ", run.step);
  } else {
    if (!init_from.empty() && r.get_bool("optimizer.load_state")) {
      STRATA_CHECK(reader->has_optimizer(), init_from,
                   ": has no optimizer state (optimizer.load_state = true)");
      read_moments(*reader);
      run.opt->set_steps_taken(reader->optimizer_step());
    }
    if (run.root()) std::remove(run.metrics_path.c_str());
    if (!init_from.empty()) log::info("init: weights from ", init_from);
  }

  int64_t n_train = 0;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) n_train += full_numel(run.model->layout()[int(i)]);
  log::info("model: ", cfg.num_hidden_layers, " layers, hidden ", cfg.hidden_size, ", heads ",
            cfg.num_attention_heads, "/", cfg.num_key_value_heads, ", vocab ", cfg.vocab_size, ", ",
            human_count(double(cfg.num_parameters())), " parameters (",
            human_count(double(n_train)), " trainable), plan ", plan.to_string(), ", ", precision,
            " matmuls");
  if (run.world() > 1) {
    int64_t state = 0;
    for (int t = 0; t < n_tensors; ++t)
      if (run.opt->has_state(t)) state += run.model->layout()[t].numel;
    log::info("parallel: ", run.world(), " processes (", run.grid.world->name(), ") = dp ",
              run.grid.dp, " x tp ", run.grid.tp, "; rank 0 holds ",
              human_count(double(run.model->num_params())), " parameters and ",
              human_count(double(state)), " optimizer moments", run.zero ? " (ZeRO-1)" : "",
              "; global batch ", int64_t(run.micro_batch) * run.grid.dp * run.accum, " sequences");
  }
}

double evaluate(Run& run, int batches) {
  if (!run.make_val_loader || batches <= 0) return -1;
  auto loader = run.make_val_loader();
  // Each data-parallel rank scores its slice of every global batch.
  const int64_t available = loader->rows_per_epoch() / (int64_t(run.micro_batch) * run.grid.dp);
  const int n = int(std::max<int64_t>(1, std::min<int64_t>(batches, available)));
  Batch b;
  double sum = 0;
  int64_t count = 0;
  for (int i = 0; i < n; ++i) {
    loader->next(run.micro_batch, b, run.grid.dp_rank, run.grid.dp);
    const LossResult res = run.model->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    sum += res.loss_sum;
    count += res.n_valid;
  }
  if (run.grid.dp > 1) {
    sum = run.dp->allreduce_sum(sum);
    count = run.dp->allreduce_sum(count);
  }
  return count ? sum / double(count) : -1;
}

// Benchmark tasks during training ([eval] tasks): one line per task on
// stderr, "eval/<task>/<metric>" entries in the metrics record.
void run_eval_tasks(Run& run, nlohmann::json& record) {
  STRATA_CHECK(run.tokenizer, "eval.tasks needs a tokenizer");
  EvalOptions o;
  o.tasks = run.r.get_strings("eval.tasks");
  o.limit = run.r.get_int("eval.task_limit");
  o.shots = int(run.r.get_int("eval.task_shots"));
  o.eval_dir = run.r.get_string("eval.task_dir");
  o.batch_size = run.micro_batch;
  o.seed = run.seed;
  o.progress = false;
  Timer t;
  const auto results = evaluate_tasks(*run.model, *run.tokenizer, o);
  std::string line;
  for (const TaskResult& tr : results.back()) {
    line += (line.empty() ? "" : " | ") + tr.task;
    for (const Metric& mt : tr.metrics) {
      record["eval/" + tr.task + "/" + mt.name] = mt.value;
      line += cat(" ", mt.name, " ", mt.value);
    }
  }
  if (run.root())
    std::fprintf(stderr, "tasks step %lld | %s | %.1fs\n", (long long)run.step, line.c_str(),
                 t.seconds());
}

std::string save(Run& run) {
  CheckpointData d;
  d.config = run.model->config().to_json();
  d.plan = run.model->plan().to_string();
  d.recipe = run.r.to_toml();
  d.state = {{"step", run.step},
             {"tokens_seen", run.tokens_seen},
             {"loader", run.train_loader->state()},
             {"run_name", run.r.get_string("run.name")},
             {"seed", run.seed}};
  if (run.tokenizer) d.tokenizer = run.tokenizer->model_bytes();
  d.optimizer_step = run.opt->steps_taken();
  const std::string path = checkpoint_path(run.dir, run.step);
  if (run.world() == 1) {
    d.params = param_refs(*run.model);
    d.exp_avg = moment_refs(*run.model, *run.opt, false);
    d.exp_avg_sq = moment_refs(*run.model, *run.opt, true);
    write_checkpoint(path, d);
    prune_checkpoints(run.dir, int(run.r.get_int("checkpoint.keep")));
    return path;
  }
  // Checkpoints hold full tensors: the tensor-parallel group of data-parallel
  // rank 0 assembles them (moments first from their ZeRO-1 owners), and world
  // rank 0, a member of it, writes the file.
  const ParamLayout& L = run.model->layout();
  const bool assemble = run.grid.dp_rank == 0;
  std::vector<std::vector<float>> store;  // the full tensors (moved vectors keep their data)
  auto full = [&](int t, const float* part) {
    std::vector<float> f(size_t(full_numel(L[t])));
    gather_full_tensor(L, t, part, f.data(), *run.tp);
    store.push_back(std::move(f));
    return TensorRef{L[t].name, L[t].full_shape, store.back().data()};
  };
  const int n = int(L.tensors().size());
  if (assemble)
    for (int t = 0; t < n; ++t) d.params.push_back(full(t, run.model->param(t)));
  std::vector<float> m, v;
  for (int t = 0; t < n; ++t) {
    if (run.owner[size_t(t)] < 0) continue;  // frozen: no optimizer state
    const ParamInfo& p = L[t];
    m.assign(size_t(p.numel), 0.f);
    v.assign(size_t(p.numel), 0.f);
    if (run.opt->has_state(t)) {
      run.model->backend().to_host(m.data(), run.opt->exp_avg(t), p.numel);
      run.model->backend().to_host(v.data(), run.opt->exp_avg_sq(t), p.numel);
    }
    if (run.zero && run.grid.dp > 1) {
      run.dp->broadcast(m.data(), p.numel, run.owner[size_t(t)]);
      run.dp->broadcast(v.data(), p.numel, run.owner[size_t(t)]);
    }
    if (assemble) {
      d.exp_avg.push_back(full(t, m.data()));
      d.exp_avg_sq.push_back(full(t, v.data()));
    }
  }
  if (run.root()) {
    write_checkpoint(path, d);
    prune_checkpoints(run.dir, int(run.r.get_int("checkpoint.keep")));
  }
  run.grid.world->barrier();  // the file is complete before any rank goes on
  return path;
}

void append_metrics(const Run& run, const nlohmann::json& j) {
  if (!run.root()) return;
  std::ofstream f(run.metrics_path, std::ios::app);
  f << j.dump() << "\n";
}

}  // namespace

TrainResult train(const Recipe& recipe) {
  Run run(recipe);
  setup(run);
  const Recipe& r = recipe;
  TrainResult result;
  result.run_dir = run.dir;
  const int64_t ckpt_interval = r.get_int("checkpoint.interval");
  const int64_t eval_interval = r.get_int("eval.interval");
  const int64_t log_interval = r.get_int("log.interval");
  const int eval_batches = int(r.get_int("eval.batches"));
  log::info("train: run '", r.get_string("run.name"), "' in ", run.dir, ": steps ", run.step,
            " -> ", run.steps, ", ", run.micro_batch, " x ", run.seq_len, " tokens x ", run.accum,
            " accumulation, ", num_threads(), " threads");

  StopScope stop_scope;  // SIGINT / SIGTERM: finish the step, save, return
  std::vector<Batch> micro(run.accum);
  Timer total_timer, window_timer;
  int64_t window_tokens = 0, run_tokens = 0;
  const int64_t first_step = run.step;
  double window_loss = 0;
  int window_steps = 0;
  // Data parallelism: on the last micro-batch of a step, each range of
  // gradients is summed over the dp group as soon as backward has finished it
  // (one bucket per layer), overlapping the all-reduce with the rest of the
  // backward; the step waits for them before the optimizer.
  const bool dp_sync = run.grid.dp > 1;
  std::vector<int64_t> pending;
  // The outstanding all-reduces advance between the kernels of backward: with
  // one thread per rank (MPI_THREAD_FUNNELED) nothing else drives them while
  // compute runs. STRATA_PROGRESS_POLLS=0 turns the polls off (to measure them).
  const char* polls_env = std::getenv("STRATA_PROGRESS_POLLS");
  const bool polls = !(polls_env && std::string(polls_env) == "0");
  if (dp_sync && polls) run.model->set_progress_hook([&] { run.dp->progress(); });
  const std::function<void(int64_t, int64_t)> on_grads_ready = [&](int64_t offset, int64_t n) {
    pending.push_back(run.dp->allreduce_sum_async(run.model->grads() + offset, n));
    if (polls) run.dp->progress();
  };
  double window_comm = 0, window_wall = 0, run_comm = 0, run_wall = 0;
  double window_grad_wait = 0, window_poll = 0;  // parts of window_comm (dp all-reduces)
  // LayerSkip: this step's summed CE per exit, and the logging window's means.
  const LayerSkipConfig& ls = run.layerskip;
  const int L = run.model->config().num_hidden_layers;
  std::vector<double> exit_sum(static_cast<size_t>(L), 0.0),
      window_exit(static_cast<size_t>(L), 0.0);
  std::vector<int> window_exit_n(size_t(L), 0);
  std::vector<bool> exit_on(static_cast<size_t>(L), false);
  const bool debug_masks = std::getenv("STRATA_DEBUG_LAYERSKIP") != nullptr;
  // STRATA_DEBUG_DP_WAIT: a barrier before the gradient waits, and per rank and
  // step the time in it (the ranks' imbalance), the waits after it (the
  // all-reduces' own tail) and the polls (README, "Cost of communication").
  const bool debug_dp_wait = std::getenv("STRATA_DEBUG_DP_WAIT") != nullptr;
  while (run.step < run.steps) {
    Timer step_timer;
    const double comm_before = run.tp->seconds() + run.dp->seconds();
    const double wait_before = run.dp->wait_seconds(), poll_before = run.dp->progress_seconds();
    const double lr = run.schedule.at(run.step);
    int64_t n_valid = 0;
    for (auto& b : micro) {
      run.train_loader->next(run.micro_batch, b, run.grid.dp_rank, run.grid.dp);
      n_valid += b.count_targets();
    }
    if (dp_sync) n_valid = run.dp->allreduce_sum(n_valid);  // the loss is a global mean
    run.model->zero_grad();
    double loss_sum = 0;
    std::fill(exit_sum.begin(), exit_sum.end(), 0.0);
    std::fill(exit_on.begin(), exit_on.end(), false);
    // The step's exit weights (the same for all its micro-batches).
    const std::vector<double> exit_weight =
        ls.enabled() ? layerskip_exit_weights(ls, L, run.step, run.steps) : std::vector<double>();
    for (size_t i = 0; i < micro.size(); ++i) {
      if (dp_sync)
        run.model->set_grad_ready_hook(
            i + 1 == micro.size() ? on_grads_ready : std::function<void(int64_t, int64_t)>());
      const Batch& b = micro[i];
      LayerSkipStep skip;
      if (ls.enabled()) {
        // Global sample index: micro-batch i of the step, dp rank, row.
        const int64_t first = (int64_t(i) * run.grid.dp + run.grid.dp_rank) * b.B;
        skip.keep = layerskip_keep_masks(ls, L, run.step, run.steps, run.seed, first, b.B);
        skip.exit_weight = exit_weight;
        if (debug_masks) {  // for tests: every rank prints digests of its masks and of
                            // the whole global micro-batch's (which it can compute too)
          auto digest = [](const std::vector<std::vector<uint8_t>>& keep) {
            std::string bits;
            for (const auto& k : keep) bits.append(k.begin(), k.end());
            return sha256_hex(bits).substr(0, 16);
          };
          const auto global =
              layerskip_keep_masks(ls, L, run.step, run.steps, run.seed,
                                   int64_t(i) * run.grid.dp * b.B, b.B * run.grid.dp);
          std::fprintf(stderr,
                       "layerskip masks: rank %d dp %d step %lld micro %zu local %s global %s\n",
                       run.grid.world_rank, run.grid.dp_rank, (long long)run.step + 1, i,
                       digest(skip.keep).c_str(), digest(global).c_str());
        }
      }
      const LossResult res = run.model->forward_backward(b.tokens.data(), b.targets.data(), b.B,
                                                         b.T, n_valid ? 1.0 / double(n_valid) : 0.0,
                                                         ls.enabled() ? &skip : nullptr);
      loss_sum += res.loss_sum;
      if (ls.early_exit())
        for (int l = 0; l < L; ++l)
          if (!std::isnan(res.exit_loss_sum[size_t(l)])) {
            exit_sum[size_t(l)] += res.exit_loss_sum[size_t(l)];
            exit_on[size_t(l)] = true;
          }
    }
    if (dp_sync) {
      if (debug_dp_wait) {  // separate rank imbalance from the all-reduces' own tail
        const double wait0 = run.dp->wait_seconds();
        Timer bt;
        run.dp->barrier();
        const double imbalance = bt.seconds();
        for (int64_t h : pending) run.dp->wait(h);
        std::fprintf(stderr,
                     "dp wait: rank %d step %lld | imbalance %.1f ms | all-reduce tail %.1f ms | "
                     "polls %.1f ms\n",
                     run.grid.dp_rank, (long long)run.step + 1, 1e3 * imbalance,
                     1e3 * (run.dp->wait_seconds() - wait0),
                     1e3 * (run.dp->progress_seconds() - poll_before));
      }
      for (int64_t h : pending) run.dp->wait(h);
      pending.clear();
      loss_sum = run.dp->allreduce_sum(loss_sum);
      if (ls.early_exit())
        for (int l = 0; l < L; ++l)
          if (exit_on[size_t(l)]) exit_sum[size_t(l)] = run.dp->allreduce_sum(exit_sum[size_t(l)]);
    }
    if (ls.early_exit())
      for (int l = 0; l < L; ++l)
        if (exit_on[size_t(l)] && n_valid) {
          window_exit[size_t(l)] += exit_sum[size_t(l)] / double(n_valid);
          ++window_exit_n[size_t(l)];
        }
    const double loss = n_valid ? loss_sum / double(n_valid) : 0.0;
    STRATA_CHECK(std::isfinite(loss), "training diverged: loss is ", loss, " at step ",
                 run.step + 1, " (lower optimizer.lr or raise lr_scheduler.warmup_steps)");
    const double gnorm = run.opt->step(run.model->params(), run.model->grads(), lr);
    if (run.zero && dp_sync)  // ZeRO-1: each tensor's owner sends its update to the others
      for (size_t t = 0; t < run.owner.size(); ++t)
        if (run.owner[t] >= 0)
          run.dp->broadcast(run.model->param(int(t)), run.model->layout()[int(t)].numel,
                            run.owner[t]);
    ++run.step;
    const double step_comm = run.tp->seconds() + run.dp->seconds() - comm_before;
    const double step_wall = step_timer.seconds();
    window_comm += step_comm;
    window_grad_wait += run.dp->wait_seconds() - wait_before;
    window_poll += run.dp->progress_seconds() - poll_before;
    window_wall += step_wall;
    run_comm += step_comm;
    run_wall += step_wall;
    const int64_t step_tokens = int64_t(run.accum) * run.micro_batch * run.grid.dp * run.seq_len;
    run.tokens_seen += step_tokens;
    window_tokens += step_tokens;
    run_tokens += step_tokens;
    window_loss += loss;
    ++window_steps;
    result.losses.push_back(loss);
    result.last_loss = loss;

    const bool last = run.step == run.steps;
    // Every rank stops at the same step (a signal may reach them at different
    // times), so they all take part in the final checkpoint.
    int stop_signal = StopScope::signal();
    if (run.world() > 1) {  // high half: ranks with a signal; low half: their signal numbers
      const int64_t sum =
          run.grid.world->allreduce_sum((int64_t(stop_signal != 0) << 32) | int64_t(stop_signal));
      const int64_t ranks = sum >> 32;
      stop_signal = ranks ? int((sum & 0xffffffff) / ranks) : 0;
    }
    const bool stopping = stop_signal != 0;
    const bool do_log = run.step % log_interval == 0 || last || stopping;
    const bool do_eval = (eval_interval > 0 && run.step % eval_interval == 0) || last;
    nlohmann::json m;
    if (do_log) {
      const double tps = double(window_tokens) / window_timer.seconds();
      const double elapsed = total_timer.seconds();
      const double eta = elapsed / double(run.step - first_step) * double(run.steps - run.step);
      std::string comm =
          run.world() > 1 ? cat(" | comm ", int(std::lround(100 * window_comm / window_wall)), "%")
                          : std::string();
      // Early exits: the window's mean loss at each exit that had one (exit
      // E = output of layer E, 1-based).
      nlohmann::json exits = nlohmann::json::object();
      std::string exit_line;
      for (int l = 0; l < L; ++l)
        if (window_exit_n[size_t(l)]) {
          const double v = window_exit[size_t(l)] / window_exit_n[size_t(l)];
          exits[std::to_string(l + 1)] = v;
          char buf[32];
          std::snprintf(buf, sizeof buf, " %d:%.3f", l + 1, v);
          exit_line += buf;
        }
      // (Printed when an exit below the last layer had a loss.)
      if (exits.size() > 1 || (exits.size() == 1 && !exits.contains(std::to_string(L))))
        comm = " | exits" + exit_line + comm;
      std::fill(window_exit.begin(), window_exit.end(), 0.0);
      std::fill(window_exit_n.begin(), window_exit_n.end(), 0);
      if (run.root())
        std::fprintf(stderr,
                     "step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s%s | %s | "
                     "ETA %s\n",
                     (long long)run.step, (long long)run.steps, window_loss / window_steps, lr,
                     gnorm, tps, comm.c_str(), human_time(elapsed).c_str(),
                     human_time(eta).c_str());
      m = {{"step", run.step},    {"loss", loss},        {"lr", lr},
           {"grad_norm", gnorm},  {"tokens_per_s", tps}, {"tokens", run.tokens_seen},
           {"elapsed_s", elapsed}};
      if (!exits.empty()) m["exit_loss"] = exits;
      m["step_s"] = window_wall / window_steps;  // wall time per step, of which
      m["comm_s"] = window_comm / window_steps;  // waiting in collectives
      if (dp_sync) {  // of which: the gradient all-reduces' tail after backward, and polls
        m["grad_wait_s"] = window_grad_wait / window_steps;
        m["poll_s"] = window_poll / window_steps;
      }
      window_comm = window_wall = window_grad_wait = window_poll = 0;
      window_tokens = 0;
      window_loss = 0;
      window_steps = 0;
      window_timer.reset();
    }
    if (do_eval && run.make_val_loader) {
      Timer t;
      const double val = evaluate(run, eval_batches);
      result.last_val_loss = val;
      if (run.root())
        std::fprintf(stderr, "eval  step %lld | val_loss %.4f | val_ppl %.2f | %.1fs\n",
                     (long long)run.step, val, std::exp(val), t.seconds());
      if (m.is_null()) m = {{"step", run.step}, {"loss", loss}, {"lr", lr}};
      m["val_loss"] = val;
      window_timer.reset();  // keep evaluation out of the training throughput
    }
    if (do_eval && !r.get_strings("eval.tasks").empty()) {
      if (m.is_null()) m = {{"step", run.step}, {"loss", loss}, {"lr", lr}};
      run_eval_tasks(run, m);
      window_timer.reset();
    }
    if (!m.is_null()) append_metrics(run, m);
    const bool do_ckpt = (ckpt_interval > 0 && run.step % ckpt_interval == 0) ||
                         (last && r.get_bool("checkpoint.final")) || stopping;
    if (do_ckpt) {
      result.last_checkpoint = save(run);
      log::info("checkpoint: ", result.last_checkpoint);
      window_timer.reset();
    }
    if (stopping) {
      result.stop_signal = stop_signal;
      log::info("stopped by signal ", stop_signal, " after step ", run.step,
                "; run the same command to resume");
      result.interrupted = true;
      break;
    }
  }
  result.steps_done = run.step;
  result.tokens_per_s = run_tokens ? double(run_tokens) / total_timer.seconds() : 0;
  const int64_t steps_run = run.step - first_step;
  if (steps_run > 0) {
    result.step_s = run_wall / double(steps_run);
    result.comm_s = run_comm / double(steps_run);
    if (run.world() == 1)
      log::info("time per step: ", fixed1(1e3 * result.step_s), " ms (one process)");
    else
      log::info("time per step: ", fixed1(1e3 * result.step_s), " ms = compute ",
                fixed1(1e3 * (result.step_s - result.comm_s)), " ms + communication ",
                fixed1(1e3 * result.comm_s), " ms (dp ", run.grid.dp, " x tp ", run.grid.tp,
                ", communication not hidden by compute)");
  }

  const std::string prompt = r.get_string("log.sample_prompt");
  if (!prompt.empty() && run.tokenizer && !result.interrupted && run.grid.tp == 1 && run.root()) {
    std::vector<int32_t> ids;
    if (run.tokenizer->bos_id() >= 0) ids.push_back(run.tokenizer->bos_id());
    const auto enc = run.tokenizer->encode(prompt);
    ids.insert(ids.end(), enc.begin(), enc.end());
    GenerateOptions g;
    g.max_new_tokens = int(r.get_int("log.sample_tokens"));
    g.sampling.temperature = r.get_float("log.sample_temperature");
    g.sampling.seed = run.seed;
    g.eos_id = run.tokenizer->eos_id();
    const auto out = generate_simple(*run.model, ids, g);
    const std::string text = prompt + run.tokenizer->decode(out);
    std::fprintf(stderr, "sample (temperature %.2f):\n%s\n", g.sampling.temperature, text.c_str());
    write_file_atomic(run.dir + "/sample.txt", text + "\n");
  }
  log::info("done: ", run.step, " steps, last loss ", result.last_loss,
            result.last_val_loss >= 0 ? cat(", val_loss ", result.last_val_loss) : std::string(),
            ", ", static_cast<long>(result.tokens_per_s), " tokens/s");
  return result;
}

}  // namespace strata
