// `strata train`: what trains and how (run.h): the trainable mask, the
// optimizer and, under ZeRO-1, which data-parallel rank owns each tensor's
// state; then a resumed run's state (moments, step, data position) or an
// init_from checkpoint's moments.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/text.h"
#include "train/run.h"
#include "train/trainer.h"

namespace strata::train_internal {
namespace {

// ZeRO-1: each trainable tensor's optimizer state lives on one data-parallel
// rank, the largest tensors first to the least loaded rank (deterministic, the
// same on every rank). Without ZeRO every rank owns every trainable tensor.
void assign_owners(Run& run, const std::vector<bool>& trainable) {
  const ParamLayout& L = run.model->layout();
  const int n = int(L.tensors().size());
  run.owner.assign(size_t(n), -1);
  if (run.zero() != 1 || run.grid.dp == 1) {  // ZeRO-2/3 shard by bucket (model/zero.h)
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

// The tensors of bucket k that this rank holds (a pipeline stage: its own),
// only those of `only` when given.
std::vector<int> bucket_tensors(const ParamLayout& layout, const WeightBucket& k,
                                const std::vector<bool>* only) {
  std::vector<int> ts;
  for (int t = k.first; t <= k.last; ++t)
    if (layout[t].held && (!only || (*only)[size_t(t)])) ts.push_back(t);
  return ts;
}

// The moments this rank holds, read from a checkpoint.
void read_moments(Run& run, const CheckpointReader& rd) {
  const ParamLayout& layout = run.model->layout();
  if (run.zero_store) {  // whole buckets read, this rank's shard kept
    ZeroShards& z = *run.zero_store;
    size_t widest = 0;
    for (const WeightBucket& k : z.buckets()) widest = std::max(widest, size_t(k.numel));
    ops::DeviceBuffer<float> whole(&run.model->backend(), widest);
    for (size_t b = 0; b < z.buckets().size(); ++b) {
      const WeightBucket& k = z.buckets()[b];
      const std::vector<int> ts = bucket_tensors(layout, k, &run.trainable);
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
  std::vector<int> stateful;
  for (int t = 0; t < int(layout.tensors().size()); ++t)
    if (run.opt->has_state(t) && layout[t].held) stateful.push_back(t);  // (a stage: its own)
  read_parts(run, rd, "optimizer/exp_avg", stateful, [&](int t) { return run.opt->exp_avg(t); });
  read_parts(run, rd, "optimizer/exp_avg_sq", stateful,
             [&](int t) { return run.opt->exp_avg_sq(t); });
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

}  // namespace

void setup_optimizer(Run& run) {
  const TrainConfig& c = run.c;
  const ParamLayout& layout = run.model->layout();
  std::vector<std::string> names;
  for (const auto& t : layout.tensors()) names.push_back(t.name);
  // The trainable patterns alone first, so a bad freeze pattern is blamed on
  // training.freeze (and where it was set), not on training.trainable.
  const char* pattern_key = c.training.freeze.empty() ? "training.trainable" : "training.freeze";
  resolve_trainable(names, c.training.trainable, {},
                    cat(c.where("training.trainable"), ": training.trainable"));
  run.trainable = resolve_trainable(names, c.training.trainable, c.training.freeze,
                                    cat(c.where(pattern_key), ": ", pattern_key));
  const std::vector<bool>& mask = run.trainable;
  run.model->set_trainable(mask);
  assign_owners(run, mask);
  if (run.zero_store) {
    // ZeRO-2/3: this rank's slices of the trainable tensors; the weights it
    // updates are the model's arena (stage 2) or the store's shard (stage 3).
    run.opt = make_sharded_adamw(run.model->backend(), layout, c.optimizer, *run.zero_store, mask);
  } else {
    std::vector<bool> owned(mask.size());
    for (size_t t = 0; t < mask.size(); ++t) owned[t] = run.owner[t] == run.grid.dp_rank;
    run.opt =
        std::make_unique<AdamW<float>>(run.model->backend(), layout, c.optimizer, mask, owned);
  }
  if (run.grid.tp > 1) run.opt->set_tp_comm(run.tp);
  if (run.grid.pp > 1) {
    // The gradient norm adds every stage's; a tensor several stages hold
    // (the head on exit stages, a tied embedding) counts on the lowest.
    // (Every tensor's lowest holder is where a checkpoint takes it from.)
    // One all-reduce: held[t][r] is 1 where pipeline rank r holds tensor t.
    const size_t n = layout.tensors().size(), p = size_t(run.grid.pp);
    std::vector<float> held(n * p, 0.f);
    for (size_t t = 0; t < n; ++t) held[t * p + size_t(run.grid.pp_rank)] = layout[int(t)].held;
    run.pp->allreduce_sum(held.data(), int64_t(held.size()));
    std::vector<bool> counted(n);
    run.pp_holder.assign(n, -1);
    for (size_t t = 0; t < n; ++t) {
      for (size_t r = 0; r < p && run.pp_holder[t] < 0; ++r)
        if (held[t * p + r] > 0) run.pp_holder[t] = int(r);
      counted[t] = run.pp_holder[t] == run.grid.pp_rank;
    }
    run.opt->set_pp_comm(run.pp, counted);
  }
}

void restore_state(Run& run, const Source& src) {
  if (!src.resume.empty()) {
    STRATA_CHECK(src.reader->has_optimizer(), src.resume,
                 ": has no optimizer state to resume from");
    read_moments(run, *src.reader);
    run.opt->set_steps_taken(src.reader->optimizer_step());
    run.step = src.info.state.at("step").get<int64_t>();  // checked by open_source
    run.tokens_seen = src.info.state.at("tokens_seen").get<int64_t>();
    STRATA_CHECK(src.info.state.contains("loader"), src.resume,
                 ": state has no data loader position");
    if (run.restart_data)
      log::info(
          "resume: the data changed (checkpoint.resume_changes): the loader starts at its "
          "beginning");
    else
      run.train_loader->set_state(src.info.state.at("loader"));
    if (run.root()) truncate_metrics(run.metrics_path, run.step);
    log::info("resume: ", src.resume, " at step ", run.step);
    return;
  }
  if (!src.init_from.empty() && run.c.load_optimizer_state) {
    STRATA_CHECK(src.reader->has_optimizer(), src.init_from,
                 ": has no optimizer state (optimizer.load_state = true)");
    read_moments(run, *src.reader);
    run.opt->set_steps_taken(src.reader->optimizer_step());
  }
  if (run.root()) std::remove(run.metrics_path.c_str());
  if (!src.init_from.empty()) log::info("init: weights from ", src.init_from);
}

}  // namespace strata::train_internal
