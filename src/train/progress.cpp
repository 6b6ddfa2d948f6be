// Around the steps (progress.h): the logging window, validation, checkpoints,
// the stop agreement and the end of a run.
#include "train/progress.h"

#include <cmath>
#include <cstdio>

#include "core/file.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/signals.h"
#include "core/text.h"
#include "infer/generate.h"

namespace strata::train_internal {

MetricsWindow::MetricsWindow(const Run& run)
    : run_(run),
      first_step_(run.step),
      exit_(size_t(run.model->config().num_hidden_layers), 0.0),
      exit_n_(exit_.size(), 0) {}

void MetricsWindow::add(const StepResult& s) {
  if (run_.step > first_step_ + 1) run_bubble_ += s.bubble;  // the first step warms up
  run_tokens_ += s.tokens;
  run_wall_ += s.wall;
  run_comm_ += s.comm;
  comm_ += s.comm;
  grad_wait_ += s.grad_wait;
  poll_ += s.poll;
  wall_ += s.wall;
  tokens_ += s.tokens;
  loss_ += s.loss;
  ++steps_;
  for (size_t l = 0; l < exit_.size(); ++l)
    if (s.exit_on[l]) {
      exit_[l] += s.exit_loss[l];
      ++exit_n_[l];
    }
}

nlohmann::json MetricsWindow::flush(const StepResult& last) {
  const Run& run = run_;
  const int L = int(exit_.size());
  const double tps = double(tokens_) / timer_.seconds();
  const double elapsed = total_.seconds();
  const double eta =
      elapsed / double(run.step - first_step_) * double(run.c.training.steps - run.step);
  std::string comm =
      run.world() > 1 ? cat(" | comm ", int(std::lround(100 * comm_ / wall_)), "%") : std::string();
  // Early exits: the window's mean loss at each exit that had one (exit
  // E = output of layer E, 1-based).
  nlohmann::json exits = nlohmann::json::object();
  std::string exit_line;
  for (int l = 0; l < L; ++l)
    if (exit_n_[size_t(l)]) {
      const double v = exit_[size_t(l)] / exit_n_[size_t(l)];
      exits[std::to_string(l + 1)] = v;
      char buf[32];
      std::snprintf(buf, sizeof buf, " %d:%.3f", l + 1, v);
      exit_line += buf;
    }
  // (Printed when an exit below the last layer had a loss.)
  if (exits.size() > 1 || (exits.size() == 1 && !exits.contains(std::to_string(L))))
    comm = " | exits" + exit_line + comm;
  if (run.root())
    std::fprintf(stderr,
                 "step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s%s | %s | "
                 "ETA %s\n",
                 (long long)run.step, (long long)run.c.training.steps, loss_ / steps_, last.lr,
                 last.gnorm, tps, comm.c_str(), human_time(elapsed).c_str(),
                 human_time(eta).c_str());
  nlohmann::json m = {{"step", run.step},        {"loss", last.loss},   {"lr", last.lr},
                      {"grad_norm", last.gnorm}, {"tokens_per_s", tps}, {"tokens", run.tokens_seen},
                      {"elapsed_s", elapsed}};
  if (!exits.empty()) m["exit_loss"] = exits;
  m["loss_window"] = loss_ / steps_;  // the console's loss (TensorBoard only)
  m["step_s"] = wall_ / steps_;       // wall time per step, of which
  m["comm_s"] = comm_ / steps_;       // waiting in collectives
  if (run.grid.pp > 1) m["pipeline_bubble"] = last.bubble;
  if (run.grid.dp > 1) {  // of which: the gradient all-reduces' tail after backward, and polls
    m["grad_wait_s"] = grad_wait_ / steps_;
    m["poll_s"] = poll_ / steps_;
  }
  std::fill(exit_.begin(), exit_.end(), 0.0);
  std::fill(exit_n_.begin(), exit_n_.end(), 0);
  comm_ = wall_ = grad_wait_ = poll_ = 0;
  tokens_ = 0;
  loss_ = 0;
  steps_ = 0;
  timer_.reset();
  return m;
}

int64_t MetricsWindow::summarize(TrainResult& r) const {
  r.tokens_per_s = run_tokens_ ? double(run_tokens_) / total_.seconds() : 0;
  const int64_t steps = run_.step - first_step_;
  if (steps > 0) {
    r.step_s = run_wall_ / double(steps);
    r.comm_s = run_comm_ / double(steps);
  }
  if (steps > 1) r.bubble = run_bubble_ / double(steps - 1);
  return steps;
}

bool Validator::due(bool last) const {
  const int64_t interval = run_.c.eval.interval;
  return (interval > 0 && run_.step % interval == 0) || last;
}

bool Validator::run(const StepResult& s, nlohmann::json& m, TrainResult& result) {
  auto start_record = [&] {
    if (m.is_null()) m = {{"step", run_.step}, {"loss", s.loss}, {"lr", s.lr}};
  };
  if (run_.make_val_loader) {
    Timer t;
    const double val = evaluate(run_, run_.c.eval.batches);
    result.last_val_loss = val;
    if (run_.root())
      std::fprintf(stderr, "eval  step %lld | val_loss %.4f | val_ppl %.2f | %.1fs\n",
                   (long long)run_.step, val, std::exp(val), t.seconds());
    start_record();
    m["val_loss"] = val;
  }
  if (!run_.c.eval.tasks.empty()) {
    start_record();
    run_eval_tasks(run_, m);
  }
  return run_.make_val_loader || !run_.c.eval.tasks.empty();
}

bool Checkpointer::due(bool last, bool stopping) const {
  const CheckpointSection& c = run_.c.checkpoint;
  return (c.interval > 0 && run_.step % c.interval == 0) || (last && c.final) || stopping;
}

std::string Checkpointer::save() {
  const std::string path = train_internal::save(run_);
  log::info("checkpoint: ", path);
  return path;
}

int agree_on_stop(const Run& run) {
  int signal = StopScope::signal();
  if (run.world() > 1) {  // high half: ranks with a signal; low half: their signal numbers
    const int64_t sum =
        run.grid.world->allreduce_sum((int64_t(signal != 0) << 32) | int64_t(signal));
    const int64_t ranks = sum >> 32;
    signal = ranks ? int((sum & 0xffffffff) / ranks) : 0;
  }
  return signal;
}

namespace {

// The sample of log.sample_prompt: one process of a tp = 1 run, or under
// pipeline parallelism the pipeline of data-parallel rank 0, each rank
// running its stages (every rank gets the last stage's logits and samples
// the same token); world rank 0 writes it.
void write_sample(Run& run) {
  const LogSection& lg = run.c.log;
  std::vector<int32_t> ids;
  if (run.tokenizer->bos_id() >= 0) ids.push_back(run.tokenizer->bos_id());
  const auto enc = run.tokenizer->encode(lg.sample_prompt);
  ids.insert(ids.end(), enc.begin(), enc.end());
  GenerateOptions g;
  g.max_new_tokens = lg.sample_tokens;
  g.sampling.temperature = lg.sample_temperature;
  g.sampling.seed = run.c.run.seed;
  g.eos_id = run.tokenizer->eos_id();
  g.more_eos = run.tokenizer->end_of_turn_ids();
  std::vector<int32_t> out;
  if (run.piped()) {
    const LlamaConfig& cfg = run.model->config();
    auto last_logits = [&](const int32_t* seq, int T, float* logits) {
      run.pipe->last_logits(seq, T, logits);
    };
    out = generate_simple(last_logits, cfg.vocab_size, cfg.max_position_embeddings, ids, g);
  } else {
    out = generate_simple(*run.model, ids, g);
  }
  if (!run.root()) return;
  const std::string text = lg.sample_prompt + run.tokenizer->decode(out);
  std::fprintf(stderr, "sample (temperature %.2f):\n%s\n", g.sampling.temperature, text.c_str());
  write_file_atomic(run.dir() + "/sample.txt", text + "\n");
}

// Each pipeline rank's peak against its own estimate (its stages differ), as
// world rank 0's pipeline measured them. Collective over each pipeline group.
void log_stage_memory(const Run& run, const TrainResult& result) {
  const int p = run.grid.pp;
  std::vector<float> mb(size_t(2 * p), 0.f);  // MB: floats carry them exactly enough
  mb[size_t(run.grid.pp_rank)] = float(double(result.peak_rss_bytes) / 1e6);
  mb[size_t(p + run.grid.pp_rank)] = float(double(result.estimate_bytes) / 1e6);
  run.pp->allreduce_sum(mb.data(), int64_t(mb.size()));
  std::string ranks;
  for (int r = 0; r < p; ++r)
    ranks += cat(r ? "; " : "", "rank ", r, " ", human_bytes(1e6 * mb[size_t(r)]), " (estimate ",
                 human_bytes(1e6 * mb[size_t(p + r)]), ")");
  log::info("memory per pipeline rank: peak resident ", ranks);
}

}  // namespace

void finish_run(Run& run, const DataParallel& dp, const MetricsWindow& window,
                TrainResult& result) {
  result.steps_done = run.step;
  const int64_t steps_run = window.summarize(result);
  if (steps_run > 0) {
    dp.report(steps_run);
    if (run.world() == 1)
      log::info("time per step: ", fixed(1e3 * result.step_s, 1), " ms (one process)");
    else
      log::info("time per step: ", fixed(1e3 * result.step_s, 1), " ms = compute ",
                fixed(1e3 * (result.step_s - result.comm_s), 1), " ms + communication ",
                fixed(1e3 * result.comm_s, 1), " ms (dp ", run.grid.dp, " x tp ", run.grid.tp,
                ", communication not hidden by compute)");
  }
  if (run.grid.pp > 1 && steps_run > 1) {
    const auto kind = pipeline::parse_schedule(run.c.parallel.schedule);
    log::info("pipeline: the stages waited for each other ", fixed(100 * result.bubble, 1),
              "% of the schedule's time (the measured bubble, mean over the ", run.grid.pp,
              " ranks and the steps after the first; with equal stages and free messages ",
              pipeline::schedule_name(kind), " leaves ",
              fixed(100 * pipeline::bubble_formula(kind, run.grid.pp, run.c.training.accum,
                                                   run.c.parallel.virtual_stages),
                    1),
              "%)");
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
  if (run.grid.pp > 1 && steps_run > 0) log_stage_memory(run, result);
  const std::string& prompt = run.c.log.sample_prompt;
  if (!prompt.empty() && run.zero() == 3 && !result.interrupted)
    log::info(
        "sample: none under ZeRO-3 (the weights are sharded); generate from the checkpoint "
        "with `strata generate`");
  const bool sampler = run.grid.pp > 1 ? run.grid.dp_rank == 0 : run.root();
  if (!prompt.empty() && run.tokenizer && !result.interrupted && run.grid.tp == 1 && sampler &&
      run.zero() != 3)
    write_sample(run);
  if (result.losses.empty())  // resumed at its last step: nothing was trained
    log::info("done: the run is already at step ", run.step, " of ", run.c.training.steps,
              "; nothing to train (raise training.steps to continue)");
  else
    log::info("done: ", run.step, " steps, last loss ", result.last_loss,
              result.last_val_loss >= 0 ? cat(", val_loss ", result.last_val_loss) : std::string(),
              ", ", static_cast<long>(result.tokens_per_s), " tokens/s");
}

}  // namespace strata::train_internal
