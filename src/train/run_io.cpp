// `strata train`: validation, benchmark tasks, checkpoints and metrics (run.h).

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
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
#include "model/sharding.h"
#include "parallel/grid.h"
#include "parallel/timed_comm.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

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
  o.allow_code_execution = run.r.get_bool("eval.allow_code_execution");
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
  if (run.world() == 1 && !run.zero_store) {
    d.params = param_refs(*run.model);
    d.exp_avg = moment_refs(*run.model, *run.opt, false);
    d.exp_avg_sq = moment_refs(*run.model, *run.opt, true);
    std::vector<std::vector<float>> host;  // a device backend's tensors, staged
    for (auto* refs : {&d.params, &d.exp_avg, &d.exp_avg_sq})
      stage_to_host(run.model->backend(), *refs, host);
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
  ops::Backend<float>& be = run.model->backend();
  std::vector<float> staged;
  // `part` is host memory; `on_device` parts are staged first.
  auto full = [&](int t, const float* part, bool on_device = false) {
    if (on_device && !be.is_host()) {
      staged.resize(size_t(L[t].numel));
      be.to_host(staged.data(), part, L[t].numel);
      part = staged.data();
    }
    std::vector<float> f(size_t(full_numel(L[t])));
    gather_full_tensor(L, t, part, f.data(), *run.tp);
    store.push_back(std::move(f));
    return TensorRef{L[t].name, L[t].full_shape, store.back().data()};
  };
  const int n = int(L.tensors().size());
  // (Bucket by bucket: under ZeRO-3 every data-parallel rank takes part in
  // gathering each one.)
  run.model->read_weights([&](const WeightBucket& k, const float* base) {
    if (assemble)
      for (int t = k.first; t <= k.last; ++t)
        d.params.push_back(full(t, base + (L[t].offset - k.offset), true));
  });
  if (run.zero_store) {  // ZeRO-2/3: each bucket's moments gathered from the shards
    ZeroShards& z = *run.zero_store;
    ops::DeviceBuffer<float> whole;
    for (size_t b = 0; b < z.buckets().size(); ++b) {
      const WeightBucket& k = z.buckets()[b];
      bool trains = false;
      for (int t = k.first; t <= k.last; ++t) trains |= run.owner[size_t(t)] >= 0;
      if (!trains) continue;
      if (whole.size() < size_t(k.numel)) whole = ops::DeviceBuffer<float>(&be, size_t(k.numel));
      for (auto* refs : {&d.exp_avg, &d.exp_avg_sq}) {
        float* arena = refs == &d.exp_avg ? run.opt->exp_avg_arena() : run.opt->exp_avg_sq_arena();
        z.gather_bucket(int(b), arena + z.shard_offset(int(b)), whole.data());
        if (assemble)
          for (int t = k.first; t <= k.last; ++t)
            if (run.owner[size_t(t)] >= 0)
              refs->push_back(full(t, whole.data() + (L[t].offset - k.offset), true));
      }
    }
  }
  std::vector<float> m, v;
  for (int t = 0; t < n && !run.zero_store; ++t) {
    if (run.owner[size_t(t)] < 0) continue;  // frozen: no optimizer state
    const ParamInfo& p = L[t];
    m.assign(size_t(p.numel), 0.f);
    v.assign(size_t(p.numel), 0.f);
    if (run.opt->has_state(t)) {
      run.model->backend().to_host(m.data(), run.opt->exp_avg(t), p.numel);
      run.model->backend().to_host(v.data(), run.opt->exp_avg_sq(t), p.numel);
    }
    if (run.zero == 1 && run.grid.dp > 1) {
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
  // One write per record; a full disk stops the run (the step's numbers
  // would be lost otherwise) and leaves no torn line behind.
  append_record(run.metrics_path, j.dump() + "\n", "metrics");
  if (!run.tb) return;
  // The same numbers as TensorBoard scalars: "loss", "val_loss", ...;
  // objects (exit_loss, eval/...) as "exit_loss/3".
  const int64_t step = j.value("step", int64_t(0));
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    if (value.is_number()) run.tb->scalar(key, value.get<double>(), step);
    if (value.is_object())
      for (const auto& [sub, v] : value.items())
        if (v.is_number()) run.tb->scalar(key + "/" + sub, v.get<double>(), step);
  }
}

}  // namespace strata::train_internal
