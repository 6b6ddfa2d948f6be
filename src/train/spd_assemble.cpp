// `strata spd`: the SPD models per variant and budget, evaluated; the SPD
// checkpoint at the budget; and the driver that runs the stages in order
// (spd_pipeline.h).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "eval/evaluate.h"
#include "model/kinds/kinds.h"
#include "parallel/grid.h"
#include "train/spd_pipeline_state.h"

namespace strata::spd_pipeline {

const char* const kVariantNames[3] = {"zero-shot", "+B2B", "+HG"};

namespace {

int job_of(const State& s, int l, bool hg) {
  for (size_t j = 0; j < s.jobs.size(); ++j)
    if (s.jobs[j].layer == l && s.jobs[j].hg == hg) return int(j);
  return -1;
}

// The job whose weights block l takes in a variant, or -1: the original's.
int treatment(const State& s, int l, int variant) {
  if (variant == 0 || s.cls[size_t(l)] == Cls::Isb) return -1;
  if (s.cls[size_t(l)] == Cls::Sb) return job_of(s, l, false);
  return variant == 2 ? job_of(s, l, true) : job_of(s, l, false);
}

// Each layer holds its original weights or one job's; a variant changes only
// the layers that differ from the last one (read back from the checkpoint or
// the job's file), so no copy of the model is kept.
class Assembler {
 public:
  explicit Assembler(State& s) : s_(s), current_(size_t(s.L), -1), original_(s.c.checkpoint) {}
  // The model with the n least sensitive blocks in SPD, in `variant`.
  void assemble(int n, int variant) {
    const int L = s_.L;
    std::vector<bool> on(size_t(L), false);
    std::vector<int> want(size_t(L), -1);
    for (int k = 0; k < n; ++k) {
      const int l = s_.ranking[size_t(k)];
      on[size_t(l)] = true;
      want[size_t(l)] = treatment(s_, l, variant);
    }
    for (int l = 0; l < L; ++l) apply(l, want[size_t(l)]);
    s_.model->set_plan(LayerPlan::parse(spd_plan_text(L, on, s_.c.degree), L));
  }

 private:
  void apply(int l, int j) {
    if (current_[size_t(l)] == j) return;
    Model<float>& m = *s_.model;
    if (j >= 0) {
      const std::string bin = read_file(s_.weights_path(size_t(j)), "distilled block");
      STRATA_CHECK(int64_t(bin.size()) == s_.layer_bytes(l), s_.weights_path(size_t(j)), ": ",
                   bin.size(), " bytes, not the block's ", s_.layer_bytes(l));
      std::vector<float> w(bin.size() / sizeof(float));
      std::memcpy(w.data(), bin.data(), bin.size());
      spd::restore_layer(m, l, w);
    } else {
      const auto& P = m.layout().layers[size_t(l)];
      std::vector<int> tensors;
      for (int t = P.input_norm; t <= P.down; ++t) tensors.push_back(t);
      read_tensor_parts(
          original_, "params", m.layout(), tensors, [&](int t) { return m.param(t); },
          &m.backend());
    }
    current_[size_t(l)] = j;
  }
  State& s_;
  std::vector<int> current_;  // per layer: the job whose weights it holds (-1: the checkpoint's)
  const CheckpointReader original_;
};

// Text tasks report bits per byte, choice tasks accuracy.
nlohmann::json task_scores(State& s) {
  EvalOptions eo;
  eo.tasks = s.c.tasks;
  eo.limit = s.c.task_limit;
  eo.progress = false;
  nlohmann::json tj = nlohmann::json::object();
  const std::vector<std::vector<TaskResult>> res = evaluate_tasks(*s.model, *s.tok, eo);
  for (const TaskResult& t : res.back()) {
    const Metric* mt = &t.metrics.at(0);
    for (const Metric& x : t.metrics)
      if (x.name == "bits_per_byte" || (x.name == "acc" && mt->name != "bits_per_byte")) mt = &x;
    tj[t.task] = {{"metric", mt->name}, {"value", mt->value}, {"stderr", mt->stderr_}, {"n", t.n}};
  }
  return tj;
}

}  // namespace

// ------------------------------------------------------------ 4. evaluate

void evaluate(State& s) {
  const SpdConfig& c = s.c;
  Assembler a(s);
  Timer t;
  s.variants = c.ablation ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2};
  for (int v : s.variants)
    for (int n = 0; n <= s.budget; ++n) {
      const bool tasks =
          std::find(s.task_budgets.begin(), s.task_budgets.end(), n) != s.task_budgets.end();
      if (!c.ablation && n != 0 && n != s.budget && !tasks) continue;
      if (v > 0 && n == 0) continue;  // the standard model is variant 0's n = 0
      a.assemble(n, v);
      nlohmann::json row = {{"variant", kVariantNames[v]},
                            {"n", n},
                            {"percent", 100.0 * n / s.L},
                            {"plan", s.model->plan().to_string()}};
      row["calibration_ppl"] =
          spd::window_perplexity(*s.model, s.windows, c.samples, c.seq_len, c.calibration_batch);
      if (!s.eval_text.empty())
        row["ppl"] =
            text_perplexity(*s.model, *s.tok, s.eval_text, c.report_text, 0, 0, 8, {s.L}, false)
                .back()
                .ppl();
      if (tasks && !c.tasks.empty()) row["tasks"] = task_scores(s);
      s.say(cat("eval ", kVariantNames[v], " with ", n, " blocks in SPD: calibration ppl ",
                fixed(row["calibration_ppl"].get<double>(), 4),
                row.contains("ppl") ? cat(", text ppl ", fixed(row["ppl"].get<double>(), 4)) : "",
                " (", fixed(t.seconds(), 0), " s)"));
      s.sweep.push_back(row);
    }
  s.stages["evaluation_seconds"] = t.seconds();
  a.assemble(s.budget, 2);  // the full algorithm at the budget: the checkpoint's model
}

// ---------------------------------------------------------- 5. checkpoint

void write_checkpoint(State& s) {
  const SpdConfig& c = s.c;
  nlohmann::json meta = {{"degree", c.degree},
                         {"budget", s.budget},
                         {"tau1", c.tau1},
                         {"tau2", c.tau2},
                         {"source", c.checkpoint}};
  nlohmann::json blocks = nlohmann::json::array();
  for (int k = 0; k < s.budget; ++k) {
    const int l = s.ranking[size_t(k)];
    const int j = treatment(s, l, 2);
    const Cls cl = s.cls[size_t(l)];
    nlohmann::json b = {{"layer", l},
                        {"class", cls_name(cl)},
                        {"sensitivity", s.sens[size_t(l)]},
                        {"treatment", cl == Cls::Isb  ? "zero-shot"
                                      : cl == Cls::Sb ? "b2b"
                                                      : "hg+b2b"}};
    if (j >= 0) {
      const nlohmann::json& ji = s.results[size_t(j)];
      b["mse_zero_shot"] = ji.at("mse_zero_shot");
      b["mse_distilled"] = ji.at("mse_distilled");
      if (ji.contains("head_order")) b["head_order"] = ji.at("head_order");
    }
    blocks.push_back(b);
  }
  meta["blocks"] = blocks;
  if (!s.root) return;
  nlohmann::json state = s.info.state.is_object() ? s.info.state : nlohmann::json::object();
  state["spd"] = meta;
  save_model(c.out_dir + "/spd.h5", *s.model, s.info.tokenizer, state);
}

}  // namespace strata::spd_pipeline

namespace strata {

void run_spd_pipeline(const SpdConfig& config, const SpdRunOptions& o) {
  using namespace spd_pipeline;
  ProcessGrid grid = make_grid(1, 0);
  State s(config);
  s.world = grid.world.get();
  s.root = grid.is_root();
  s.progress = !o.quiet && s.root;
  if (!plan(s, o)) return;  // a dry run
  load(s, o);
  sensitivity(s);
  classify(s);
  distill(s);
  if (!s.root) return;  // process 0 evaluates and writes; the others are done
  evaluate(s);
  write_checkpoint(s);
  write_report(s);
  const int64_t peak = peak_rss_bytes(), estimate = s.memory.memory.total() + s.runtime_rss;
  if (peak > 0)
    s.say(cat("memory: peak resident ", human_bytes(double(peak)), "; estimate ",
              human_bytes(double(estimate)), " (", human_bytes(double(s.runtime_rss)),
              " before the model + ", human_bytes(double(s.memory.memory.total())), "), ",
              fixed(100.0 * (double(estimate) / double(peak) - 1), 1), "% of the peak"));
}

}  // namespace strata
