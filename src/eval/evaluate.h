// Evaluation jobs: run tasks (eval/*.toml) through the scoring engine and
// aggregate metrics with standard errors, per exit layer; and ad-hoc
// perplexity of a text file. What they report is in eval/results.h;
// generate_until tasks in eval/generate_until.h; per-sample logs in
// eval/samples.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/engine.h"
#include "eval/generate_until.h"
#include "eval/harness_task.h"
#include "eval/results.h"
#include "eval/sandbox.h"
#include "eval/task.h"
#include "model/model.h"

namespace strata {

struct EvalOptions {
  std::vector<std::string> tasks;  // task names; "all" stands for all_tasks()
  int shots = -1;                  // < 0: each task's default
  int64_t limit = 0;               // > 0: first N examples / documents per task
  int batch_size = 8;
  std::vector<int> exits;         // exit layers; empty: the full model
  uint64_t seed = 1234;           // few-shot sampling
  std::string eval_dir = "eval";  // where the task TOML files are
  int window = 0, stride = 0;     // perplexity tasks (0: max_len + 1, window - 1)
  bool progress = true;           // progress lines on stderr
  // Per-sample logs: one JSONL file per task (and exit) in this directory,
  // written when the task is scored; "" for none. See write_samples.
  std::string log_samples_dir;
  // Print each task's first rendered example (its requests) to stdout.
  bool write_out = false;
  ChatOptions chat;  // --apply-chat-template, --system-instruction, --fewshot-as-multiturn
  // Tasks that execute model-written code (HumanEval) run only with this set.
  bool allow_code_execution = false;
  SandboxLimits sandbox;  // limits of each execution
  // Generation overrides (--gen-kwargs): < 0 / empty keeps the task's setting.
  int max_gen_toks = -1;
  double temperature = -1;
  // Tasks of lm-evaluation-harness YAMLs (--include-path): their names (and
  // tags and groups) are looked up here before eval_dir.
  std::shared_ptr<const HarnessTasks> harness;
  // Examples whose continuation is longer than the model's context: false
  // leaves them out of the metrics (counted in the results), true scores
  // their last max_len tokens (--long-continuations truncate).
  bool score_long_continuations = false;
};

// The harness's multiple-choice decision for one example given each choice's
// result: `acc` picks the highest summed logprob, `acc_norm` the highest
// logprob per character (Unicode code point) of the choice text and
// `acc_bytes` per UTF-8 byte of it, as the harness counts (the choice itself,
// without the target delimiter). Ties go to the lower index.
struct ChoicePick {
  int acc = 0, acc_norm = 0, acc_bytes = 0;
  bool tie = false;  // another choice has exactly acc's summed logprob
};
ChoicePick pick_choice(const EvalExample& example, const std::vector<LlResult>& results,
                       size_t first);

// IFEval's four metrics: prompt_level_strict_acc, inst_level_strict_acc,
// prompt_level_loose_acc, inst_level_loose_acc (the instruction-level ones
// without a standard error, as the harness).
std::vector<Metric> ifeval_metrics(const std::vector<ifeval::Verdict>& verdicts);

// TruthfulQA's MC2 (the harness's process_results_mc2): the choices'
// probabilities exp(logprob) normalised to sum 1, summed over the true ones
// (example.labels[c] == 1).
double true_mass(const EvalExample& example, const std::vector<LlResult>& results, size_t first);

// Throws (one line) when a task of `names` executes model-written code
// (HumanEval) and `allowed` is false.
// `how` says how to allow it. Names `harness` has are its task YAMLs (a
// strata.pass_at_1 metric runs code).
void require_code_permission(const std::string& eval_dir, const std::vector<std::string>& names,
                             bool allowed, const std::string& how = "pass --allow-code-execution",
                             const HarnessTasks* harness = nullptr);

// results[e][t]: task t at exits[e] (or the full model).
std::vector<std::vector<TaskResult>> evaluate_tasks(Model<float>& model, const Tokenizer& tok,
                                                    const EvalOptions& options);

// Token-level perplexity of a whole text file (BOS once at its start), with
// rolling windows (see Scorer::rolling); one result per exit.
std::vector<PerplexityResult> file_perplexity(Model<float>& model, const Tokenizer& tok,
                                              const std::string& path, int window, int stride,
                                              int batch_size, const std::vector<int>& exits,
                                              bool progress = true, bool full_last = true);
// The same for text in memory (`name` labels progress and errors).
std::vector<PerplexityResult> text_perplexity(Model<float>& model, const Tokenizer& tok,
                                              const std::string& text, const std::string& name,
                                              int window, int stride, int batch_size,
                                              const std::vector<int>& exits, bool progress = true,
                                              bool full_last = true);

}  // namespace strata
