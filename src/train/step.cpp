// One optimizer step (step.h): the micro-batches, the data-parallel
// strategies and the optimizer.
#include "train/step.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/timer.h"
#include "train/layerskip.h"

namespace strata::train_internal {

DebugSwitches DebugSwitches::from_env() {
  auto is_zero = [](const char* name) {
    const char* v = std::getenv(name);
    return v && std::string(v) == "0";
  };
  DebugSwitches d;
  d.zero_prefetch = !is_zero("STRATA_ZERO_PREFETCH");
  d.progress_polls = !is_zero("STRATA_PROGRESS_POLLS");
  d.layerskip_masks = std::getenv("STRATA_DEBUG_LAYERSKIP") != nullptr;
  d.dp_wait = std::getenv("STRATA_DEBUG_DP_WAIT") != nullptr;
  return d;
}

namespace {

// Every rank updates its copy of every trainable tensor. Under data
// parallelism, on the last micro-batch of a step, each range of gradients is
// summed over the dp group as soon as backward has finished it (one bucket
// per layer), overlapping the all-reduce with the rest of the backward; the
// step waits for them before the optimizer.
class Replicated : public DataParallel {
 public:
  Replicated(Run& run, const DebugSwitches& debug) : run_(run), debug_(debug) {
    if (!synced()) return;
    // The outstanding all-reduces advance between the kernels of backward:
    // only the thread that calls MPI drives them (the hang watchdog's thread
    // talks on its own communicator), so nothing else advances them
    // while compute runs.
    if (debug.progress_polls) run.model->set_progress_hook([&run] { run.dp->progress(); });
    on_ready_ = [this](int64_t offset, int64_t n) {
      pending_.push_back(run_.dp->allreduce_sum_async(run_.model->grads() + offset, n));
      if (debug_.progress_polls) run_.dp->progress();
    };
  }
  void before_micro_batch(size_t i, size_t n) override {
    if (synced())
      run_.model->set_grad_ready_hook(i + 1 == n ? on_ready_
                                                 : std::function<void(int64_t, int64_t)>());
  }
  void finish_gradients() override {
    for (int64_t h : pending_) run_.dp->wait(h);
    pending_.clear();
  }
  double optimizer_step(double lr) override {
    return run_.opt->step(run_.model->params(), run_.model->grads(), lr);
  }

 protected:
  bool synced() const { return run_.grid.dp > 1; }
  Run& run_;
  DebugSwitches debug_;
  std::vector<int64_t> pending_;
  std::function<void(int64_t, int64_t)> on_ready_;
};

// ZeRO-1: the moments are sharded by tensor; each tensor's owner sends its
// update to the others.
class Zero1 : public Replicated {
 public:
  using Replicated::Replicated;
  void publish() override {
    for (size_t t = 0; t < run_.owner.size(); ++t)
      if (run_.owner[t] >= 0)
        run_.dp->broadcast(run_.model->param(int(t)), run_.model->layout()[int(t)].numel,
                           run_.owner[t]);
  }
};

// ZeRO-2/3: the weight store reduce-scatters each bucket's gradients as
// backward finishes them (and polls the group between kernels itself).
class Zero23 : public DataParallel {
 public:
  Zero23(Run& run, const DebugSwitches& debug) : run_(run), z_(*run.zero_store) {
    if (!debug.zero_prefetch) z_.set_prefetch(false);
  }
  void before_micro_batch(size_t, size_t) override {}
  void finish_gradients() override {}
  double optimizer_step(double lr) override {
    return sharded_step(*run_.opt, z_, run_.zero() == 2 ? run_.model->params() : nullptr, lr);
  }
  void report(int64_t steps) const override {
    log::info("ZeRO-", run_.zero(), ": per step and rank ",
              human_bytes(double(z_.gathered_bytes()) / double(steps)),
              " of weights all-gathered, ",
              human_bytes(double(z_.scattered_bytes()) / double(steps)),
              " of gradients reduce-scattered; waited ",
              fixed(1e3 * z_.gather_wait_seconds() / double(steps), 1), " ms for gathers, ",
              fixed(1e3 * z_.scatter_wait_seconds() / double(steps), 1),
              " ms for reduce-scatters (the rest overlapped compute)");
  }

 private:
  Run& run_;
  ZeroShards& z_;
};

// A non-finite loss or gradient norm: the step is not taken and the run stops
// in one line naming the step and the newest checkpoint (all saved from
// finite states), from which a resume with gentler settings can start.
[[noreturn]] void stop_diverged(const Run& run, const char* what, double value) {
  const auto ckpts = list_checkpoints(run.dir());
  fail(cat("training diverged at step ", run.step + 1, ": the ", what, " is ",
           std::isnan(value) ? std::string("NaN") : cat(value), " (the update was not applied); ",
           ckpts.empty() ? std::string("no checkpoint was written")
                         : cat("the last good checkpoint is ", ckpts.back().second, " (step ",
                               ckpts.back().first, ")"),
           "; lower optimizer.lr, raise lr_scheduler.warmup_steps or set training.grad_clip"));
}

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(Run& run, const DebugSwitches& debug) {
  if (run.zero_store) return std::make_unique<Zero23>(run, debug);
  if (run.zero() == 1 && run.grid.dp > 1) return std::make_unique<Zero1>(run, debug);
  return std::make_unique<Replicated>(run, debug);
}

StepRunner::StepRunner(Run& run, const DebugSwitches& debug)
    : run_(run),
      debug_(debug),
      dp_(make_data_parallel(run, debug)),
      micro_(size_t(run.c.training.accum)) {}

LayerSkipStep StepRunner::layerskip(size_t i, const Batch& b,
                                    const std::vector<double>& exit_weight) const {
  const LayerSkipConfig& ls = run_.c.layerskip;
  const int L = run_.model->config().num_hidden_layers;
  const int64_t steps = run_.c.training.steps;
  const uint64_t seed = run_.c.run.seed;
  LayerSkipStep skip;
  // Global sample index: micro-batch i of the step, dp rank, row.
  const int64_t first = (int64_t(i) * run_.grid.dp + run_.grid.dp_rank) * b.B;
  skip.keep = layerskip_keep_masks(ls, L, run_.step, steps, seed, first, b.B);
  skip.exit_weight = exit_weight;
  if (debug_.layerskip_masks) {  // for tests: every rank prints digests of its masks and of
                                 // the whole global micro-batch's (which it can compute too)
    auto digest = [](const std::vector<std::vector<uint8_t>>& keep) {
      std::string bits;
      for (const auto& k : keep) bits.append(k.begin(), k.end());
      return sha256_hex(bits).substr(0, 16);
    };
    const auto global = layerskip_keep_masks(ls, L, run_.step, steps, seed,
                                             int64_t(i) * run_.grid.dp * b.B, b.B * run_.grid.dp);
    std::fprintf(stderr, "layerskip masks: rank %d dp %d step %lld micro %zu local %s global %s\n",
                 run_.grid.world_rank, run_.grid.dp_rank, (long long)run_.step + 1, i,
                 digest(skip.keep).c_str(), digest(global).c_str());
  }
  return skip;
}

// The step's micro-batches through the whole model, one after the other.
void StepRunner::whole_micro_batches(int64_t n_valid, const std::vector<double>& exit_weight,
                                     double& loss_sum, std::vector<double>& exit_sum,
                                     std::vector<bool>& exit_on) {
  Run& run = run_;
  const LayerSkipConfig& ls = run.c.layerskip;
  const int L = run.model->config().num_hidden_layers;
  for (size_t i = 0; i < micro_.size(); ++i) {
    dp_->before_micro_batch(i, micro_.size());
    const Batch& b = micro_[i];
    LayerSkipStep skip;
    if (ls.enabled()) skip = layerskip(i, b, exit_weight);
    const LossResult res = run.model->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T,
                                                       n_valid ? 1.0 / double(n_valid) : 0.0,
                                                       ls.enabled() ? &skip : nullptr);
    loss_sum += res.loss_sum;
    if (ls.early_exit())
      for (int l = 0; l < L; ++l)
        if (!std::isnan(res.exit_loss_sum[size_t(l)])) {
          exit_sum[size_t(l)] += res.exit_loss_sum[size_t(l)];
          exit_on[size_t(l)] = true;
        }
  }
}

// Pipeline parallelism: the step's micro-batches through this rank's stages
// in the schedule's order (StageRunner); each stage's gradients are final
// after its last backward, where the data-parallel all-reduce starts. Every
// stage then learns the loss (the last stage's) and each exit's. Returns the
// step's measured bubble.
double StepRunner::pipeline_micro_batches(int64_t n_valid, const std::vector<double>& exit_weight,
                                          double& loss_sum, std::vector<double>& exit_sum,
                                          std::vector<bool>& exit_on) {
  Run& run = run_;
  Model<float>& m = *run.model;
  const LayerSkipConfig& ls = run.c.layerskip;
  const size_t n = micro_.size();
  std::vector<LayerSkipStep> skips(n);
  std::vector<MicroBatch> mbs;
  // The whole model's pass numbers: the step's micro-batches take the next n.
  const uint64_t base = m.next_pass();
  for (size_t i = 0; i < n; ++i) {
    const Batch& b = micro_[i];
    if (ls.enabled()) skips[i] = layerskip(i, b, exit_weight);
    mbs.push_back(
        {b.tokens.data(), b.targets.data(), ls.enabled() ? &skips[i] : nullptr, base + i});
  }
  run.pipe->set_before_backward(
      [&](int, bool last) { dp_->before_micro_batch(last ? n - 1 : 0, n); });
  const auto res =
      run.pipe->step(mbs, micro_[0].B, micro_[0].T, n_valid ? 1.0 / double(n_valid) : 0.0);
  run.pipe->set_before_backward(nullptr);
  m.restart_passes(base + n);
  loss_sum = run.pp->allreduce_sum(res.loss.loss_sum);
  const double bubble =
      run.pp->allreduce_sum(res.wall > 0 ? res.idle / res.wall : 0.0) / run.grid.pp;
  if (!ls.early_exit()) return bubble;
  // The exits with a loss this step are the weighted ones (and the last
  // layer), the same on every stage: only their sums cross the group.
  const size_t L = exit_sum.size();
  for (size_t l = 0; l < L; ++l) {
    exit_on[l] = l + 1 == L || exit_weight[l] > 0;
    if (!exit_on[l]) continue;
    const double x = res.loss.exit_loss_sum[l];
    exit_sum[l] = run.pp->allreduce_sum(std::isnan(x) ? 0.0 : x);
  }
  return bubble;
}

StepResult StepRunner::run_step(double lr) {
  Run& run = run_;
  const TrainingSection& t = run.c.training;
  const LayerSkipConfig& ls = run.c.layerskip;
  const int L = run.model->config().num_hidden_layers;
  const bool synced = run.grid.dp > 1;
  Timer step_timer;
  const double comm_before = run.tp->seconds() + run.dp->seconds();
  const double wait_before = run.dp->wait_seconds(), poll_before = run.dp->progress_seconds();
  StepResult r;
  r.lr = lr;
  int64_t n_valid = 0;
  for (auto& b : micro_) {
    run.train_loader->next(t.micro_batch, b, run.grid.dp_rank, run.grid.dp);
    n_valid += b.count_targets();
  }
  if (synced) n_valid = run.dp->allreduce_sum(n_valid);  // the loss is a global mean
  run.model->zero_grad();
  double loss_sum = 0;
  std::vector<double> exit_sum(size_t(L), 0.0);
  r.exit_on.assign(size_t(L), false);
  // The step's exit weights (the same for all its micro-batches).
  const std::vector<double> exit_weight =
      ls.enabled() ? layerskip_exit_weights(ls, L, run.step, t.steps) : std::vector<double>();
  // The weights stay as they are until the optimizer step: the backend may
  // convert each once for all the micro-batches (not under ZeRO-3, whose
  // weights pass through reused buffers).
  Model<float>& m = *run.model;
  const ops::HeldWeights<float> held(m.backend(), m.weights_resident() ? m.params() : nullptr,
                                     m.num_params());
  if (run.piped())
    r.bubble = pipeline_micro_batches(n_valid, exit_weight, loss_sum, exit_sum, r.exit_on);
  else
    whole_micro_batches(n_valid, exit_weight, loss_sum, exit_sum, r.exit_on);
  if (synced) {
    // STRATA_DEBUG_DP_WAIT: the barrier separates the ranks' imbalance from
    // the all-reduces' own tail (the waits after it).
    double imbalance = 0;
    if (debug_.dp_wait) {
      Timer bt;
      run.dp->barrier();
      imbalance = bt.seconds();
    }
    const double wait0 = run.dp->wait_seconds();
    dp_->finish_gradients();
    if (debug_.dp_wait)
      std::fprintf(stderr,
                   "dp wait: rank %d step %lld | imbalance %.1f ms | all-reduce tail %.1f ms | "
                   "polls %.1f ms\n",
                   run.grid.dp_rank, (long long)run.step + 1, 1e3 * imbalance,
                   1e3 * (run.dp->wait_seconds() - wait0),
                   1e3 * (run.dp->progress_seconds() - poll_before));
    loss_sum = run.dp->allreduce_sum(loss_sum);
    if (ls.early_exit())
      for (int l = 0; l < L; ++l)
        if (r.exit_on[size_t(l)]) exit_sum[size_t(l)] = run.dp->allreduce_sum(exit_sum[size_t(l)]);
  }
  // The stages that hold the head or a tied embedding beside another sum
  // their gradients of it (after data parallelism summed each stage's).
  // (ZeRO-2/3: each holder's shard of them, the same slice on every holder.)
  if (run.piped() && run.zero_store)
    sum_shared_gradient_shards(*run.zero_store, m.layout(), *run.pp);
  else if (run.piped())
    sum_shared_gradients(m, *run.pp);
  r.exit_loss.assign(size_t(L), 0.0);
  for (int l = 0; l < L; ++l) {
    r.exit_on[size_t(l)] = r.exit_on[size_t(l)] && n_valid && ls.early_exit();
    if (r.exit_on[size_t(l)]) r.exit_loss[size_t(l)] = exit_sum[size_t(l)] / double(n_valid);
  }
  r.loss = n_valid ? loss_sum / double(n_valid) : 0.0;
  if (!std::isfinite(r.loss)) stop_diverged(run, "loss", r.loss);
  r.gnorm = dp_->optimizer_step(lr);
  if (!std::isfinite(r.gnorm)) stop_diverged(run, "gradient norm", r.gnorm);  // nothing updated
  dp_->publish();
  ++run.step;
  r.comm = run.tp->seconds() + run.dp->seconds() - comm_before;
  r.wall = step_timer.seconds();
  r.grad_wait = run.dp->wait_seconds() - wait_before;
  r.poll = run.dp->progress_seconds() - poll_before;
  r.tokens = int64_t(t.accum) * t.micro_batch * run.grid.dp * t.seq_len;
  run.tokens_seen += r.tokens;
  return r;
}

}  // namespace strata::train_internal
