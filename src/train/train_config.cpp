// A training recipe into its typed sections (train_config.h), each section
// read and validated in turn; every error names the file, line and key.
#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/cpu.h"
#include "core/error.h"
#include "core/text.h"
#include "core/threads.h"
#include "eval/evaluate.h"
#include "eval/task.h"
#include "ops/backend.h"
#include "ops/types.h"
#include "parallel/pipeline.h"
#include "train/trainer.h"

namespace strata {
namespace {

// An integer key of at least `min` (and at most 2^30: sizes and counts).
int64_t at_least(const Recipe& r, const char* key, int64_t min) {
  const int64_t v = r.get_int(key);
  if (v < min) r.fail(key, cat("must be >= ", min, ", got ", v));
  if (v > (int64_t(1) << 30)) r.fail(key, cat("must be at most 2^30, got ", v));
  return v;
}

// An integer key that becomes an int: in [lo, hi], checked before the
// conversion so a value past 2^31 is an error, not a wrapped number.
int int_in(const Recipe& r, const std::string& key, int64_t lo, int64_t hi, const char* what) {
  const int64_t v = r.get_int(key);
  if (v < lo || v > hi) r.fail(key, cat("must be ", what, ", got ", v));
  return int(v);
}

// A float key in a range, finite, named by its key.
double in_range(const Recipe& r, const char* key, double lo, double hi, bool lo_open, bool hi_open,
                const char* what) {
  const double v = r.get_float(key);
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) r.fail(key, cat("must be ", what, ", got ", v));
  return v;
}

// A warm-up longer than the run never reaches optimizer.lr. A recipe that
// says so is an error; a run shortened on the command line (--set
// training.steps, the recipe's warm-up kept) is allowed, and its start says
// how far the learning rate gets (run_setup.cpp).
void check_warmup(const Recipe& r, int64_t warmup, int64_t steps) {
  if (warmup <= steps) return;
  if (r.where("training.steps") == "--set" && r.where("lr_scheduler.warmup_steps") != "--set")
    return;
  r.fail("lr_scheduler.warmup_steps", cat(warmup, " warm-up steps but training.steps is ", steps,
                                          ": the learning rate would never reach optimizer.lr"));
}

RunSection read_run(const Recipe& r) {
  RunSection s;
  s.name = r.get_string("run.name");
  s.dir = r.get_string("run.dir").empty() ? "runs/" + s.name : r.get_string("run.dir");
  s.seed = uint64_t(r.get_int("run.seed"));
  const long long threads = r.get_int("run.threads");
  if (const std::string problem = thread_count_problem(threads); !problem.empty())
    r.fail("run.threads", problem);
  s.threads = int(threads);
  s.device = r.get_string("run.device");
  return s;
}

ParallelSection read_parallel(const Recipe& r) {
  ParallelSection s;
  s.tp = int(at_least(r, "parallelism.tp", 1));
  const int64_t dp = r.get_int("parallelism.dp");
  if (dp < 0 || dp > (int64_t(1) << 30))
    r.fail("parallelism.dp", cat("must be in [0, 2^30] (0: world size / tp), got ", dp));
  s.dp = int(dp);
  s.dp_given = r.given("parallelism.dp");
  s.zero = int_in(r, "parallelism.zero", 0, 3,
                  "0, 1, 2 or 3 (the ZeRO stage: what is sharded over the data-parallel ranks)");
  s.pp = int(at_least(r, "parallelism.pp", 1));
  s.schedule = r.get_string("parallelism.schedule");
  try {
    pipeline::parse_schedule(s.schedule);
  } catch (const Error& e) {
    r.fail("parallelism.schedule", e.what());
  }
  s.virtual_stages = int(at_least(r, "parallelism.virtual_stages", 1));
  if (s.schedule == "interleaved" && s.virtual_stages < 2)
    r.fail("parallelism.virtual_stages",
           "the interleaved schedule needs 2 or more stages per rank (1 is the 1f1b schedule)");
  if (s.schedule != "interleaved" && s.virtual_stages > 1)
    r.fail("parallelism.virtual_stages",
           cat(s.virtual_stages, " stages per rank need parallelism.schedule = \"interleaved\""));
  const std::string stages = r.get_string("parallelism.stages");
  for (const std::string& part :
       stages.empty() ? std::vector<std::string>() : python_split(stages, ",")) {
    const std::string t = trim(part);
    char* end = nullptr;
    const long n = t.empty() ? 0 : std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end || n < 1 || n > 1 << 20)
      r.fail("parallelism.stages",
             cat("must be a comma-separated list of layer counts >= 1, e.g. \"5,5,6\"; got \"",
                 stages, "\""));
    s.stage_layers.push_back(int(n));
  }
  if (!s.stage_layers.empty() && int(s.stage_layers.size()) != s.pp * s.virtual_stages)
    r.fail("parallelism.stages",
           cat(s.stage_layers.size(), " stages for parallelism.pp = ", s.pp,
               s.virtual_stages > 1 ? cat(" x virtual_stages = ", s.virtual_stages) : "", " (",
               s.pp * s.virtual_stages, " needed)"));
  s.collective_timeout = r.get_float("parallelism.collective_timeout");
  if (!(s.collective_timeout >= 0) || !std::isfinite(s.collective_timeout))
    r.fail("parallelism.collective_timeout",
           cat("must be a number of seconds >= 0 (0: no limit), got ", s.collective_timeout));
  s.collective_timeout_given = r.given("parallelism.collective_timeout");
  return s;
}

// The model.* keys that give the shape, by their LlamaConfig JSON names.
ModelSection read_model(const Recipe& r) {
  ModelSection s;
  s.init_from = r.get_string("model.init_from");
  s.config_file = r.get_string("model.config");
  s.plan = r.get_string("model.plan");
  s.plan_given = r.given("model.plan");
  s.attention = r.get_string("model.attention");
  ops::AttentionImpl impl;
  if (!ops::parse_attention_impl(s.attention, &impl))
    r.fail("model.attention", cat("unknown attention '", s.attention, "' (strata or cudnn)"));
  for (const KeySpec& k : train_recipe_schema()) {
    if (k.path.rfind("model.", 0) != 0 || k.path == "model.init_from" || k.path == "model.config" ||
        k.path == "model.plan" || k.path == "model.attention" || !r.given(k.path))
      continue;
    const std::string name = k.path.substr(6);
    if (k.type == KeyType::Int)  // sizes and counts: none may be 0 or wrap at 32 bits
      s.shape[name] = int_in(r, k.path, 1, (int64_t(1) << 30),
                             "in [1, 2^30] (leave the key out for its default)");
    else if (k.type == KeyType::Float)
      s.shape[name] = r.get_float(k.path);
    else if (k.type == KeyType::Bool)
      s.shape[name] = r.get_bool(k.path);
    else
      s.shape[name] = r.get_string(k.path);
  }
  return s;
}

TrainingSection read_training(const Recipe& r) {
  TrainingSection s;
  s.steps = at_least(r, "training.steps", 1);
  s.micro_batch = int(at_least(r, "training.micro_batch_size", 1));
  s.seq_len = int(at_least(r, "training.seq_len", 2));
  s.accum = int(at_least(r, "training.grad_accum_steps", 1));
  // Any spelling of a dtype (fp32, float32, f32; bf16, bfloat16) as its one name.
  s.precision = canonical_dtype(r.get_string("training.precision"));
  s.activations = canonical_dtype(r.get_string("training.activations"));
  s.trainable = r.get_strings("training.trainable");
  s.freeze = r.get_strings("training.freeze");
  return s;
}

DataSection read_data(const Recipe& r) {
  DataSection s;
  const std::string kind = r.get_string("data.kind");
  if (kind != "pretrain" && kind != "sft")
    r.fail("data.kind", cat("unknown kind '", kind, "' (pretrain or sft)"));
  s.kind = kind == "sft" ? DataKind::Sft : DataKind::Pretrain;
  s.tokenizer = r.get_string("data.tokenizer");
  s.dataset = r.get_string("data.dataset");
  s.inputs = r.get_strings("data.inputs");
  s.doc_split = r.get_string("data.doc_split");
  s.val_fraction = in_range(r, "data.val_fraction", 0, 1, false, true, "in [0, 1)");
  s.sft_train = r.get_string("data.sft_train");
  s.sft_val = r.get_string("data.sft_val");
  s.packing = r.get_bool("data.packing");
  s.chat_template = r.get_string("data.chat_template");
  return s;
}

// [optimizer], training.grad_clip and [lr_scheduler]: finite and in range.
void read_optimizer(const Recipe& r, TrainConfig& c) {
  if (r.get_string("optimizer.name") != "adamw")
    r.fail("optimizer.name",
           cat("unknown optimizer '", r.get_string("optimizer.name"), "' (adamw)"));
  const double inf = std::numeric_limits<double>::infinity();
  AdamWConfig& o = c.optimizer;
  o.lr = in_range(r, "optimizer.lr", 0, inf, false, true, "finite and >= 0");
  c.schedule.min_lr = in_range(r, "lr_scheduler.min_lr", 0, inf, false, true, "finite and >= 0");
  o.beta1 = in_range(r, "optimizer.beta1", 0, 1, false, true, "in [0, 1)");
  o.beta2 = in_range(r, "optimizer.beta2", 0, 1, false, true, "in [0, 1)");
  o.eps = in_range(r, "optimizer.eps", 0, inf, true, true, "finite and > 0");
  o.weight_decay = in_range(r, "optimizer.weight_decay", 0, inf, false, true, "finite and >= 0");
  o.grad_clip = c.training.grad_clip =
      in_range(r, "training.grad_clip", 0, inf, false, true, "finite and >= 0 (0: no clipping)");
  c.load_optimizer_state = r.get_bool("optimizer.load_state");
  const int64_t decay = r.get_int("lr_scheduler.decay_steps");
  if (decay < 0)
    r.fail("lr_scheduler.decay_steps", cat("must be >= 0 (0: training.steps), got ", decay));
  const int64_t warmup = r.get_int("lr_scheduler.warmup_steps");
  if (warmup < 0) r.fail("lr_scheduler.warmup_steps", cat("must be >= 0, got ", warmup));
  check_warmup(r, warmup, c.training.steps);
  LrSchedule& s = c.schedule;
  s.kind = r.get_string("lr_scheduler.kind");
  s.lr = o.lr;
  s.warmup_steps = warmup;
  s.decay_steps = decay > 0 ? decay : c.training.steps;
  try {
    s.validate();
  } catch (const Error& e) {
    r.fail("lr_scheduler.kind", e.what());
  }
}

LayerSkipConfig read_layerskip(const Recipe& r) {
  LayerSkipConfig ls;
  ls.p_max = r.get_float("layerskip.p_max");
  ls.layer_scale = r.get_string("layerskip.layer_scale");
  ls.time_scale = r.get_string("layerskip.time_scale");
  ls.e_scale = r.get_float("layerskip.e_scale");
  ls.curriculum = r.get_string("layerskip.curriculum");
  ls.rotation = int_in(r, "layerskip.rotation", 0, 1 << 20, "in [0, 2^20]");
  ls.always_last = r.get_bool("layerskip.always_last");
  ls.e_formula = r.get_string("layerskip.e_formula");
  return ls;
}

CheckpointSection read_checkpoint(const Recipe& r) {
  CheckpointSection s;
  s.interval = at_least(r, "checkpoint.interval", 0);
  s.keep = int(at_least(r, "checkpoint.keep", 0));
  s.resume = r.get_string("checkpoint.resume");
  s.final = r.get_bool("checkpoint.final");
  return s;
}

EvalSection read_eval(const Recipe& r) {
  EvalSection s;
  s.interval = at_least(r, "eval.interval", 0);
  s.batches = int(at_least(r, "eval.batches", 0));
  s.tasks = r.get_strings("eval.tasks");
  s.task_limit = r.get_int("eval.task_limit");
  if (s.task_limit < 0) r.fail("eval.task_limit", cat("must be >= 0 (0: all), got ", s.task_limit));
  s.task_shots = int_in(r, "eval.task_shots", -1, 1 << 20, "in [-1, 2^20] (-1: each task's own)");
  s.task_dir = r.get_string("eval.task_dir");
  s.allow_code_execution = r.get_bool("eval.allow_code_execution");
  return s;
}

LogSection read_log(const Recipe& r) {
  LogSection s;
  s.interval = at_least(r, "log.interval", 1);
  s.tensorboard = r.get_bool("log.tensorboard");
  s.sample_prompt = r.get_string("log.sample_prompt");
  s.sample_tokens = int_in(r, "log.sample_tokens", 0, 1 << 24, "in [0, 2^24]");
  s.sample_temperature =
      in_range(r, "log.sample_temperature", 0, std::numeric_limits<double>::infinity(), false, true,
               "finite and >= 0 (0: greedy)");
  return s;
}

// eval.tasks: every name known and every task file and its data readable
// now, not at the first evaluation after hours of training (a task loads its
// first example here; the full split loads at evaluation).
void check_eval_tasks(const Recipe& r, const EvalSection& e) {
  if (e.tasks.empty()) return;
  std::vector<std::string> known;
  try {
    known = list_tasks(e.task_dir);
  } catch (const Error& err) {
    r.fail("eval.task_dir", err.what());
  }
  for (const std::string& t : e.tasks) {
    if (t == "all") continue;
    if (resolve_task(e.task_dir, t).empty())
      r.fail("eval.tasks", cat("unknown task '", one_line(t), "' (", e.task_dir,
                               "/ has: ", join(known, ", "), ")"));
    try {
      (void)load_task(e.task_dir, t, e.task_shots, 1234, 1);
    } catch (const Error& err) {
      r.fail("eval.tasks", cat("task '", t, "': ", err.what()));
    }
  }
}

}  // namespace

TrainConfig read_train_config(const Recipe& r) {
  TrainConfig c;
  c.recipe = &r;
  c.run = read_run(r);
  c.parallel = read_parallel(r);
  c.training = read_training(r);
  read_optimizer(r, c);
  c.checkpoint = read_checkpoint(r);
  c.eval = read_eval(r);
  c.log = read_log(r);
  try {  // before anything is written: a task that runs code needs the recipe's permission
    require_code_permission(c.eval.task_dir, c.eval.tasks, c.eval.allow_code_execution,
                            "set eval.allow_code_execution = true");
  } catch (const Error& e) {
    r.fail("eval.tasks", e.what());
  }
  check_eval_tasks(r, c.eval);
  if (!parse_recompute(r.get_string("training.recompute"), &c.training.recompute))
    r.fail("training.recompute", cat("unknown mode '", one_line(r.get_string("training.recompute")),
                                     "' (none, selective or full)"));
  if (c.training.precision != "fp32" && c.training.precision != "bf16" &&
      c.training.precision != "auto")
    r.fail("training.precision",
           cat("unknown precision '", c.training.precision, "' (fp32, bf16 or auto)"));
  if (c.training.activations != "fp32" && c.training.activations != "bf16" &&
      c.training.activations != "auto")
    r.fail("training.activations",
           cat("unknown storage '", one_line(c.training.activations), "' (fp32, bf16 or auto)"));
  c.model = read_model(r);
  // cuDNN's attention needs device cuda and bf16 matmuls (the backend then
  // checks that the build has cuDNN).
  if (c.model.attention == "cudnn") {
    if (c.training.precision == "fp32")
      r.fail("model.attention", "cudnn needs bf16 matmuls (training.precision = \"bf16\")");
    const std::string device = ops::resolve_device(c.run.device);
    if (device != "cuda")
      r.fail("model.attention",
             cat("cudnn runs on device cuda only (run.device is ", c.run.device,
                 device != c.run.device ? cat(", here ", device) : std::string(), ")"));
  }
  c.data = read_data(r);
  c.layerskip = read_layerskip(r);
  return c;
}

bool bf16_activations(const TrainingSection& t, const std::string& device, bool bf16_matmuls) {
  if (t.activations == "auto") return device == "cuda" && bf16_matmuls;
  return t.activations == "bf16";
}

bool bf16_weight_copies(const TrainingSection& t, const std::string& device) {
  if (device == "cuda") return t.precision != "fp32";
  // The CPU holds copies on its native bf16 path only (auto is bf16 there).
  if (device == "cpu") return t.precision != "fp32" && cpu_features().native_bf16();
  return device == "simt" && t.precision == "bf16";
}

}  // namespace strata
