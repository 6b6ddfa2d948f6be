// Evaluation jobs: run tasks (eval/*.toml) through the scoring engine and
// aggregate metrics with standard errors, per exit layer; and ad-hoc
// perplexity of a text file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "eval/engine.h"
#include "eval/sandbox.h"
#include "eval/task.h"
#include "model/model.h"

namespace strata {

struct Metric {
  std::string name;
  double value = 0;
  double stderr_ = -1;  // standard error; < 0 when not defined
};

struct TaskResult {
  std::string task;
  int64_t n = 0;  // examples or documents scored
  int shots = 0;
  int64_t truncated = 0;  // requests cut from the left to fit the model's context
  std::vector<Metric> metrics;
  std::map<std::string, std::vector<Metric>> groups;  // per group (MMLU subject)
  // Per category of groups (MMLU's stem, humanities, social_sciences, other):
  // the size-weighted mean with the pooled standard error, as the harness's
  // weight_by_size groups aggregate.
  std::map<std::string, std::vector<Metric>> categories;
  std::map<std::string, std::string> group_category;  // group -> its category
  bool comparable = true;                             // with the harness's task of the same name
  std::string not_comparable_because;                 // when not
  std::string harness_task;
  int version = 0;
  nlohmann::json to_json() const;
};

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
};

// The harness's multiple-choice decision for one example given each choice's
// result: `acc` picks the highest summed logprob, `acc_norm` the highest
// logprob per character (Unicode code point) of the choice text and
// `acc_bytes` per UTF-8 byte of it, as the harness counts (the choice itself,
// without the target delimiter). Ties go to the lower index.
struct ChoicePick {
  int acc = 0, acc_norm = 0, acc_bytes = 0;
};
ChoicePick pick_choice(const EvalExample& example, const std::vector<LlResult>& results,
                       size_t first);

// generate_until post-processing, as the harness's: the text up to the first
// stop string; the task's filters in order (regex: the group_select-th match,
// its first non-empty group, stripped, else the fallback); exact_match after
// regexes_to_ignore, ignore_case and ignore_punctuation.
std::string cut_at_stops(std::string text, const std::vector<std::string>& until);
std::string apply_filters(const std::vector<FilterStep>& filters, std::string text);
bool exact_match(const ExactMatchSpec& spec, std::string prediction, std::string reference);

// Throws (one line) when a task of `names` executes model-written code
// (HumanEval) and `allowed` is false.
// `how` says how to allow it.
void require_code_permission(const std::string& eval_dir, const std::vector<std::string>& names,
                             bool allowed, const std::string& how = "pass --allow-code-execution");

// results[e][t]: task t at exits[e] (or the full model).
std::vector<std::vector<TaskResult>> evaluate_tasks(Model<float>& model, const Tokenizer& tok,
                                                    const EvalOptions& options);

// The results in lm-evaluation-harness's JSON layout (v0.4 `results.json`):
// results[task]["<metric>,none"] and ["<metric>_stderr,none"] ("N/A" without
// an error), groups and group_subtasks (MMLU: the group's acc is the micro
// average, as the harness weights subtasks by size, acc_macro alongside; each
// subject is mmlu_<subject>), configs (task, num_fewshot, output_type, metric_list),
// versions, n-shot, higher_is_better, n-samples, and `config` (strata's
// model description: pass checkpoint, plan, batch size, limit, seed). With
// several exits every task key gets an "_exit<E>" suffix.
nlohmann::json lm_eval_results(const std::vector<std::vector<TaskResult>>& results,
                               const std::vector<int>& exits, const nlohmann::json& config);

struct PerplexityResult {
  double nll_sum = 0;
  int64_t tokens = 0;  // scored tokens (BOS excluded)
  int64_t words = 0, bytes = 0;
  double ppl() const;       // token perplexity exp(nll / tokens)
  double mean_nll() const;  // nll / tokens
  double word_perplexity() const;
  double byte_perplexity() const;
  double bits_per_byte() const;
  nlohmann::json to_json() const;
};

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
