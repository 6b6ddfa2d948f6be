// Evaluation tasks: TOML definitions in eval/ turned into scoring requests
// with lm-evaluation-harness semantics.
//
// A task is one TOML file, eval/<name>.toml (format: eval/README.md), naming
// its data file(s), the format adapter that reads them, the prompt template,
// how choices and the gold answer are built, where few-shot examples come
// from, and its metrics. load_task() renders every example (with its few-shot
// preamble) into loglikelihood requests; the scoring engine (eval/engine.h)
// only sees strings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// One loglikelihood request: log P(continuation | context). The engine
// applies the harness's tokenisation rules (trailing spaces of the context
// move to the continuation, BOS first, left truncation). load_task() puts the
// target delimiter (usually " ") at the front of the continuation, as the
// harness does: ("Question: ...\nAnswer:", " Paris").
struct LlRequest {
  std::string context;
  std::string continuation;
};

enum class TaskKind {
  MultipleChoice,  // one request per choice; acc (argmax of sum logprob) and
                   // acc_norm (argmax of sum logprob / continuation bytes)
  LastWord,        // one request per example: acc (continuation greedy) and
                   // perplexity (exp of minus the mean loglikelihood)
  Perplexity,      // documents scored with rolling windows: word perplexity,
                   // byte perplexity, bits per byte, token perplexity
};

struct EvalExample {
  std::vector<LlRequest> requests;  // MultipleChoice: one per choice; LastWord: exactly one
  int gold = 0;                     // MultipleChoice: index of the correct choice
  std::string group;                // sub-task for per-group metrics (MMLU subject), "" if none
  std::string where;                // "<file>:<line>" of the source row, for messages
};

struct TaskData {
  std::string name;         // e.g. "arc_easy"
  std::string description;  // one line
  std::string file;         // the task's TOML file
  TaskKind kind = TaskKind::MultipleChoice;
  int shots = 0;                       // few-shot examples actually used
  std::vector<EvalExample> examples;   // MultipleChoice / LastWord
  std::vector<std::string> documents;  // Perplexity: documents as split and cleaned by the task
  std::vector<std::string> metrics;    // metric names the task reports, in order
};

// Every task TOML in `eval_dir` (its stem is the task name), sorted.
std::vector<std::string> list_tasks(const std::string& eval_dir);

// Loads and renders a task. shots < 0 uses the task's default. Few-shot
// examples come from the task's few-shot split (or, when it has none, from the
// evaluation split excluding the example itself), drawn with a Philox stream
// keyed by (seed, example index), so a (seed, example) pair always gets the
// same shots; when some example has fewer candidates than `shots`, every
// example gets as many as that one has (TaskData::shots says how many).
// Perplexity tasks take no shots. limit > 0 keeps the first `limit` examples
// (or documents); few-shot examples still come from the whole split.
// Errors (one line, strata::Error): unknown task, malformed TOML (file:line),
// bad data rows ("<data file>:<line>: ..."), missing fields, out-of-range gold.
TaskData load_task(const std::string& eval_dir, const std::string& name, int shots, uint64_t seed,
                   int64_t limit);

}  // namespace strata
