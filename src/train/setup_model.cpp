// `strata train`: the model (run.h): its shape and plan (from the recipe, or
// the checkpoint it starts from), the memory it needs, checked before it is
// allocated, then the model itself with its precision, recomputation and
// weights.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "io/model_io.h"
#include "model/params.h"
#include "model/sharding.h"
#include "model/stages.h"
#include "train/run.h"
#include "train/trainer.h"

namespace strata::train_internal {

namespace {

// The shape of a new model: model.config, then the recipe's model.* keys.
LlamaConfig config_from_recipe(const TrainConfig& c, const Tokenizer* tok) {
  const auto& shape = c.model.shape;
  LlamaConfig cfg;
  if (!c.model.config_file.empty()) {
    cfg = read_model_config(*c.recipe, "model.config", c.model.config_file);
  } else {
    for (const char* k :
         {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
      if (!shape.contains(k))
        fail(
            cat(c.file(), ": model.", k, " is required (or give model.config or model.init_from)"));
    cfg.vocab_size = 0;
    cfg.num_key_value_heads = 0;
    cfg.max_position_embeddings = 0;
  }
  auto set = [&](const char* name, auto& field) {
    if (shape.contains(name)) field = shape[name].get<std::remove_reference_t<decltype(field)>>();
  };
  set("vocab_size", cfg.vocab_size);
  set("hidden_size", cfg.hidden_size);
  set("intermediate_size", cfg.intermediate_size);
  set("num_hidden_layers", cfg.num_hidden_layers);
  set("num_attention_heads", cfg.num_attention_heads);
  set("num_key_value_heads", cfg.num_key_value_heads);
  set("head_dim", cfg.head_dim);
  set("max_position_embeddings", cfg.max_position_embeddings);
  set("rope_theta", cfg.rope_theta);
  set("rms_norm_eps", cfg.rms_norm_eps);
  set("initializer_range", cfg.initializer_range);
  set("tie_word_embeddings", cfg.tie_word_embeddings);
  set("attention_bias", cfg.attention_bias);
  if (cfg.vocab_size == 0 && tok) cfg.vocab_size = tok->vocab_size();
  if (cfg.max_position_embeddings == 0) cfg.max_position_embeddings = c.training.seq_len;
  if (tok) {
    cfg.bos_token_id = tok->bos_id();
    cfg.eos_token_id = tok->eos_id();
    if (cfg.vocab_size < tok->vocab_size())
      c.fail("model.vocab_size",
             cat(cfg.vocab_size, " is smaller than the tokenizer's vocabulary (", tok->vocab_size(),
                 ")"));
  }
  // Errors of the shape as a whole name where its keys came from: the recipe,
  // and the --set keys among them.
  std::vector<std::string> from_command_line;
  for (const auto& [name, value] : shape.items())
    if (c.where("model." + name) == "--set") from_command_line.push_back("model." + name);
  cfg.finalize(c.files().back() + " [model]" +
               (from_command_line.empty() ? "" : " with --set " + join(from_command_line, ", ")));
  return cfg;
}

LayerPlan parse_plan(const TrainConfig& c, int layers) {
  try {
    return LayerPlan::parse(c.model.plan, layers);
  } catch (const Error& e) {
    c.fail("model.plan", e.what());
  }
}

// A checkpoint defines the model. The recipe's model keys that agree with it
// are fine; ones that disagree are an error on resume (the run would silently
// change architecture) and a warning with init_from.
void compare_with_checkpoint(const TrainConfig& c, const Source& src, bool new_plan) {
  const nlohmann::json have = src.info.config.to_json();
  std::string differ;
  auto note = [&](const std::string& key, const std::string& want, const std::string& got) {
    if (want != got)
      differ += cat(differ.empty() ? "" : ", ", key, " = ", want, " (checkpoint: ", got, ")");
  };
  // model.plan first (the schema's order), where the recipe gives it and the
  // run keeps the checkpoint's.
  if (c.model.plan_given && !new_plan) {
    std::string want = c.model.plan;
    try {
      want = LayerPlan::parse(want, src.info.config.num_hidden_layers).to_string();
    } catch (const Error&) {
    }
    note("model.plan", want, src.info.plan.to_string());
  }
  for (const auto& [name, value] : c.model.shape.items()) {
    const std::string key = "model." + name;
    if (!have.contains(name)) {
      note(key, "(set)", "(from the checkpoint)");
    } else if (value.is_number_float()) {
      const double a = value.get<double>(), b = have[name].get<double>();
      if (std::fabs(a - b) > 1e-9 * std::max(std::fabs(a), std::fabs(b))) note(key, cat(a), cat(b));
    } else if (value.is_string()) {
      note(key, value.get<std::string>(),
           have[name].is_string() ? have[name].get<std::string>() : have[name].dump());
    } else {
      note(key, value.dump(), have[name].dump());
    }
  }
  if (!differ.empty() && !src.resume.empty())
    fail_one_line(src.resume, ": the recipe's model differs from the checkpoint's: ", differ,
                  " (a resumed run keeps its architecture: drop those keys, or use another "
                  "run.dir)");
  if (!differ.empty()) log::warn("the model comes from ", src.path(), "; ignoring ", differ);
}

// Memory, estimated from the configuration before the model is allocated:
// printed, and refused in one line (naming what to lower) when it cannot fit.
void check_train_memory(Run& run, const LlamaConfig& cfg, const LayerPlan& plan) {
  const TrainConfig& c = run.c;
  MemoryUse u;
  u.tp = run.grid.tp;
  run.memory_limit = ops::memory_available(run.device);
  const int procs = processes_on_this_node();
  const std::string what = cat(c.files().back(), ": training ",
                               human_count(double(cfg.num_parameters())), " parameters");
  // What spreads the model: ZeRO needs data-parallel ranks to shard over.
  const std::string spread =
      run.grid.dp == 1
          ? "or spread it over more processes (mpirun -np N) with parallelism.tp, or with "
            "parallelism.zero = 3 (each of N data-parallel ranks holds 1/N of the weights, "
            "gradients and moments)"
      : run.zero() < 3
          ? cat("or raise parallelism.zero from ", run.zero(),
                " (2: the gradients and moments sharded over the ", run.grid.dp,
                " data-parallel ranks, 3: the weights too), or spread it with parallelism.tp")
          : cat("or use more processes (ZeRO-3 already holds 1/", run.grid.dp,
                " of the weights, gradients and moments) or parallelism.tp");
  const std::string model_hint =
      cat("use a smaller model (model.hidden_size, model.num_hidden_layers), freeze tensors "
          "(training.freeze), ",
          spread);
  const bool patterns = !c.training.trainable.empty() || !c.training.freeze.empty();
  u.gradients = true;
  u.batch = c.training.micro_batch;
  u.seq = c.training.seq_len;
  u.recompute = c.training.recompute;
  // (Before the backend exists: precision auto counts as bf16 on cuda.)
  u.bf16_activations = bf16_activations(c.training, run.device, c.training.precision != "fp32");
  u.bf16_weight_copies = bf16_weight_copies(c.training, run.device);
  // Without freeze patterns every tensor trains and this is the estimate;
  // with them, the weights alone first, so an absurd model is refused before
  // its layout is built to count the trainable share.
  if (patterns && !run.plan_memory) {
    MemoryUse weights_only;
    weights_only.tp = u.tp;
    check_memory(estimate_memory(cfg, plan, weights_only), run.memory_limit, procs, what,
                 model_hint);
  }
  // The optimizer holds two moments per trainable element (1/dp of them under ZeRO-1).
  double share = 1;
  if (patterns) try {
      const ParamLayout layout(cfg);
      std::vector<std::string> names;
      for (const auto& t : layout.tensors()) names.push_back(t.name);
      const auto mask = resolve_trainable(names, c.training.trainable, c.training.freeze, "");
      double n = 0;
      for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) n += double(layout[int(i)].numel);
      share = layout.total() > 0 ? n / double(layout.total()) : 1;
    } catch (const Error&) {
      // a bad pattern is reported, with its key, where the mask is set
    }
  run.trained_share = share;
  if (run.zero() == 1 && run.grid.dp > 1) share /= run.grid.dp;
  u.optimizer_share = share;
  u.dp = run.grid.dp;
  u.zero = run.zero();
  if (run.grid.pp > 1) {  // this rank's stages, and a slot per micro-batch it keeps
    const int S = int(run.stage_first.size()) - 1;
    u.stage = stage_holding(run.stage_first, run.grid.pp, run.grid.pp_rank,
                            std::vector<bool>(size_t(S), c.layerskip.early_exit()));
    u.activation_slots =
        pipeline_slots(pipeline::parse_schedule(c.parallel.schedule), run.grid.pp, c.training.accum,
                       c.parallel.virtual_stages, run.grid.pp_rank);
  }
  run.memory = estimate_memory(cfg, plan, u);  // printed once the run starts
  const bool activations_first = run.memory.bytes_of("activations") * 2 > run.memory.total();
  run.planned_cfg = cfg;
  run.planned_plan = plan;
  if (!run.plan_memory)
    check_memory(
        run.memory, run.memory_limit, procs, what,
        activations_first
            ? cat("lower training.micro_batch_size or training.seq_len (raise "
                  "training.grad_accum_steps to keep the batch)",
                  u.recompute == Recompute::Full ? "" : ", or set training.recompute = \"full\"")
            : model_hint);
}

// The model's shape and plan, checked against the run.
void resolve_shape(Run& run, const Source& src, LlamaConfig& cfg, LayerPlan& plan) {
  const TrainConfig& c = run.c;
  if (src.reader) {
    cfg = src.info.config;
    plan = src.info.plan;
    // A new plan on the weights of another run is how a model is converted
    // (init_from); a resumed run keeps its own checkpoint's plan.
    const bool new_plan = src.resume.empty() && !c.model.plan.empty();
    if (new_plan) {
      plan = parse_plan(c, cfg.num_hidden_layers);
      log::info("plan: ", plan.to_string(), " on the weights of ", src.path(), " (trained as ",
                src.info.plan.to_string(), ")");
    }
    compare_with_checkpoint(c, src, new_plan);
  } else {
    cfg = config_from_recipe(c, run.tokenizer.get());
    plan = c.model.plan.empty() ? LayerPlan::standard(cfg.num_hidden_layers)
                                : parse_plan(c, cfg.num_hidden_layers);
  }
  try {
    plan.check_not_benchmark_only("training");
  } catch (const Error& e) {
    c.fail("model.plan", e.what());
  }
  if (c.training.seq_len > cfg.max_position_embeddings)
    c.fail("training.seq_len",
           cat(c.training.seq_len, " exceeds the model's max_position_embeddings (",
               cfg.max_position_embeddings, ")"));
  if (run.zero() == 3 && !c.eval.tasks.empty())
    c.fail("eval.tasks",
           "benchmark tasks during training need parallelism.zero < 3 (the "
           "weights are sharded); evaluate the checkpoints with `strata eval`");
  if (run.grid.pp > 1 && !c.eval.tasks.empty())
    c.fail("eval.tasks", cat("benchmark tasks during training need parallelism.pp = 1 (this run: ",
                             run.grid.pp, "); evaluate the checkpoints with `strata eval`"));
  if (run.grid.tp > 1 && !c.eval.tasks.empty())
    c.fail("eval.tasks", cat("benchmark tasks during training need parallelism.tp = 1 (this run: ",
                             run.grid.tp, "); evaluate the checkpoints with `strata eval`"));
}

// Pipeline stages: the first layer of each of the pp x virtual_stages
// stages, then L; from parallelism.stages, or balanced by the cost model
// (model/stages.h). A stage holds whole units.
std::vector<int> stage_split(const Run& run, const LlamaConfig& cfg, const LayerPlan& plan) {
  const TrainConfig& c = run.c;
  const int S = run.grid.pp * c.parallel.virtual_stages, L = cfg.num_hidden_layers;
  if (!c.parallel.stage_layers.empty()) {
    std::vector<int> first = {0};
    for (int n : c.parallel.stage_layers) first.push_back(first.back() + n);
    if (first.back() != L)
      c.fail("parallelism.stages",
             cat("the stages hold ", first.back(), " layers; the model has ", L));
    for (int k = 1; k < S; ++k)
      if (!plan.unit_boundary(first[size_t(k)]))
        c.fail("parallelism.stages", cat("the boundary before layer ", first[size_t(k)],
                                         " splits a unit of plan '", plan.to_string(),
                                         "' (a stage holds whole units: an LP pair, a PAR group, a "
                                         "shuffle run)"));
    return first;
  }
  const int units = int(plan.units().size());
  if (units < S)
    c.fail(c.parallel.virtual_stages > 1 ? "parallelism.virtual_stages" : "parallelism.pp",
           cat(S, " pipeline stages need as many plan units; plan '", plan.to_string(), "' has ",
               units));
  return stage_layers(plan, plan_stages(cfg, plan, c.training.seq_len, S).first);
}

void log_pipeline(const Run& run) {
  const TrainConfig& c = run.c;
  const auto kind = pipeline::parse_schedule(c.parallel.schedule);
  const int p = run.grid.pp, v = c.parallel.virtual_stages, m = c.training.accum;
  std::string stages;
  for (size_t k = 0; k + 1 < run.stage_first.size(); ++k)
    stages += cat(k ? " " : "", "[", run.stage_first[k], ",", run.stage_first[k + 1], ")");
  log::info("pipeline: pp ", p, v > 1 ? cat(" x ", v, " stages per rank") : "", ", ",
            pipeline::schedule_name(kind), ", ", m, " micro-batches; layers ", stages, "; bubble ",
            fixed(100 * pipeline::bubble_formula(kind, p, m, v), 1), "% (equal stages)");
  if (m < p)
    log::warn("pipeline: ", m, " micro-batches for ", p,
              " stages leave most of each step idle; raise training.grad_accum_steps");
}

// The model under the run's layout: the tensor-parallel split and the plan
// are checked first, each blamed on its key; what else fails to build it (an
// allocation the estimate missed) is the recipe's as a whole.
void build_model(Run& run, const LlamaConfig& cfg, const LayerPlan& plan) {
  const TrainConfig& c = run.c;
  if (run.grid.tp > 1) try {
      const ParamLayout check(cfg, run.grid.tp, run.grid.tp_rank, plan.tp_shards(run.grid.tp));
    } catch (const Error& e) {
      c.fail("parallelism.tp", e.what());
    }
  try {
    plan.check_model(cfg, run.grid.tp);
  } catch (const Error& e) {
    c.fail("model.plan", e.what());
  }
  StageHolding holding;
  if (run.grid.pp > 1) {
    // Stages with early exits hold the head too (its gradients summed).
    const int S = int(run.stage_first.size()) - 1;
    holding = stage_holding(run.stage_first, run.grid.pp, run.grid.pp_rank,
                            std::vector<bool>(size_t(S), c.layerskip.early_exit()));
  }
  try {
    run.model = std::make_unique<Model<float>>(
        cfg, plan, std::move(run.backend), run.grid.tp > 1 ? run.tp : nullptr,
        run.zero() >= 2 ? zero_store_factory(*run.dp, run.zero(), &run.zero_store)
                        : WeightStoreFactory<float>(),
        holding);
    if (run.grid.pp > 1)
      run.pipe = std::make_unique<StageRunner<float>>(*run.model, *run.pp, run.stage_first,
                                                      pipeline::parse_schedule(c.parallel.schedule),
                                                      c.parallel.virtual_stages);
  } catch (const Error& e) {
    fail_one_line(c.files().back(), ": ", e.what());
  }
  if (run.grid.pp > 1) log_pipeline(run);
}

// training.precision: bf16 under auto only where every process has native
// bf16 matmuls (nodes may differ).
void set_precision(Run& run) {
  ops::MatmulPrecision matmul = ops::MatmulPrecision::FP32;
  std::string precision = run.c.training.precision;
  ops::parse_matmul_precision(precision, run.model->backend().native_bf16(), &matmul);
  if (precision == "auto") {
    const int64_t native = run.model->backend().native_bf16();
    const int64_t all = run.world() > 1 ? run.grid.world->allreduce_sum(native) : native;
    matmul = all == run.world() ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32;
    precision = cat("auto -> ", matmul == ops::MatmulPrecision::BF16 ? "bf16" : "fp32");
  }
  run.model->backend().set_matmul_precision(matmul);
  run.precision = precision;
  const bool bf16_acts =
      bf16_activations(run.c.training, run.device, matmul == ops::MatmulPrecision::BF16);
  run.model->set_activation_storage(bf16_acts ? ops::Dtype::BF16 : ops::Dtype::F32);
  run.activations =
      cat(run.c.training.activations == "auto" ? "auto -> " : "", bf16_acts ? "bf16" : "fp32");
  // model.attention (checked when the recipe was read): cuDNN's needs bf16
  // and a backend that has it.
  ops::AttentionImpl attention = ops::AttentionImpl::Strata;
  ops::parse_attention_impl(run.c.model.attention, &attention);
  if (attention == ops::AttentionImpl::Cudnn && matmul != ops::MatmulPrecision::BF16)
    run.c.fail(
        "model.attention",
        cat("cudnn needs bf16 matmuls (training.precision = \"bf16\"; it is ", precision, ")"));
  try {
    run.model->backend().set_attention(attention);
  } catch (const Error& e) {
    run.c.fail("model.attention", e.what());
  }
}

void log_layerskip(const LayerSkipConfig& ls) {
  if (!ls.enabled()) return;
  log::info("layerskip: layer dropout p_max ", ls.p_max, " (", ls.layer_scale, " over layers, ",
            ls.time_scale, " over time); early exit ",
            ls.early_exit()
                ? cat("e_scale ", ls.e_scale, ", curriculum ", ls.curriculum,
                      ls.curriculum == "rotational" ? cat(" R=", ls.rotation) : "",
                      ls.always_last ? ", last layer always on" : "", ", e(l) ", ls.e_formula)
                : std::string("off"));
}

}  // namespace

void read_parts(const Run& run, const CheckpointReader& reader, const std::string& group,
                const std::vector<int>& tensors, const std::function<float*(int)>& dst) {
  read_tensor_parts(reader, group, run.model->layout(), tensors, dst, &run.model->backend());
}

void setup_model(Run& run, const Source& src) {
  LlamaConfig cfg;
  LayerPlan plan;
  resolve_shape(run, src, cfg, plan);
  // A tokenizer the model cannot embed, refused before data preparation.
  if (run.tokenizer && run.tokenizer->vocab_size() > cfg.vocab_size)
    run.c.fail(run.c.data.tokenizer.empty() ? "model.init_from" : "data.tokenizer",
               cat("the tokenizer ", run.tokenizer->name(), " has ", run.tokenizer->vocab_size(),
                   " pieces but the model's vocabulary is ", cfg.vocab_size));
  if (run.grid.pp > 1) {
    if (run.c.parallel.schedule == "interleaved" && run.c.training.accum % run.grid.pp != 0)
      run.c.fail("training.grad_accum_steps",
                 cat("the interleaved schedule needs a multiple of parallelism.pp = ", run.grid.pp,
                     " micro-batches (got ", run.c.training.accum, ")"));
    run.stage_first = stage_split(run, cfg, plan);
  }
  check_train_memory(run, cfg, plan);
  if (run.dry_run) return;
  run.runtime_rss = process_rss_bytes();
  build_model(run, cfg, plan);
  set_precision(run);
  run.model->set_recompute(run.c.training.recompute);
  run.c.layerskip.validate(cfg.num_hidden_layers, run.c.files().back());
  log_layerskip(run.c.layerskip);
  const ParamLayout& layout = run.model->layout();
  if (src.reader) {
    run.model->write_weights([&](const WeightBucket& k, float* base) {
      std::vector<int> ts;
      for (int t = k.first; t <= k.last; ++t)
        if (layout[t].held) ts.push_back(t);  // (a pipeline stage reads its own)
      read_parts(run, *src.reader, "params", ts,
                 [&](int t) { return base + (layout[t].offset - k.offset); });
    });
  } else {
    run.model->init_weights(run.c.run.seed);
  }
}

}  // namespace strata::train_internal
