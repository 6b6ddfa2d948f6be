// What an evaluation reports: metrics with standard errors, a task's
// results (per group and category), a text's perplexity, and their JSON
// layouts (strata's, and lm-evaluation-harness's results.json).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  // Examples with a continuation longer than the context (the harness stops
  // on them): left out of the metrics, or scored on their last tokens when
  // long_scored.
  int64_t long_continuations = 0;
  bool long_scored = false;
  // Multiple-choice examples whose best summed log-likelihood is shared by
  // two choices or more (acc then takes the first of them, as the harness's
  // argmax does).
  int64_t ties = 0;
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
  int64_t available = 0;  // examples or documents before --limit (n-samples.original)
  int version = 0;
  nlohmann::json to_json() const;
};

// The mean of `xs` and its standard error (sample standard deviation /
// sqrt(n), as the harness reports it; -1 for fewer than two values).
Metric mean_metric(const std::string& name, const std::vector<double>& xs);

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

}  // namespace strata
