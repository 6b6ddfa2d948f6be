// generate_until tasks: one answer generated per example (in batches, ended
// by the task's stop strings), then post-processed and scored as the harness
// does (filters, exact_match), or executed (HumanEval's pass@1, in the
// sandbox).
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/ifeval.h"
#include "eval/task.h"
#include "model/model.h"

namespace strata {

struct EvalOptions;  // eval/evaluate.h

// generate_until post-processing, as the harness's: the text up to the first
// stop string; the task's filters in order (regex: the group_select-th match,
// its first non-empty group, stripped, else the fallback); exact_match after
// regexes_to_ignore, ignore_case and ignore_punctuation.
std::string cut_at_stops(std::string text, const std::vector<std::string>& until);
// prepend_prompt (strata.humaneval_program) puts the example's prompt first.
std::string apply_filters(const std::vector<FilterStep>& filters, std::string text,
                          const std::string& prompt = "");
bool exact_match(const ExactMatchSpec& spec, std::string prediction, std::string reference);
// ROUGE-N F-measure as Google's rouge_score computes it without stemming:
// both texts lower-cased, every run of characters other than a-z and 0-9 a
// word break, n-grams counted with multiplicity; precision = overlap /
// prediction n-grams, recall = overlap / reference n-grams, F = 2PR / (P + R)
// (0 when there is no overlap).
double rouge_n(const std::string& prediction, const std::string& reference, int n);

// A filtered answer scored against the example's references (every accepted
// one when there are several): exact_match 1 when any matches, the best
// ROUGE-2.
struct AnswerScore {
  double exact_match = 0, rouge2 = 0;
};
AnswerScore score_answer(const TaskData& task, const EvalExample& example,
                         const std::string& answer);

// A task's answers: as generated (cut at the stop strings), after the
// filters (HumanEval: the program), and each example's score.
struct Generated {
  std::vector<std::string> raw, filtered;
  std::vector<double> score;                  // exact_match or pass@1 per example
  std::vector<double> rouge2;                 // ROUGE-2 F of the filtered answer (not HumanEval)
  std::vector<std::string> status;            // HumanEval: the sandbox's verdict
  std::vector<ifeval::Verdict> instructions;  // ifeval: each example's verdicts (score: strict)
  GenerationSpec spec;                        // the settings used (task + overrides)
};

// Generates and scores every example of a generate_until task, batch_size
// prompts at a time, with the task's generation settings and the options'
// overrides (max_gen_toks, temperature; seed; sandbox limits).
Generated generate_answers(Model<float>& model, const Tokenizer& tok, const TaskData& task,
                           const EvalOptions& o);

}  // namespace strata
