// One `strata eval` run as a library call: the tasks (or the perplexity of a
// text file) at the exits asked for, the table the command prints and the
// JSON of --out, in strata's layout or lm-evaluation-harness's; and the task
// list of --tasks list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "model/model.h"

namespace strata {

struct EvalJob {
  // The tasks and how to score them; `exits` (every one a unit boundary of
  // the plan) and batch_size, window, stride and progress serve the
  // perplexity file too.
  EvalOptions tasks;
  bool perplexity = false;               // instead of tasks: the perplexity of
  std::string perplexity_file;           // this text file
  bool full_last_window = true;          // its last window as the harness's (else chunked)
  std::string output_format = "strata";  // the JSON's layout: strata or lm-eval
  // What the JSON says of the model.
  std::string checkpoint, plan;
  int64_t step = 0;
};

struct EvalJobResult {
  std::string table;    // what `strata eval` prints
  nlohmann::json json;  // what --out writes (with the seconds the job took)
};

EvalJobResult run_eval_job(Model<float>& model, const Tokenizer& tok, const EvalJob& job);

// Every exit the plan allows, 1..L (unit boundaries): --exit-layer all.
std::vector<int> all_exits(const LayerPlan& plan);

// Results as `strata eval` prints them: with one exit, a row per metric
// (value, standard error, n, shots; categories below their task; tasks not
// comparable with the harness starred and explained); with several, one
// column of values per exit.
std::string results_table(const std::vector<std::vector<TaskResult>>& results,
                          const std::vector<int>& exits);

// `strata eval --tasks list`: every task of the directory, loaded as it would
// be scored (so the counts are real), one line each.
std::string task_table(const std::string& eval_dir);

}  // namespace strata
