// Internals of the harness task loader (eval/harness_task.h): a task's
// settings as read from its YAML, its documents, and the rendering of its
// doc_to_* fields. Internal to eval/harness_*.cpp.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/jinja.h"
#include "eval/harness_task.h"

namespace strata::harness_internal {

using json = nlohmann::ordered_json;

struct Doc {
  json fields;        // the document (a JSON object)
  std::string where;  // "<file>:<line>" for messages
};

// A task's settings, checked: each key's type, no Python functions.
struct Spec {
  std::string file, name;
  TaskKind kind = TaskKind::MultipleChoice;
  std::optional<json> doc_to_text, doc_to_target, doc_to_choice, description;
  bool has_choice = false;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n";
  int num_fewshot = 0;
  bool first_n = false;                      // fewshot_config.sampler = first_n
  std::optional<std::vector<json>> samples;  // fewshot_config.samples
  std::vector<std::string> metrics;
  GenerationSpec generation;
  std::vector<FilterStep> filters;
  ExactMatchSpec exact_match;
  std::string process_results;  // a strata built-in (truthfulqa_mc2, hendrycks_math, ifeval) or ""
  std::string process_docs;     // a strata built-in ("hendrycks_math_docs") or ""
  std::string execute;          // "program": pass@1 runs answer + "\n" + target
  int version = 0;
};

// strata's own versions of lm-evaluation-harness Python functions, which a
// task YAML names `!function strata.<name>` (docs/evaluation.md):
//   process_results: strata.truthfulqa_mc2  truthfulqa's process_results_mc2
//   metric: strata.pass_at_1                 pass@1 of humaneval and mbpp
//   filter custom: strata.humaneval_program  humaneval's build_predictions
//   process_docs: strata.hendrycks_math_docs  hendrycks_math's process_docs
//   process_results: strata.hendrycks_math    hendrycks_math's process_results
//   process_results: strata.ifeval            ifeval's process_results
// Any other !function is refused with one line.
extern const char* const kBuiltins[6];
Spec read_spec(const std::string& file, const std::string& name, const json& cfg);

// The split scored (test_split, else validation_split) and the one few-shot
// examples come from (fewshot_split, training_split, validation_split,
// test_split: the first set).
std::string eval_split(const json& cfg);
std::string fewshot_split(const json& cfg);

struct DataSource {
  std::string format;  // json, csv or text
  std::vector<std::string> files;
  char delimiter = ',';  // csv: dataset_kwargs delimiter / sep
  bool quoting = true;   // csv: false with dataset_kwargs quoting: 3 (QUOTE_NONE)
};
DataSource data_source(const HarnessTasks& h, const std::string& file, const json& cfg,
                       const std::string& split);
std::vector<Doc> read_docs(const HarnessTasks& h, const std::string& file, const json& cfg,
                           const std::string& split);

// The harness's doc_to_text, doc_to_target and doc_to_choice: a column name
// gives the document's field, an int itself, anything else is a Jinja
// template; a template's digits are an int where the task has choices, and
// doc_to_choice's text is read as a Python list literal, and so is a
// doc_to_target text in brackets (several accepted answers).
class Render {
 public:
  explicit Render(const Spec& s) : s_(s) {}
  std::string text(const Doc& d);
  // doc_to_text as the harness returns it: an int (digits, with choices)
  // marks a multiple-input task (Winogrande: the choices are contexts).
  json text_value(const Doc& d);
  json target(const Doc& d);
  std::vector<std::string> choices(const Doc& d);
  // A template or column field as text (description, ...).
  std::string text_of(const json& spec, const Doc& d, const std::string& key);

 private:
  json field(const json& spec, const Doc& d, const std::string& key);
  const jinja::Template& tmpl(const std::string& key, const std::string& source);
  // The document as template variables, converted once per document.
  const jinja::Value& vars(const Doc& d);
  const Spec& s_;
  std::map<std::string, std::unique_ptr<jinja::Template>> cache_;
  const Doc* vars_of_ = nullptr;
  jinja::Value vars_;
};

// The gold choice: an index, or a choice's text.
int gold_index(const json& target, const std::vector<std::string>& choices,
               const std::string& where);

// The strings of a Python list literal (['a', "b's", 1]), as ast.literal_eval
// reads them; throws naming `where` for anything else.
std::vector<std::string> python_list(const std::string& text, const std::string& where);

}  // namespace strata::harness_internal
