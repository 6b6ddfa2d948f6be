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
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/sft.h"

namespace strata {

// One piece of a chat-rendered context: text encoded on its own (as SFT
// training encodes each prefix, content and suffix), or the EOS token that
// ends an assistant turn.
struct ContextPiece {
  std::string text;
  bool eos = false;
};

// One loglikelihood request: log P(continuation | context). The engine
// applies the harness's tokenisation rules (trailing whitespace of the context
// moves to the continuation, BOS first, left truncation). load_task() puts the
// target delimiter (usually " ") at the front of the continuation, as the
// harness does: ("Question: ...\nAnswer:", " Paris"). A chat-rendered request
// (apply_chat_template) also has `pieces`: the context as the model sees it,
// piece by piece; `context` is then their text for logs (EOS shown as "</s>").
struct LlRequest {
  LlRequest() = default;
  LlRequest(std::string ctx, std::string cont)
      : context(std::move(ctx)), continuation(std::move(cont)) {}
  std::string context;
  std::string continuation;
  std::vector<ContextPiece> pieces;
};

enum class TaskKind {
  MultipleChoice,  // one request per choice: acc (argmax of sum logprob), acc_norm
                   // (per character of the choice), acc_bytes (per UTF-8 byte)
  LastWord,        // one request per example: acc (continuation greedy) and
                   // perplexity (exp of minus the mean loglikelihood)
  Perplexity,      // documents scored with rolling windows: word perplexity,
                   // byte perplexity, bits per byte, token perplexity
  Generate,        // generate_until: one generation per example, filtered and
                   // scored by exact_match, or executed (HumanEval pass@1)
};

// generate_until settings (the harness's generation_kwargs).
struct GenerationSpec {
  std::vector<std::string> until = {"\n\n"};  // stop strings (cut from the output)
  int max_gen_toks = 256;
  double temperature = 0.0;  // 0: greedy
  bool do_sample = false;
};

// One answer-extraction step (the harness's filters): "regex" keeps the
// group_select-th match's first group (or the whole match), else fallback;
// "take_first" keeps the first response (one response per example here);
// "strip" removes surrounding whitespace; "lowercase".
struct FilterStep {
  std::string function;
  std::string pattern;
  int group_select = 0;
  std::string fallback = "[invalid]";
};

// exact_match options (the harness's metric kwargs).
struct ExactMatchSpec {
  bool ignore_case = false, ignore_punctuation = false;
  std::vector<std::string> regexes_to_ignore;
};

struct EvalExample {
  std::vector<LlRequest> requests;   // MultipleChoice: one per choice; LastWord, Generate: one
  int gold = 0;                      // MultipleChoice: index of the correct choice
  std::vector<std::string> choices;  // MultipleChoice: the choice texts (acc_norm's lengths)
  std::string target;                // Generate: the reference (exact_match) or test program
  std::vector<std::string> targets;  // Generate: every accepted reference when there are several
                                     // (a list target: TriviaQA's aliases); exact_match when
                                     // any matches, ROUGE-2 the best; empty: just `target`
  std::vector<int> labels;           // MultipleChoice with truthfulqa_mc2: 1 marks a true choice
  std::string document;              // Generate with ifeval: the document (JSON), whose
                                     // instructions the answer is checked against
  std::string prompt;                // Generate: the example's own text (no shots), HumanEval's
                                     // program prefix
  std::string group;                 // sub-task for per-group metrics (MMLU subject), "" if none
  std::string where;                 // "<file>:<line>" of the source row, for messages
  // How the context was assembled, for chat rendering: the description, the
  // few-shot (question, answer) pairs, and where the example's own text starts
  // in every request's context.
  std::string description;
  std::vector<std::pair<std::string, std::string>> shots;
  size_t prefix_size = 0;
};

struct TaskData {
  std::string name;         // e.g. "arc_easy"
  std::string description;  // one line
  std::string file;         // the task's TOML file
  TaskKind kind = TaskKind::MultipleChoice;
  int shots = 0;                       // few-shot examples actually used
  std::vector<EvalExample> examples;   // MultipleChoice / LastWord / Generate
  std::vector<std::string> documents;  // Perplexity: documents as split and cleaned by the task
  // Perplexity: words (len(re.split(r"\s+", page))) and UTF-8 bytes of each
  // document before cleaning, the harness's counts for word and byte perplexity.
  std::vector<int64_t> document_words, document_bytes;
  std::vector<std::string> metrics;  // metric names the task reports, in order
  // Results comparable with lm-evaluation-harness's task of the same name?
  // false with the reason when the shipped data cannot match it.
  bool comparable = true;
  std::string not_comparable_because;
  std::string harness_task;  // the harness's task name ("" when it has none)
  int64_t available = 0;     // examples or documents before --limit
  int version = 0;           // bumped whenever the task's requests or metrics change
  // MultipleChoice with groups: group -> category (MMLU's stem, humanities,
  // social_sciences, other), for size-weighted category scores.
  std::map<std::string, std::string> categories;
  std::string target_delimiter = " ";  // chat rendering drops it from continuations
  std::string fewshot_delimiter = "\n\n";
  GenerationSpec generation;        // Generate
  std::vector<FilterStep> filters;  // Generate
  ExactMatchSpec exact_match;       // Generate
  std::string execute;              // Generate: "humaneval" runs prompt + completion + tests,
                                    // "program" the filtered answer + tests (pass@1)
  std::string process_results;      // MultipleChoice: "truthfulqa_mc2" makes acc the
                                    // probability mass of the true choices; Generate:
                                    // "hendrycks_math" compares MATH answers (math_answer.h),
                                    // "ifeval" checks IFEval's instructions (ifeval.h)
};

// Every task TOML in `eval_dir` (its stem is the task name), sorted.
std::vector<std::string> list_tasks(const std::string& eval_dir);

// The task names `all` stands for: every task comparable with the harness
// (or without a counterpart) that runs without extra permission (no code
// execution), sorted.
std::vector<std::string> all_tasks(const std::string& eval_dir);

// The task file's name for `name`: itself when eval_dir has <name>.toml,
// else the task whose harness_task is `name` (lm-evaluation-harness's
// names: lambada_openai, wikitext, ...); "" when neither.
std::string resolve_task(const std::string& eval_dir, const std::string& name);
// Each name resolved (an unknown one kept as given, for the caller's error).
std::vector<std::string> resolve_tasks(const std::string& eval_dir,
                                       const std::vector<std::string>& names);

// Whether task `name` executes model-written code (execute = ...); reads only
// its TOML file, not its data. false for a name eval_dir does not have.
bool task_runs_code(const std::string& eval_dir, const std::string& name);

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

// Chat rendering for instruction-tuned (SFT) models, in the template strata
// trains SFT with: the system message (system instruction, then the task's
// description) and one user turn holding the shots and the question, or, with
// fewshot_as_multiturn, one user/assistant turn per shot (each assistant turn
// ended by EOS) and the question last; then the assistant prefix. The target
// delimiter is dropped from continuations (the answer starts the assistant's
// turn).
struct ChatOptions {
  bool apply = false;
  std::string system_instruction;
  bool fewshot_as_multiturn = false;
  ChatTemplate tmpl;  // SFT's
};
void apply_chat_template(TaskData& task, const ChatOptions& chat);

}  // namespace strata
