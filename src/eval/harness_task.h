// lm-evaluation-harness task YAMLs, read as the harness writes them
// (`strata eval --include-path DIR --tasks NAME`): `task`, `tag` / `group`,
// `include`, `dataset_path` + `dataset_name` + `dataset_kwargs.data_files`,
// the splits, `doc_to_text` / `doc_to_target` / `doc_to_choice` (Jinja
// templates, column names or lists), `description`, `target_delimiter`,
// `fewshot_delimiter`, `num_fewshot`, `fewshot_config` (`sampler`,
// `samples`), `output_type` (multiple_choice, loglikelihood,
// loglikelihood_rolling, generate_until), `generation_kwargs`, `filter_list`
// (the first pipeline: regex, take_first, lowercase, remove_whitespace) and
// `metric_list` (acc, acc_norm, exact_match with its options, rouge2,
// perplexity, word_perplexity, byte_perplexity, bits_per_byte). Templates are rendered by
// core/jinja.h in the harness's environment (StrictUndefined, trailing newline
// kept, regex_replace, strata's literal_eval). An int doc_to_text makes a
// multiple-input task (WinoGrande), a bracketed doc_to_target several
// accepted answers (TriviaQA). A Python `!function` is refused in one line
// naming the task and the function, except strata's built-ins
// (`!function strata.<name>`, harness_internal.h: truthfulqa_mc2,
// hendrycks_math_docs, hendrycks_math, ifeval, pass_at_1,
// humaneval_program), which do what the harness's Python does for the
// papers' tasks shipped in eval/harness.
//
// Data: `dataset_path: json | csv | text` with `data_files` (paths relative
// to the working directory, else to the YAML's folder), or a Hugging Face hub
// name read from a local copy: <datasets_dir>/<dataset_path>/<dataset_name or
// "default">/<split>.jsonl (or .json, .csv), as `datasets`' to_json() writes
// each split (docs/evaluation.md).
//
// Tasks become the same TaskData as strata's own TOML tasks (eval/task.h):
// scored, logged and reported by the same code, keyed by the YAML's names.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "eval/task.h"

namespace strata {

struct HarnessTasks {
  std::vector<std::string> dirs;
  std::string datasets_dir;
  std::map<std::string, std::string> files;                // task -> its YAML file
  std::map<std::string, std::vector<std::string>> groups;  // tag or group -> members
  std::string shipped_dir;                                 // eval/harness when indexed
  std::map<std::string, std::string> shadowed;             // shipped tasks a TOML task's name hides

  // The tasks a name stands for: a task itself, a tag's or group's tasks
  // (recursively, in order); empty for an unknown name.
  std::vector<std::string> expand(const std::string& name) const;
};

// Every *.yaml file under the folders (recursively). A file with neither
// `task` nor `group` is an include, not a task. Throws strata::Error for a
// folder that does not exist, a YAML syntax error ("<file>:<line>:<col>:
// ..."), a task defined twice (naming both files).
HarnessTasks index_harness_tasks(const std::vector<std::string>& dirs,
                                 const std::string& datasets_dir);

// The task YAMLs shipped with strata (eval/harness), added after the
// --include-path folders: a name those define stays theirs, and a name
// `taken` says a TOML task has stays the TOML task's (listed in `shadowed`;
// --include-path eval/harness makes the YAML win). Nothing when `dir` is one
// of the --include-path folders.
void add_shipped_tasks(HarnessTasks& h, const std::string& dir,
                       const std::function<bool(const std::string&)>& taken);

// Loads and renders a task as load_task() does a TOML one (shots < 0: the
// YAML's num_fewshot; limit > 0: the first `limit` documents).
TaskData load_harness_task(const HarnessTasks& h, const std::string& name, int shots, uint64_t seed,
                           int64_t limit);

// `strata eval --tasks list --include-path DIR`: every YAML task, its
// output type, file and whether its data is present.
std::string harness_task_table(const HarnessTasks& h);

// Whether a task YAML runs model-written code (a strata.pass_at_1 metric).
bool harness_task_runs_code(const HarnessTasks& h, const std::string& name);

// Where a task's evaluation split is read from, and whether it is there:
// "data/x.jsonl" / "missing: <path>" (for --tasks list).
std::string harness_data_status(const HarnessTasks& h, const std::string& name);

}  // namespace strata
