// IFEval (Zhou et al. 2023) as lm-evaluation-harness's ifeval task scores it
// (the strata built-in strata.ifeval): each prompt carries verifiable
// instructions (instruction_id_list, kwargs); a response follows one when
// it is not blank and the instruction's check passes. Strict: the response as
// given; loose: any of eight variants (without its first line, last line or
// both, each with and without '*'). Metrics: prompt_level_{strict,loose}_acc
// (every instruction followed), inst_level_{strict,loose}_acc (over all
// instructions).
//
// 20 of the 25 checks are the harness's exactly (its regular expressions,
// splits and counts). Five depend on models the harness loads from Python
// packages and are approximated (kApproximate; results say so):
//   language:response_language, change_case:english_capital,
//   change_case:english_lowercase  langdetect's language: here the script of
//                                  most letters (Latin, Cyrillic, Arabic,
//                                  Devanagari, Hangul, ...) decides, so
//                                  languages sharing a script are not told apart;
//   length_constraints:number_sentences  NLTK's punkt sentence model: here the
//                                  harness's own rule-based splitter
//                                  (instructions_util.split_into_sentences);
//   change_case:capital_word_frequency   NLTK's word_tokenize: here
//                                  whitespace-separated tokens without their
//                                  surrounding punctuation.
// Lower-casing is ASCII (the checks compare English phrases).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::ifeval {

// The checks strata approximates (see above).
extern const char* const kApproximate[5];

struct Verdict {
  std::vector<bool> strict, loose;  // per instruction
  bool all_strict() const;
  bool all_loose() const;
};

// Checks a document's instructions once, before any generation: every id is
// one of the 25, and every parameter its check needs is there (the harness
// would draw a missing one at random). Throws strata::Error naming `where`.
void validate(const nlohmann::ordered_json& doc, const std::string& where);

// Whether `response` follows instruction `id` with `kwargs` (a dict; falsy
// values are dropped, as the harness drops them).
bool follows(const std::string& id, const nlohmann::ordered_json& kwargs,
             const std::string& response);

// The harness's strict and loose verdicts for one document
// ({instruction_id_list, kwargs, ...}) and response.
Verdict judge(const nlohmann::ordered_json& doc, const std::string& response);

// The harness's rule-based sentence splitter (number_sentences here).
std::vector<std::string> split_into_sentences(const std::string& text);

}  // namespace strata::ifeval
