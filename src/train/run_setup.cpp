// `strata train`: from the recipe to a Run ready for its first step (run.h).

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
#include <limits>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/signals.h"
#include "core/text.h"
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
#include "model/memory.h"
#include "model/model.h"
#include "model/sharding.h"
#include "parallel/grid.h"
#include "parallel/timed_comm.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

#include "train/run.h"
#include "train/trainer.h"

namespace strata::train_internal {
namespace fs = std::filesystem;

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
    c = read_model_config(r, "model.config");
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
  if (run.zero < 0 || run.zero > 3)
    r.fail("parallelism.zero",
           cat("must be 0, 1, 2 or 3 (the ZeRO stage: what is sharded over the data-parallel "
               "ranks), got ",
               run.zero));
  try {
    run.grid = make_grid(tp, int(dp));
  } catch (const Error& e) {
    r.fail(r.given("parallelism.dp") ? "parallelism.dp" : "parallelism.tp", e.what());
  }
  // The device first: on GPUs the groups' collectives run on NCCL, ordered
  // after the backend's stream.
  std::string device = r.get_string("run.device");
  if (run.plan_memory && device != "cpu") {
    // Planning for other machines: their device need not be here.
    try {
      ops::resolve_device(device);
    } catch (const Error&) {
      log::info("plan: run.device '", device, "' is not on this machine; planning on the cpu");
      device = "cpu";
    }
  }
  try {
    run.device = ops::resolve_device(device);
    run.backend = ops::make_backend<float>(run.device);
    use_device_comms(run.grid, run.device, run.backend->stream(), ops::local_cuda_device());
  } catch (const Error& e) {
    r.fail("run.device", e.what());
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
  if (run.device != "cpu") log::info(ops::device_choice(device));
  if (run.zero > 0 && run.grid.dp == 1 && !run.plan_memory)
    log::warn("parallelism.zero = ", run.zero,
              " with one data-parallel rank shards nothing (ZeRO divides the state among the "
              "data-parallel ranks; run more processes, e.g. mpirun -np N)");
}

// Reads tensors `tensors` of checkpoint group `group` into this rank's parts.
void read_parts(const Run& run, const CheckpointReader& reader, const std::string& group,
                const std::vector<int>& tensors, const std::function<float*(int)>& dst) {
  read_tensor_parts(reader, group, run.model->layout(), tensors, dst, &run.model->backend());
}

// ZeRO-1: each trainable tensor's optimizer state lives on one data-parallel
// rank, the largest tensors first to the least loaded rank (deterministic, the
// same on every rank). Without ZeRO every rank owns every trainable tensor.
void assign_owners(Run& run, const std::vector<bool>& trainable) {
  const ParamLayout& L = run.model->layout();
  const int n = int(L.tensors().size());
  run.owner.assign(size_t(n), -1);
  if (run.zero != 1 || run.grid.dp == 1) {  // ZeRO-2/3 shard by bucket (model/zero.h)
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

// Memory, estimated from the configuration before the model is allocated:
// printed, and refused in one line (naming what to lower) when it cannot fit.
void check_train_memory(Run& run, const LlamaConfig& cfg, const LayerPlan& plan) {
  const Recipe& r = run.r;
  MemoryUse u;
  u.tp = run.grid.tp;
  run.memory_limit = ops::memory_available(run.device);
  const int procs = processes_on_this_node();
  const std::string what = cat(r.files().back(), ": training ",
                               human_count(double(cfg.num_parameters())), " parameters");
  // What spreads the model: ZeRO needs data-parallel ranks to shard over.
  const std::string spread =
      run.grid.dp == 1
          ? "or spread it over more processes (mpirun -np N) with parallelism.tp, or with "
            "parallelism.zero = 3 (each of N data-parallel ranks holds 1/N of the weights, "
            "gradients and moments)"
      : run.zero < 3
          ? cat("or raise parallelism.zero from ", run.zero,
                " (2: the gradients and moments sharded over the ", run.grid.dp,
                " data-parallel ranks, 3: the weights too), or spread it with parallelism.tp")
          : cat("or use more processes (ZeRO-3 already holds 1/", run.grid.dp,
                " of the weights, gradients and moments) or parallelism.tp");
  const std::string model_hint =
      cat("use a smaller model (model.hidden_size, model.num_hidden_layers), freeze tensors "
          "(training.freeze), ",
          spread);
  const bool patterns =
      !r.get_strings("training.trainable").empty() || !r.get_strings("training.freeze").empty();
  u.gradients = true;
  u.batch = run.micro_batch;
  u.seq = run.seq_len;
  if (!parse_recompute(r.get_string("training.recompute"), &u.recompute))
    r.fail("training.recompute", cat("unknown mode '", one_line(r.get_string("training.recompute")),
                                     "' (none, selective or full)"));
  u.optimizer_share = run.zero == 1 && run.grid.dp > 1 ? 1.0 / run.grid.dp : 1.0;
  // Without freeze patterns every tensor trains and this is the estimate;
  // with them, the weights alone first, so an absurd model is refused before
  // its layout is built to count the trainable share.
  if (patterns) {
    MemoryUse weights_only;
    weights_only.tp = u.tp;
    if (!run.plan_memory)
      check_memory(estimate_memory(cfg, plan, weights_only), run.memory_limit, procs, what,
                   model_hint);
  }
  // The optimizer holds two moments per trainable element (1/dp of them under ZeRO-1).
  double share = 1;
  if (patterns) try {
      const ParamLayout layout(cfg);
      std::vector<std::string> names;
      for (const auto& t : layout.tensors()) names.push_back(t.name);
      const auto mask = resolve_trainable(names, r.get_strings("training.trainable"),
                                          r.get_strings("training.freeze"), "");
      double n = 0;
      for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) n += double(layout[int(i)].numel);
      share = layout.total() > 0 ? n / double(layout.total()) : 1;
    } catch (const Error&) {
      // a bad pattern is reported, with its key, where the mask is set
    }
  run.trained_share = share;
  if (run.zero == 1 && run.grid.dp > 1) share /= run.grid.dp;
  u.optimizer_share = share;
  u.dp = run.grid.dp;
  u.zero = run.zero;
  run.memory = estimate_memory(cfg, plan, u);  // printed once the run starts
  const bool activations_first = run.memory.bytes_of("activations") * 2 > run.memory.total();
  run.planned_cfg = cfg;
  run.planned_plan = plan;
  run.planned_recompute = u.recompute;
  if (!run.plan_memory)
    check_memory(
        run.memory, run.memory_limit, procs, what,
        activations_first
            ? cat("lower training.micro_batch_size or training.seq_len (raise "
                  "training.grad_accum_steps to keep the batch)",
                  u.recompute == Recompute::Full ? "" : ", or set training.recompute = \"full\"")
            : model_hint);
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
  // Optimizer numbers: finite and in range, each named by its own key.
  auto in_range = [&](const char* key, double lo, double hi, bool lo_open, bool hi_open,
                      const char* what) {
    const double v = r.get_float(key);
    const bool ok =
        std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) r.fail(key, cat("must be ", what, ", got ", v));
  };
  const double inf = std::numeric_limits<double>::infinity();
  in_range("optimizer.lr", 0, inf, false, true, "finite and >= 0");
  in_range("lr_scheduler.min_lr", 0, inf, false, true, "finite and >= 0");
  in_range("optimizer.beta1", 0, 1, false, true, "in [0, 1)");
  in_range("optimizer.beta2", 0, 1, false, true, "in [0, 1)");
  in_range("optimizer.eps", 0, inf, true, true, "finite and > 0");
  in_range("optimizer.weight_decay", 0, inf, false, true, "finite and >= 0");
  in_range("training.grad_clip", 0, inf, false, true, "finite and >= 0 (0: no clipping)");
  if (r.get_int("lr_scheduler.decay_steps") < 0)
    r.fail("lr_scheduler.decay_steps",
           cat("must be >= 0 (0: training.steps), got ", r.get_int("lr_scheduler.decay_steps")));
  if (r.get_int("lr_scheduler.warmup_steps") < 0)
    r.fail("lr_scheduler.warmup_steps",
           cat("must be >= 0, got ", r.get_int("lr_scheduler.warmup_steps")));
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
  try {  // before anything is written: a task that runs code needs the recipe's permission
    require_code_permission(r.get_string("eval.task_dir"), r.get_strings("eval.tasks"),
                            r.get_bool("eval.allow_code_execution"),
                            "set eval.allow_code_execution = true");
  } catch (const Error& e) {
    r.fail("eval.tasks", e.what());
  }

  run.dir = r.get_string("run.dir").empty() ? "runs/" + r.get_string("run.name")
                                            : r.get_string("run.dir");
  run.metrics_path = run.dir + "/metrics.jsonl";

  // Where the weights come from: a checkpoint of this run (resume), another
  // run's checkpoint (init_from), or a fresh initialisation.
  const std::string resume = find_resume_checkpoint(run);
  std::string init_from = r.get_string("model.init_from");
  if (!init_from.empty() && !fs::exists(init_from)) {
    // Planning for other machines (--dry-run --plan-memory) needs the
    // model's shape only: model.config gives it where the weights are not here.
    if (!run.plan_memory || r.get_string("model.config").empty())
      r.fail("model.init_from",
             cat("no such checkpoint: ", init_from,
                 run.plan_memory ? " (to plan without it, give the model's shape in model.config)"
                                 : ""));
    log::info("plan: ", init_from, " is not on this machine; the model's shape comes from ",
              r.get_string("model.config"));
    init_from.clear();
  }
  const std::string source = !resume.empty() ? resume : init_from;
  std::unique_ptr<CheckpointReader> reader;
  CheckpointInfo info;
  if (!source.empty()) {
    reader = std::make_unique<CheckpointReader>(source);
    info = read_checkpoint_info(*reader);
  }
  if (!resume.empty()) {
    // The state is user-editable JSON: check it before trusting it.
    for (const char* key : {"step", "tokens_seen"}) {
      const auto it = info.state.find(key);
      if (it == info.state.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
        fail_one_line(resume, ": malformed checkpoint state: '", key,
                      "' must be a non-negative integer, got ",
                      it == info.state.end() ? std::string("nothing") : it->dump());
    }
    if (info.state["step"].get<int64_t>() > run.steps)
      fail_one_line(resume, " is at step ", info.state["step"].get<int64_t>(),
                    ", past training.steps = ", run.steps,
                    " (raise training.steps to continue, or set checkpoint.resume = \"none\" "
                    "to start over)");
  }

  // Tokenizer: the recipe's, else the checkpoint's.
  if (!r.get_string("data.tokenizer").empty()) {
    if (!fs::exists(r.get_string("data.tokenizer")))
      r.fail("data.tokenizer", cat("no such file: ", r.get_string("data.tokenizer")));
    run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(r.get_string("data.tokenizer")));
  } else if (!info.tokenizer.empty()) {
    run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_bytes(info.tokenizer, source));
  }

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
    // The checkpoint defines the model. Recipe keys that agree with it are
    // fine; ones that disagree are an error on resume (the run would
    // silently change architecture) and a warning with init_from.
    const nlohmann::json have = cfg.to_json();
    std::string differ;
    for (const KeySpec& k : train_recipe_schema()) {
      // (model.config is the shape to plan with where the checkpoint is absent.)
      if (k.path.rfind("model.", 0) != 0 || k.path == "model.init_from" ||
          k.path == "model.config" ||
          (new_plan && k.path == "model.plan") || !r.given(k.path))
        continue;
      const std::string name = k.path.substr(6);
      std::string want, got;
      if (k.path == "model.plan") {
        want = r.get_string(k.path), got = info.plan.to_string();
        try {
          want = LayerPlan::parse(want, cfg.num_hidden_layers).to_string();
        } catch (const Error&) {
        }
      } else if (!have.contains(name)) {
        want = "(set)", got = "(from the checkpoint)";
      } else if (k.type == KeyType::Int) {
        want = std::to_string(r.get_int(k.path)), got = have[name].dump();
      } else if (k.type == KeyType::Float) {
        const double a = r.get_float(k.path), b = have[name].get<double>();
        if (std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b))) continue;
        want = cat(a), got = cat(b);
      } else if (k.type == KeyType::Bool) {
        want = r.get_bool(k.path) ? "true" : "false", got = have[name].dump();
      } else {
        want = r.get_string(k.path),
        got = have[name].is_string() ? have[name].get<std::string>() : have[name].dump();
      }
      if (want != got)
        differ += cat(differ.empty() ? "" : ", ", k.path, " = ", want, " (checkpoint: ", got, ")");
    }
    if (!differ.empty() && !resume.empty())
      fail_one_line(resume, ": the recipe's model differs from the checkpoint's: ", differ,
                    " (a resumed run keeps its architecture: drop those keys, or use another "
                    "run.dir)");
    if (!differ.empty()) log::warn("the model comes from ", source, "; ignoring ", differ);
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
  try {
    plan.check_not_benchmark_only("training");
  } catch (const Error& e) {
    r.fail("model.plan", e.what());
  }
  if (run.seq_len > cfg.max_position_embeddings)
    r.fail("training.seq_len", cat(run.seq_len, " exceeds the model's max_position_embeddings (",
                                   cfg.max_position_embeddings, ")"));
  if (run.zero == 3 && !r.get_strings("eval.tasks").empty())
    r.fail("eval.tasks", "benchmark tasks during training need parallelism.zero < 3 (the "
                         "weights are sharded); evaluate the checkpoints with `strata eval`");
  if (run.grid.tp > 1 && !r.get_strings("eval.tasks").empty())
    r.fail("eval.tasks", cat("benchmark tasks during training need parallelism.tp = 1 (this run: ",
                             run.grid.tp, "); evaluate the checkpoints with `strata eval`"));
  check_train_memory(run, cfg, plan);
  if (run.dry_run) return;
  run.runtime_rss = process_rss_bytes();
  try {
    run.model = std::make_unique<Model<float>>(
        cfg, plan, std::move(run.backend), run.grid.tp > 1 ? run.tp : nullptr,
        run.zero >= 2 ? zero_store_factory(*run.dp, run.zero, &run.zero_store)
                      : WeightStoreFactory<float>());
  } catch (const Error& e) {
    // The layout's checks name tensor parallelism or the plan; anything else
    // (an allocation the estimate missed) is the recipe's as a whole.
    const std::string msg = e.what();
    if (run.grid.tp > 1 && msg.find("tensor") != std::string::npos) r.fail("parallelism.tp", msg);
    if (msg.rfind("layer plan", 0) == 0) r.fail("model.plan", msg);
    fail_one_line(r.files().back(), ": ", msg);
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
  Recompute recompute = Recompute::None;
  parse_recompute(r.get_string("training.recompute"), &recompute);  // checked with the memory
  run.model->set_recompute(recompute);
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
  const ParamLayout& layout = run.model->layout();
  auto bucket_tensors = [&](const WeightBucket& k, const std::vector<bool>* only) {
    std::vector<int> ts;
    for (int t = k.first; t <= k.last; ++t)
      if (!only || (*only)[size_t(t)]) ts.push_back(t);
    return ts;
  };
  if (reader) {
    run.model->write_weights([&](const WeightBucket& k, float* base) {
      read_parts(run, *reader, "params", bucket_tensors(k, nullptr),
                 [&](int t) { return base + (layout[t].offset - k.offset); });
    });
  } else
    run.model->init_weights(run.seed);

  std::vector<std::string> names;
  for (const auto& t : run.model->layout().tensors()) names.push_back(t.name);
  // The trainable patterns alone first, so a bad freeze pattern is blamed on
  // training.freeze (and where it was set), not on training.trainable.
  const auto trainable = r.get_strings("training.trainable");
  const auto freeze = r.get_strings("training.freeze");
  const char* pattern_key = freeze.empty() ? "training.trainable" : "training.freeze";
  resolve_trainable(names, trainable, {},
                    cat(r.where("training.trainable"), ": training.trainable"));
  const auto mask =
      resolve_trainable(names, trainable, freeze, cat(r.where(pattern_key), ": ", pattern_key));
  run.model->set_trainable(mask);
  AdamWConfig oc;
  oc.lr = run.schedule.lr;
  oc.beta1 = r.get_float("optimizer.beta1");
  oc.beta2 = r.get_float("optimizer.beta2");
  oc.eps = r.get_float("optimizer.eps");
  oc.weight_decay = r.get_float("optimizer.weight_decay");
  oc.grad_clip = r.get_float("training.grad_clip");
  assign_owners(run, mask);
  if (run.zero_store) {
    // ZeRO-2/3: this rank's slices of the trainable tensors; the weights it
    // updates are the model's arena (stage 2) or the store's shard (stage 3).
    run.opt = make_sharded_adamw(run.model->backend(), layout, oc, *run.zero_store, mask);
  } else {
    std::vector<bool> owned(mask.size());
    for (size_t t = 0; t < mask.size(); ++t) owned[t] = run.owner[t] == run.grid.dp_rank;
    run.opt = std::make_unique<AdamW<float>>(run.model->backend(), layout, oc, mask, owned);
  }
  if (run.grid.tp > 1) run.opt->set_tp_comm(run.tp);
  // The moments this rank holds, read from a checkpoint.
  std::vector<int> stateful;
  for (int t = 0; t < n_tensors; ++t)
    if (run.opt->has_state(t)) stateful.push_back(t);
  auto read_moments = [&](const CheckpointReader& rd) {
    if (run.zero_store) {  // whole buckets read, this rank's shard kept
      ZeroShards& z = *run.zero_store;
      size_t widest = 0;
      for (const WeightBucket& k : z.buckets()) widest = std::max(widest, size_t(k.numel));
      ops::DeviceBuffer<float> whole(&run.model->backend(), widest);
      for (size_t b = 0; b < z.buckets().size(); ++b) {
        const WeightBucket& k = z.buckets()[b];
        const std::vector<int> ts = bucket_tensors(k, &mask);
        if (ts.empty()) continue;
        for (const auto& [group, arena] :
             {std::pair<const char*, float*>{"optimizer/exp_avg", run.opt->exp_avg_arena()},
              {"optimizer/exp_avg_sq", run.opt->exp_avg_sq_arena()}}) {
          run.model->backend().zero(whole.data(), k.numel);
          read_parts(run, rd, group, ts,
                     [&](int t) { return whole.data() + (layout[t].offset - k.offset); });
          z.slice_bucket(int(b), whole.data(), arena + z.shard_offset(int(b)));
        }
      }
      return;
    }
    read_parts(run, rd, "optimizer/exp_avg", stateful, [&](int t) { return run.opt->exp_avg(t); });
    read_parts(run, rd, "optimizer/exp_avg_sq", stateful,
               [&](int t) { return run.opt->exp_avg_sq(t); });
  };

  // The run directory's first files, now that the recipe, the checkpoint and
  // the model check out: the tokenizer (data preparation reads it), then,
  // once the data is read too, recipe.toml.
  if (run.root()) {
    // One writer per run directory: a second run on it stops here, having
    // written nothing.
    run.dir_lock = DirLock::acquire(run.dir, "run.dir");
    if (run.tokenizer)
      write_file_atomic(run.dir + "/tokenizer.model", run.tokenizer->model_bytes());
  }
  if (run.world() > 1) run.grid.world->barrier();  // every rank reads the directory from here
  setup_data(run);

  if (!resume.empty()) {
    STRATA_CHECK(reader->has_optimizer(), resume, ": has no optimizer state to resume from");
    read_moments(*reader);
    run.opt->set_steps_taken(reader->optimizer_step());
    run.step = info.state["step"].get<int64_t>();  // checked above
    run.tokens_seen = info.state["tokens_seen"].get<int64_t>();
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
  // Everything checked (recipe, data, checkpoint): now the run's record.
  if (run.root()) write_file_atomic(run.dir + "/recipe.toml", r.to_toml());
  if (run.root() && r.get_bool("log.tensorboard")) {
    const std::string tb = run.dir + "/tb";
    if (resume.empty()) {  // a fresh run: no curves of an earlier one (as metrics.jsonl)
      std::error_code ec;
      std::filesystem::remove_all(tb, ec);
    }
    run.tb = std::make_unique<TensorBoardWriter>(tb);
    // A resumed run goes on after its checkpoint's step: TensorBoard drops
    // the older files' points from the next step on, as metrics.jsonl was cut
    // back to the checkpoint.
    if (!resume.empty()) run.tb->session_start(run.step + 1);
    run.tb->text("recipe", "```toml\n" + r.to_toml() + "```", run.step);
  }

  int64_t n_train = 0;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) n_train += full_numel(run.model->layout()[int(i)]);
  log::info("model: ", cfg.num_hidden_layers, " layers, hidden ", cfg.hidden_size, ", heads ",
            cfg.num_attention_heads, "/", cfg.num_key_value_heads, ", vocab ", cfg.vocab_size, ", ",
            human_count(double(cfg.num_parameters())), " parameters (",
            human_count(double(n_train)), " trainable), plan ", plan.to_string(), ", ", precision,
            " matmuls",
            run.model->recompute() == Recompute::None
                ? ""
                : cat(", ", recompute_name(run.model->recompute()), " activation recomputation"));
  log::info("memory: ", run.memory.to_string(), " per process",
            run.memory_limit.bytes >= 0 ? cat("; ", human_bytes(double(run.memory_limit.bytes)),
                                              " available (", run.memory_limit.source, ")")
                                        : std::string());
  if (run.world() > 1) {
    int64_t state = 0;
    for (int t = 0; t < n_tensors; ++t)
      if (run.opt->has_state(t)) state += run.model->layout()[t].numel;
    if (run.zero_store) state = run.zero_store->shard_elements();
    const int64_t weights = run.zero == 3 ? run.zero_store->shard_elements()
                                          : run.model->num_params();
    log::info("parallel: ", run.world(), " processes (", run.grid.world->name(), ") = dp ",
              run.grid.dp, " x tp ", run.grid.tp, "; rank 0 holds ", human_count(double(weights)),
              " parameters", run.zero == 3 ? " (a shard)" : "", " and ", human_count(double(state)),
              " optimizer moments", run.zero ? cat(" (ZeRO-", run.zero, ")") : std::string(),
              "; global batch ", int64_t(run.micro_batch) * run.grid.dp * run.accum, " sequences");
  }
}

}  // namespace strata::train_internal
