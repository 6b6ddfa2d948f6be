// `strata train`: validation, benchmark tasks, checkpoints and metrics (run.h).

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "core/timer.h"
#include "eval/evaluate.h"
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "model/sharding.h"
#include "train/run.h"

namespace strata::train_internal {
namespace {

// One TensorRef per tensor with optimizer state: first (`second` false) or
// second moments.
std::vector<TensorRef> moment_refs(Model<float>& model, AdamW<float>& opt, bool second) {
  std::vector<TensorRef> refs;
  const auto& tensors = model.layout().tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (opt.has_state(int(i)))
      refs.push_back(TensorRef{tensors[i].name, tensors[i].shape,
                               second ? opt.exp_avg_sq(int(i)) : opt.exp_avg(int(i))});
  return refs;
}

}  // namespace

double evaluate(Run& run, int batches) {
  if (!run.make_val_loader || batches <= 0) return -1;
  auto loader = run.make_val_loader();
  // Each data-parallel rank scores its slice of every global batch.
  const int micro_batch = run.c.training.micro_batch;
  const int64_t available = loader->rows_per_epoch() / (int64_t(micro_batch) * run.grid.dp);
  const int n = int(std::max<int64_t>(1, std::min<int64_t>(batches, available)));
  Batch b;
  double sum = 0;
  int64_t count = 0;
  if (run.piped()) {
    // Through the stages; the last one scores (the pass numbers as one
    // process would take them).
    std::vector<Batch> bs(static_cast<size_t>(n));
    std::vector<MicroBatch> mbs;
    const uint64_t base = run.model->next_pass();
    for (int i = 0; i < n; ++i) {
      loader->next(micro_batch, bs[size_t(i)], run.grid.dp_rank, run.grid.dp);
      mbs.push_back(
          {bs[size_t(i)].tokens.data(), bs[size_t(i)].targets.data(), nullptr, base + uint64_t(i)});
    }
    const LossResult res = run.pipe->forward_loss(mbs, bs[0].B, bs[0].T);
    run.model->restart_passes(base + uint64_t(n));
    sum = run.pp->allreduce_sum(res.loss_sum);
    count = run.pp->allreduce_sum(res.n_valid);
  }
  for (int i = 0; i < n && !run.piped(); ++i) {
    loader->next(micro_batch, b, run.grid.dp_rank, run.grid.dp);
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
  const EvalSection& e = run.c.eval;
  EvalOptions o;
  o.tasks = e.tasks;
  o.limit = e.task_limit;
  o.shots = e.task_shots;
  o.eval_dir = e.task_dir;
  o.batch_size = run.c.training.micro_batch;
  o.seed = run.c.run.seed;
  o.progress = false;
  o.allow_code_execution = e.allow_code_execution;
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
  d.recipe = run.c.recipe->to_toml();
  d.state = {{"step", run.step},
             {"tokens_seen", run.tokens_seen},
             {"loader", run.train_loader->state()},
             {"run_name", run.c.run.name},
             {"seed", run.c.run.seed}};
  if (run.tokenizer) d.tokenizer = run.tokenizer->model_bytes();
  d.optimizer_step = run.opt->steps_taken();
  const std::string path = checkpoint_path(run.dir(), run.step);
  if (run.world() == 1 && !run.zero_store) {
    d.params = param_refs(*run.model);
    d.exp_avg = moment_refs(*run.model, *run.opt, false);
    d.exp_avg_sq = moment_refs(*run.model, *run.opt, true);
    std::vector<std::vector<float>> host;  // a device backend's tensors, staged
    for (auto* refs : {&d.params, &d.exp_avg, &d.exp_avg_sq})
      stage_to_host(run.model->backend(), *refs, host);
    write_checkpoint(path, d);
    prune_checkpoints(run.dir(), run.c.checkpoint.keep);
    return path;
  }
  // Checkpoints hold full tensors: the tensor-parallel group of data-parallel
  // rank 0 assembles them (moments from their ZeRO-1 owners, weights and
  // moments gathered from ZeRO-2/3 shards), and world rank 0, a member of
  // it, writes the file. Tensor by tensor, as the writer reaches each: no
  // process holds more than one full tensor and one bucket (the other
  // processes run the same gathers, in the writer's order).
  const ParamLayout& L = run.model->layout();
  const bool assemble = run.grid.dp_rank == 0;
  ops::Backend<float>& be = run.model->backend();
  ZeroShards* const z = run.zero_store;
  std::vector<float> host_part;
  // Pipeline parallelism: a tensor comes from its lowest holding stage (its
  // tp rank 0 of dp rank 0) to world rank 0, in the pipeline group of both.
  const bool piped = run.grid.pp > 1;
  const bool pipe_root = piped && assemble && run.grid.tp_rank == 0;
  // This rank's (tensor-parallel) part of tensor t, in backend memory or on
  // the host, into the full tensor `out` (assembling ranks).
  auto to_full = [&](int t, const float* part, bool on_device, float* out) {
    const int holder = piped ? run.pp_holder[size_t(t)] : 0;
    if (piped && !L[t].held) {  // another stage's
      if (pipe_root && run.grid.pp_rank == 0) run.pp->recv(out, full_numel(L[t]), holder);
      return;
    }
    if (on_device && !be.is_host()) {
      host_part.resize(size_t(L[t].numel));
      be.to_host(host_part.data(), part, L[t].numel);
      part = host_part.data();
    }
    if (assemble) gather_full_tensor(L, t, part, out, *run.tp);
    if (pipe_root && holder != 0 && holder == run.grid.pp_rank)
      run.pp->send(out, full_numel(L[t]), 0);
  };
  // ZeRO-2/3: the bucket of tensor t whole, gathered from the shards of
  // `arena` (one bucket held at a time, while its tensors are written).
  const float* cached_arena = nullptr;
  int cached_bucket = -1;
  ops::DeviceBuffer<float> whole;
  auto from_shards = [&](int t, const float* arena) {
    const int b = run.model->bucket_of(t);
    const WeightBucket& k = z->buckets()[size_t(b)];
    if (arena != cached_arena || b != cached_bucket) {
      if (whole.size() < size_t(k.numel)) {
        whole = ops::DeviceBuffer<float>();
        whole = ops::DeviceBuffer<float>(&be, size_t(k.numel));
      }
      z->gather_bucket(b, arena + z->shard_offset(b), whole.data());
      cached_arena = arena, cached_bucket = b;
    }
    return whole.data() + (L[t].offset - k.offset);
  };
  const int n = int(L.tensors().size());
  for (int t = 0; t < n; ++t)
    d.params.push_back(TensorRef{L[t].name, L[t].full_shape, nullptr, [&, t](float* out) {
                                   const float* part = !L[t].held ? nullptr  // another stage's
                                                       : run.zero() == 3
                                                           ? from_shards(t, z->weight_shard())
                                                           : run.model->param(t);
                                   to_full(t, part, true, out);
                                 }});
  std::vector<float> m;
  for (int t = 0; t < n; ++t) {
    if (run.owner[size_t(t)] < 0) continue;  // frozen: no optimizer state
    for (auto* refs : {&d.exp_avg, &d.exp_avg_sq}) {
      const bool second = refs == &d.exp_avg_sq;
      refs->push_back(TensorRef{
          L[t].name, L[t].full_shape, nullptr, [&, t, second](float* out) {
            if (z) {
              const float* arena = second ? run.opt->exp_avg_sq_arena() : run.opt->exp_avg_arena();
              to_full(t, L[t].held ? from_shards(t, arena) : nullptr, true, out);
              return;
            }
            const ParamInfo& p = L[t];
            m.assign(size_t(p.numel), 0.f);
            if (run.opt->has_state(t))
              be.to_host(m.data(), second ? run.opt->exp_avg_sq(t) : run.opt->exp_avg(t), p.numel);
            if (run.zero() == 1 && run.grid.dp > 1)  // from the tensor's ZeRO-1 owner
              run.dp->broadcast(m.data(), p.numel, run.owner[size_t(t)]);
            to_full(t, m.data(), false, out);
          }});
    }
  }
  if (run.root()) {
    write_checkpoint(path, d);
    prune_checkpoints(run.dir(), run.c.checkpoint.keep);
  } else {
    drain_checkpoint(d);
  }
  run.grid.world->barrier();  // the file is complete before any rank goes on
  return path;
}

namespace {

// TensorBoard's tag for a number of metrics.jsonl, "" for none: training
// numbers under train/ (the step's own loss as train/step_loss), validation
// under eval/; the counters (elapsed time, tokens) stay in metrics.jsonl,
// beside the step axis, rather than becoming charts of their own.
std::string tb_tag(const std::string& key) {
  if (key == "step" || key == "elapsed_s" || key == "tokens") return "";
  if (key == "loss") return "train/step_loss";
  if (key == "loss_window") return "train/loss";
  if (key == "val_loss") return "eval/val_loss";
  if (key.rfind("eval/", 0) == 0) return key;
  return "train/" + key;
}

}  // namespace

void append_metrics(const Run& run, nlohmann::json j) {
  if (!run.root()) return;
  // The console's loss (the mean over the log interval) goes to TensorBoard
  // as train/loss; metrics.jsonl's loss is the step's.
  nlohmann::json window_loss;
  if (j.contains("loss_window")) {
    window_loss = j["loss_window"];
    j.erase("loss_window");
  }
  // One write per record; a full disk stops the run (the step's numbers
  // would be lost otherwise) and leaves no torn line behind.
  append_record(run.metrics_path, j.dump() + "\n", "metrics");
  if (!run.tb) return;
  if (!window_loss.is_null()) j["loss_window"] = window_loss;
  const int64_t step = j.value("step", int64_t(0));
  for (const auto& [key, value] : j.items()) {
    if (value.is_number()) {
      const std::string tag = tb_tag(key);
      if (!tag.empty()) run.tb->scalar(tag, value.get<double>(), step);
    } else if (value.is_object()) {  // exit_loss: {"4": ...} -> exit/4/loss
      for (const auto& [sub, v] : value.items())
        if (v.is_number())
          run.tb->scalar(key == "exit_loss" ? "exit/" + sub + "/loss" : key + "/" + sub,
                         v.get<double>(), step);
    }
  }
}

}  // namespace strata::train_internal
