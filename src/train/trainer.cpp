// `strata train`: the step loop over a Run set up by run_setup.cpp (run.h).
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
#include "model/model.h"
#include "model/sharding.h"
#include "parallel/grid.h"
#include "parallel/timed_comm.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

#include "train/run.h"

namespace strata {
using namespace train_internal;

namespace {

// A non-finite loss or gradient norm: the step is not taken and the run stops
// in one line naming the step and the newest checkpoint (all saved from
// finite states), from which a resume with gentler settings can start.
[[noreturn]] void stop_diverged(const Run& run, const char* what, double value) {
  const auto ckpts = list_checkpoints(run.dir);
  fail(cat("training diverged at step ", run.step + 1, ": the ", what, " is ",
           std::isnan(value) ? std::string("NaN") : cat(value), " (the update was not applied); ",
           ckpts.empty() ? std::string("no checkpoint was written")
                         : cat("the last good checkpoint is ", ckpts.back().second, " (step ",
                               ckpts.back().first, ")"),
           "; lower optimizer.lr, raise lr_scheduler.warmup_steps or set training.grad_clip"));
}

}  // namespace

std::string train_dry_run(const Recipe& recipe, int64_t device_bytes, int world,
                          RecipeLayout own, std::string* refusal) {
  Run run(recipe);
  run.dry_run = true;
  run.plan_memory = device_bytes > 0;
  setup(run);
  std::string out;
  if (!run.plan_memory) {
    out = cat("# memory per process (estimate): ", run.memory.to_string(), "\n");
    if (run.memory_limit.bytes >= 0)
      out += cat("# memory available: ", human_bytes(double(run.memory_limit.bytes)), " (",
                 run.memory_limit.source, ")\n");
    return out;
  }
  if (world <= 0) world = run.world();
  const std::string file = recipe.files().front();
  // The recipe's layout on `world` devices, and its global batch (kept by
  // every layout).
  STRATA_CHECK(own.tp >= 1 && world % own.tp == 0, file, ": parallelism.tp = ", own.tp,
               " does not divide --world ", world);
  const int own_dp = own.dp > 0 ? own.dp : world / own.tp;
  STRATA_CHECK(own.tp * own_dp == world, file, ": parallelism.tp = ", own.tp,
               " x parallelism.dp = ", own_dp, " is not --world ", world);
  const int64_t global = int64_t(run.micro_batch) * run.accum * own_dp;
  const auto layouts = plan_layouts(run.planned_cfg, run.planned_plan, world, run.seq_len, global,
                                    std::max(run.micro_batch, 16), device_bytes,
                                    run.trained_share);
  int fit = 0;
  for (const LayoutOption& o : layouts) fit += o.fits;
  auto flags = [](const LayoutOption& o) {
    return cat("--set parallelism.tp=", o.tp, " --set parallelism.zero=", o.zero,
               " --set training.recompute='\"", recompute_name(o.recompute),
               "\"' --set training.micro_batch_size=", o.micro_batch,
               " --set training.grad_accum_steps=", o.grad_accum);
  };
  if (fit == 0) {
    const auto smallest = std::min_element(layouts.begin(), layouts.end(),
                                           [](const LayoutOption& a, const LayoutOption& b) {
                                             return a.memory.total() < b.memory.total();
                                           });
    STRATA_CHECK(smallest != layouts.end(), file, ": no tensor-parallel degree divides both ",
                 world, " devices and the model's heads, with a data-parallel degree dividing the ",
                 global, " sequences of a step");
    fail_one_line(file, ": no layout on ", world, " devices of ",
                  human_bytes(double(device_bytes)), " fits: the smallest (tp ", smallest->tp,
                  ", ZeRO-", smallest->zero, ", recompute ", recompute_name(smallest->recompute),
                  ", micro-batch ", smallest->micro_batch, ") needs ",
                  human_bytes(double(smallest->memory.total())),
                  " per rank; use more devices or a smaller training.seq_len");
  }
  out += cat("# layouts on ", world, " devices of ", human_bytes(double(device_bytes)), " keeping ",
             global, " sequences per step: ", fit, " of ", layouts.size(),
             " fit (estimate per rank; cost = relative step time, README \"Scaling\"); the best "
             "first:\n");
  char line[256];
  std::snprintf(line, sizeof line, "#  %4s %4s %4s  %-9s %11s %5s %11s %11s %6s\n", "tp", "dp",
                "zero", "recompute", "micro-batch", "accum", "per rank", "room", "cost");
  out += line;
  int shown = 0;
  for (const LayoutOption& o : layouts) {
    if (!o.fits || shown++ == 12) break;
    std::snprintf(line, sizeof line, "#  %4d %4d %4d  %-9s %11d %5d %11s %11s %6.3f\n", o.tp, o.dp,
                  o.zero, recompute_name(o.recompute), o.micro_batch, o.grad_accum,
                  human_bytes(double(o.memory.total())).c_str(),
                  human_bytes(double(device_bytes - o.memory.total())).c_str(), o.cost);
    out += line;
  }
  const LayoutOption& best = layouts.front();
  out += cat("# best: ", flags(best), " (", best.memory.to_string(), ")\n");
  // The recipe's own layout: it must be among those that fit.
  const int own_zero = own_dp > 1 ? own.zero : 0;
  const auto mine = std::find_if(layouts.begin(), layouts.end(), [&](const LayoutOption& o) {
    return o.tp == own.tp && o.zero == own_zero && o.recompute == run.planned_recompute &&
           o.micro_batch == run.micro_batch;
  });
  STRATA_CHECK(mine != layouts.end(), file, ": the recipe's layout (tp ", own.tp, ", dp ", own_dp,
               ", micro-batch ", run.micro_batch, ") is not one the planner considers");
  const std::string what =
      cat("the recipe's layout (tp ", mine->tp, " x dp ", mine->dp, ", ZeRO-", mine->zero,
          ", recompute ", recompute_name(mine->recompute), ", micro-batch ", mine->micro_batch,
          " x ", mine->grad_accum, " accumulated)");
  if (!mine->fits) {
    const std::string why = cat(file, ": ", what, " needs ", human_bytes(double(mine->memory.total())),
                                " per rank, more than the ", human_bytes(double(device_bytes)),
                                " of a device; the best that fits: ", flags(best));
    if (!refusal) fail_one_line(why);
    *refusal = why;
    return out;
  }
  out += cat("# ", what, ": ", human_bytes(double(mine->memory.total())), " per rank, ",
             human_bytes(double(device_bytes - mine->memory.total())), " to spare (",
             mine->memory.to_string(), ")\n");
  return out;
}

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
            " accumulation, ", num_threads(), " threads, device ", run.device);

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
  // ZeRO-2/3: the weight store reduce-scatters each bucket's gradients as
  // backward finishes them (and polls the group between kernels itself).
  ZeroShards* const zs = run.zero_store;
  // STRATA_ZERO_PREFETCH=0: no gather ahead of its unit (to measure the overlap).
  const char* prefetch_env = std::getenv("STRATA_ZERO_PREFETCH");
  if (zs && prefetch_env && std::string(prefetch_env) == "0") zs->set_prefetch(false);
  std::vector<int64_t> pending;
  // The outstanding all-reduces advance between the kernels of backward: with
  // one thread per rank (MPI_THREAD_FUNNELED) nothing else drives them while
  // compute runs. STRATA_PROGRESS_POLLS=0 turns the polls off (to measure them).
  const char* polls_env = std::getenv("STRATA_PROGRESS_POLLS");
  const bool polls = !(polls_env && std::string(polls_env) == "0");
  if (dp_sync && polls && !zs) run.model->set_progress_hook([&] { run.dp->progress(); });
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
      if (dp_sync && !zs)
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
      // STRATA_DEBUG_DP_WAIT: the barrier separates the ranks' imbalance from
      // the all-reduces' own tail (the waits after it).
      double imbalance = 0;
      if (debug_dp_wait) {
        Timer bt;
        run.dp->barrier();
        imbalance = bt.seconds();
      }
      const double wait0 = run.dp->wait_seconds();
      for (int64_t h : pending) run.dp->wait(h);
      if (debug_dp_wait)
        std::fprintf(stderr,
                     "dp wait: rank %d step %lld | imbalance %.1f ms | all-reduce tail %.1f ms | "
                     "polls %.1f ms\n",
                     run.grid.dp_rank, (long long)run.step + 1, 1e3 * imbalance,
                     1e3 * (run.dp->wait_seconds() - wait0),
                     1e3 * (run.dp->progress_seconds() - poll_before));
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
    if (!std::isfinite(loss)) stop_diverged(run, "loss", loss);
    const double gnorm =
        zs ? sharded_step(*run.opt, *zs, run.zero == 2 ? run.model->params() : nullptr, lr)
           : run.opt->step(run.model->params(), run.model->grads(), lr);
    if (!std::isfinite(gnorm)) stop_diverged(run, "gradient norm", gnorm);  // nothing updated
    if (run.zero == 1 && dp_sync)  // ZeRO-1: each tensor's owner sends its update to the others
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
    if (zs)
      log::info("ZeRO-", run.zero, ": per step and rank ",
                human_bytes(double(zs->gathered_bytes()) / double(steps_run)),
                " of weights all-gathered, ",
                human_bytes(double(zs->scattered_bytes()) / double(steps_run)),
                " of gradients reduce-scattered; waited ",
                fixed(1e3 * zs->gather_wait_seconds() / double(steps_run), 1), " ms for gathers, ",
                fixed(1e3 * zs->scatter_wait_seconds() / double(steps_run), 1),
                " ms for reduce-scatters (the rest overlapped compute)");
    if (run.world() == 1)
      log::info("time per step: ", fixed(1e3 * result.step_s, 1), " ms (one process)");
    else
      log::info("time per step: ", fixed(1e3 * result.step_s, 1), " ms = compute ",
                fixed(1e3 * (result.step_s - result.comm_s), 1), " ms + communication ",
                fixed(1e3 * result.comm_s, 1), " ms (dp ", run.grid.dp, " x tp ", run.grid.tp,
                ", communication not hidden by compute)");
  }

  // Memory, before the sample (generation holds caches of its own): the peak
  // against the estimate checked before the model was built.
  result.peak_rss_bytes = peak_rss_bytes();
  result.estimate_bytes = run.memory.total() + run.runtime_rss;
  if (result.peak_rss_bytes > 0 && steps_run > 0)
    log::info("memory: peak resident ", human_bytes(double(result.peak_rss_bytes)),
              run.world() > 1 ? " (rank 0)" : "", "; estimate ",
              human_bytes(double(result.estimate_bytes)), " (",
              human_bytes(double(run.runtime_rss)), " before the model + ",
              human_bytes(double(run.memory.total())), "), ",
              fixed(100.0 * (double(result.estimate_bytes) / double(result.peak_rss_bytes) - 1), 1),
              "% of the peak");
  const std::string prompt = r.get_string("log.sample_prompt");
  if (!prompt.empty() && run.zero == 3 && !result.interrupted)
    log::info("sample: none under ZeRO-3 (the weights are sharded); generate from the checkpoint "
              "with `strata generate`");
  if (!prompt.empty() && run.tokenizer && !result.interrupted && run.grid.tp == 1 && run.root() &&
      run.zero != 3) {
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
  if (result.losses.empty())  // resumed at its last step: nothing was trained
    log::info("done: the run is already at step ", run.step, " of ", run.steps,
              "; nothing to train (raise training.steps to continue)");
  else
    log::info("done: ", run.step, " steps, last loss ", result.last_loss,
              result.last_val_loss >= 0 ? cat(", val_loss ", result.last_val_loss) : std::string(),
              ", ", static_cast<long>(result.tokens_per_s), " tokens/s");
  return result;
}

}  // namespace strata
