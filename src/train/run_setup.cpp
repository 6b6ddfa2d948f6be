// `strata train`: from the typed recipe to a Run ready for its first step
// (run.h), in order: the process grid and device, the checkpoint the weights
// come from, the model, the optimizer, the run directory's first files, the
// data, and a resumed run's state.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/text.h"
#include "core/threads.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "model/sharding.h"
#include "parallel/grid.h"
#include "parallel/hang_watch.h"
#include "train/run.h"

namespace strata::train_internal {
namespace fs = std::filesystem;

std::string human_time(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

// The process grid (alone: one process), before anything else: every rank
// sees the same recipe, so recipe errors are the same on every rank.
void setup_grid(Run& run) {
  const TrainConfig& c = run.c;
  set_collective_timeout(c.parallel.collective_timeout, c.parallel.collective_timeout_given);
  try {
    run.grid = make_grid(c.parallel.tp, c.parallel.dp, c.parallel.pp);
  } catch (const Error& e) {
    c.fail(c.parallel.dp_given ? "parallelism.dp"
           : c.parallel.pp > 1 ? "parallelism.pp"
                               : "parallelism.tp",
           e.what());
  }
  // The device first: on GPUs the groups' collectives run on NCCL, ordered
  // after the backend's stream.
  std::string device = c.run.device;
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
    c.fail("run.device", e.what());
  }
  auto wrap = [](std::unique_ptr<Communicator>& comm) {
    auto timed = std::make_unique<TimedComm>(std::move(comm));
    TimedComm* raw = timed.get();
    comm = std::move(timed);
    return raw;
  };
  run.tp = wrap(run.grid.tp_comm);
  run.dp = wrap(run.grid.dp_comm);
  run.pp = run.grid.pp_comm.get();  // point-to-point: not wrapped (the runner times it)
  // One rank speaks for the job; the others only report errors.
  if (!run.root()) log::set_level(log::Level::Error);
  if (run.device != "cpu") log::info(ops::device_choice(device));
  if (run.zero() > 0 && run.grid.dp == 1 && !run.plan_memory)
    log::warn("parallelism.zero = ", run.zero(),
              " with one data-parallel rank shards nothing (ZeRO divides the state among the "
              "data-parallel ranks; run more processes, e.g. mpirun -np N)");
}

namespace {

std::string find_resume_checkpoint(const Run& run) {
  const std::string& mode = run.c.checkpoint.resume;
  if (mode == "none") return "";
  if (mode == "auto") {
    const auto ckpts = list_checkpoints(run.dir());
    return ckpts.empty() ? "" : ckpts.back().second;
  }
  if (!fs::exists(mode)) run.c.fail("checkpoint.resume", cat("no such checkpoint: ", mode));
  return mode;
}

}  // namespace

Source open_source(Run& run) {
  const TrainConfig& c = run.c;
  // Refused now rather than after the training, when the first save comes.
  if (!checkpoint_format_available() && !run.dry_run &&
      (c.checkpoint.final || c.checkpoint.interval > 0))
    c.fail(c.checkpoint.final ? "checkpoint.final" : "checkpoint.interval",
           "this build has no HDF5 (libhdf5-dev): checkpoints cannot be written (set "
           "checkpoint.final = false and checkpoint.interval = 0, or rebuild with HDF5)");
  Source src;
  src.resume = find_resume_checkpoint(run);
  src.init_from = c.model.init_from;
  if (!src.init_from.empty() && !fs::exists(src.init_from)) {
    // Planning for other machines (--dry-run --plan-memory) needs the
    // model's shape only: model.config gives it where the weights are not here.
    if (!run.plan_memory || c.model.config_file.empty())
      c.fail("model.init_from",
             cat("no such checkpoint: ", src.init_from,
                 run.plan_memory ? " (to plan without it, give the model's shape in model.config)"
                                 : ""));
    log::info("plan: ", src.init_from, " is not on this machine; the model's shape comes from ",
              c.model.config_file);
    src.init_from.clear();
  }
  if (!src.path().empty()) {
    src.reader = std::make_unique<CheckpointReader>(src.path());
    src.info = read_checkpoint_info(*src.reader);
  }
  if (!src.resume.empty()) {
    // The state is user-editable JSON: check it before trusting it.
    for (const char* key : {"step", "tokens_seen"}) {
      const auto it = src.info.state.find(key);
      if (it == src.info.state.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
        fail_one_line(src.resume, ": malformed checkpoint state: '", key,
                      "' must be a non-negative integer, got ",
                      it == src.info.state.end() ? std::string("nothing") : it->dump());
    }
    if (src.info.state["step"].get<int64_t>() > c.training.steps)
      fail_one_line(src.resume, " is at step ", src.info.state["step"].get<int64_t>(),
                    ", past training.steps = ", c.training.steps,
                    " (raise training.steps to continue, or set checkpoint.resume = \"none\" "
                    "to start over)");
    // Refused before the run directory is touched, not after it was set up.
    STRATA_CHECK(src.reader->has_optimizer(), src.resume,
                 ": has no optimizer state to resume from (a weights-only checkpoint: start "
                 "from it with model.init_from and checkpoint.resume = \"none\")");
    STRATA_CHECK(src.info.state.contains("loader"), src.resume,
                 ": state has no data loader position");
  } else if (!src.init_from.empty() && c.load_optimizer_state) {
    STRATA_CHECK(src.reader->has_optimizer(), src.init_from,
                 ": has no optimizer state (optimizer.load_state = true)");
  }
  // Tokenizer: the recipe's, else the checkpoint's.
  if (!c.data.tokenizer.empty()) {
    if (!fs::exists(c.data.tokenizer))
      c.fail("data.tokenizer", cat("no such file: ", c.data.tokenizer));
    run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(c.data.tokenizer));
  } else if (!src.info.tokenizer.empty()) {
    run.tokenizer =
        std::make_unique<Tokenizer>(Tokenizer::from_bytes(src.info.tokenizer, src.path()));
  }
  return src;
}

namespace {

// The run directory's first files, now that the recipe, the checkpoint and
// the model check out: the tokenizer (data preparation reads it).
void open_run_dir(Run& run, bool fresh) {
  if (run.root()) {
    // One writer per run directory: a second run on it stops here, having
    // written nothing.
    run.dir_lock = DirLock::acquire(run.dir(), "run.dir");
    if (fresh) archive_previous_run(run);
    if (run.tokenizer)
      write_file_atomic(run.dir() + "/" + run.tokenizer->file_name(), run.tokenizer->model_bytes());
  }
  if (run.world() > 1) run.grid.world->barrier();  // every rank reads the directory from here
}

// Everything checked (recipe, data, checkpoint): now the run's record.
void write_run_record(Run& run, bool resumed) {
  if (!run.root()) return;
  const Recipe& r = *run.c.recipe;
  write_file_atomic(run.dir() + "/recipe.toml", r.to_toml());
  if (!run.c.log.tensorboard) return;
  const std::string tb = run.dir() + "/tb";
  if (!resumed) {  // a fresh run: no curves of an earlier one (as metrics.jsonl)
    std::error_code ec;
    fs::remove_all(tb, ec);
  }
  run.tb = std::make_unique<TensorBoardWriter>(tb);
  // A resumed run goes on after its checkpoint's step: TensorBoard drops
  // the older files' points from the next step on, as metrics.jsonl was cut
  // back to the checkpoint.
  if (resumed) run.tb->session_start(run.step + 1);
  run.tb->text("recipe", "```toml\n" + r.to_toml() + "```", run.step);
}

void log_summary(const Run& run) {
  const LlamaConfig& cfg = run.model->config();
  const ParamLayout& layout = run.model->layout();
  int64_t n_train = 0;
  for (size_t i = 0; i < run.trainable.size(); ++i)
    if (run.trainable[i]) n_train += full_numel(layout[int(i)]);
  log::info("model: ", cfg.num_hidden_layers, " layers, hidden ", cfg.hidden_size, ", heads ",
            cfg.num_attention_heads, "/", cfg.num_key_value_heads, ", vocab ", cfg.vocab_size, ", ",
            human_count(double(cfg.num_parameters())), " parameters (",
            human_count(double(n_train)), " trainable), plan ", run.model->plan().to_string(), ", ",
            run.precision, " matmuls",
            run.model->activation_storage() == ops::Dtype::BF16
                ? cat(", ", run.activations, " activations")
                : std::string(),
            run.model->recompute() == Recompute::None
                ? ""
                : cat(", ", recompute_name(run.model->recompute()), " activation recomputation"));
  log::info("memory: ", run.memory.to_string(), " per process",
            run.memory_limit.bytes >= 0 ? cat("; ", human_bytes(double(run.memory_limit.bytes)),
                                              " available (", run.memory_limit.source, ")")
                                        : std::string());
  if (!run.resume_note.empty()) log::info(run.resume_note);
  const LrSchedule& s = run.c.schedule;
  if (s.warmup_steps > run.c.training.steps)  // a run shortened with --set training.steps
    log::info("lr: the warm-up (", s.warmup_steps, " steps) is longer than this run (",
              run.c.training.steps, " steps): the learning rate reaches ",
              int(100.0 * double(run.c.training.steps) / double(s.warmup_steps)),
              "% of optimizer.lr");
  if (run.world() == 1) return;
  int64_t state = 0;
  for (int t = 0; t < int(layout.tensors().size()); ++t)
    if (run.opt->has_state(t)) state += layout[t].numel;
  if (run.zero_store) state = run.zero_store->shard_elements();
  const int64_t weights =
      run.zero() == 3 ? run.zero_store->shard_elements() : run.model->num_params();
  log::info("parallel: ", run.world(), " processes (", run.grid.world->name(), ") = dp ",
            run.grid.dp, run.grid.pp > 1 ? cat(" x pp ", run.grid.pp) : "", " x tp ", run.grid.tp,
            "; rank 0 holds ", human_count(double(weights)), " parameters",
            run.zero() == 3 ? " (a shard)" : "", " and ", human_count(double(state)),
            " optimizer moments", run.zero() ? cat(" (ZeRO-", run.zero(), ")") : std::string(),
            "; global batch ",
            int64_t(run.c.training.micro_batch) * run.grid.dp * run.c.training.accum, " sequences");
  const Placement where = describe_placement(run.grid.node_of_rank, run.grid.tp, run.grid.pp);
  if (!where.summary.empty()) log::info(where.summary);
  if (!where.warning.empty()) log::warn(where.warning);
}

}  // namespace

void setup(Run& run) {
  if (run.c.run.threads > 0) set_num_threads(run.c.run.threads);
  setup_grid(run);
  run.metrics_path = run.dir() + "/metrics.jsonl";
  const Source src = open_source(run);
  check_run_dir(run, src);
  setup_model(run, src);  // stops after the memory check in a dry run
  if (run.dry_run) return;
  setup_optimizer(run);
  std::error_code ec;
  const bool new_dir = run.root() && !fs::exists(run.dir(), ec);
  open_run_dir(run, src.resume.empty());
  try {
    setup_data(run);
    restore_state(run, src);
  } catch (...) {
    // A run refused here (its data) leaves no directory it created behind.
    if (new_dir) {
      run.dir_lock = DirLock();
      fs::remove_all(run.dir(), ec);
    }
    throw;
  }
  write_run_record(run, !src.resume.empty());
  log_summary(run);
}

}  // namespace strata::train_internal
