// MATH (Hendrycks et al.) answers as lm-evaluation-harness's hendrycks_math
// task compares them (its utils.py, the strata built-ins
// strata.hendrycks_math_docs and strata.hendrycks_math): the reference is the
// last \boxed{...} (or \fbox{...}) of the solution, the model's answer the
// text between its first and last '$' (all of it with fewer than two), and
// both are normalised by the harness's strip_string before comparing —
// including its quirks: where strip_string would raise in Python (a
// "\text{ " unit twice, "\frac" or "\sqrt" at the very end, "a/b" whose
// parts are not integers) the two texts are compared as they are.
#pragma once

#include <optional>
#include <string>

namespace strata::math_answer {

// The last "\boxed{...}" / "\fbox{...}" of `solution` with balanced braces,
// or "\boxed " up to the next '$'; nullopt when there is none (or its braces
// never close).
std::optional<std::string> last_boxed(const std::string& solution);
// "\boxed{x}" -> "x", "\boxed x" -> "x"; throws strata::Error for anything else.
std::string remove_boxed(const std::string& boxed);
// The reference answer of a MATH solution; throws naming `where` when the
// solution has no boxed answer.
std::string reference(const std::string& solution, const std::string& where);
// The harness's strip_string; nullopt where Python would raise.
std::optional<std::string> normalise(const std::string& answer);
// The harness's is_equiv: normalised equality, else raw equality.
bool equivalent(const std::string& a, const std::string& b);
// The harness's process_results: the answer inside the generation's dollar
// signs, compared with the reference.
bool correct(const std::string& generation, const std::string& reference);

}  // namespace strata::math_answer
