// MATH answers compared as lm-evaluation-harness's hendrycks_math task
// compares them (eval/math_answer.h). Indexing is by code point where Python
// indexes a str.
#include "eval/math_answer.h"

#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace strata::math_answer {

namespace {

struct Raise {};  // where the harness's Python raises (is_equiv then compares raw texts)

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The first code point of `s` (Python's s[0]); throws Raise when empty.
std::string head(const std::string& s) {
  if (s.empty()) throw Raise{};
  size_t n = 1;
  while (n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) ++n;
  return s.substr(0, n);
}

std::string remove_right_units(const std::string& s) {
  if (!contains(s, "\\text{ ")) return s;
  const auto parts = python_split(s, "\\text{ ");
  if (parts.size() != 2) throw Raise{};
  return parts[0];
}

std::string fix_sqrt(const std::string& s) {
  if (!contains(s, "\\sqrt")) return s;
  const auto parts = python_split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string a = head(parts[i]);
    out += a != "{" ? "\\sqrt{" + a + "}" + parts[i].substr(a.size()) : "\\sqrt" + parts[i];
  }
  return out;
}

std::string fix_fracs(const std::string& s) {
  const auto parts = python_split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    out += "\\frac";
    const std::string a = head(p);
    if (a == "{") {
      out += p;
      continue;
    }
    if (utf8_length(p) < 2) return s;  // the harness gives up on the whole string
    const std::string b = head(p.substr(a.size()));
    const std::string rest = p.substr(a.size() + b.size());
    out += b != "{" ? "{" + a + "}{" + b + "}" + rest : "{" + a + "}" + b + rest;
  }
  return out;
}

// Python's str(int(t)), or Raise where int() raises.
std::string python_int(const std::string& t) {
  const std::string s = python_strip(t);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  std::string digits;
  bool last_underscore = true;  // no leading underscore
  for (; i < s.size(); ++i) {
    if (s[i] >= '0' && s[i] <= '9') {
      digits += s[i];
      last_underscore = false;
    } else if (s[i] == '_' && !last_underscore) {
      last_underscore = true;
    } else {
      throw Raise{};
    }
  }
  if (digits.empty() || last_underscore) throw Raise{};
  const size_t nz = digits.find_first_not_of('0');
  digits = nz == std::string::npos ? "0" : digits.substr(nz);
  return (negative && digits != "0" ? "-" : "") + digits;
}

std::string fix_a_slash_b(const std::string& s) {
  const auto parts = python_split(s, "/");
  if (parts.size() != 2) return s;
  const std::string a = python_int(parts[0]), b = python_int(parts[1]);
  if (s != a + "/" + b) return s;
  return "\\frac{" + a + "}{" + b + "}";
}

std::string strip_string(std::string s) {
  s = python_replace(s, "\n", "");
  s = python_replace(s, "\\!", "");
  s = python_replace(s, "\\\\", "\\");
  s = python_replace(s, "tfrac", "frac");
  s = python_replace(s, "dfrac", "frac");
  s = python_replace(s, "\\left", "");
  s = python_replace(s, "\\right", "");
  s = python_replace(s, "^{\\circ}", "");
  s = python_replace(s, "^\\circ", "");
  s = python_replace(s, "\\$", "");
  s = remove_right_units(s);
  s = python_replace(s, "\\%", "");
  s = python_replace(s, " .", " 0.");
  s = python_replace(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  if (const auto eq = python_split(s, "="); eq.size() == 2 && utf8_length(eq[0]) <= 2) s = eq[1];
  s = fix_sqrt(s);
  s = python_replace(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

}  // namespace

std::optional<std::string> last_boxed(const std::string& solution) {
  if (contains(solution, "\\boxed "))
    return "\\boxed " + python_split(python_split(solution, "\\boxed ").back(), "$")[0];
  size_t idx = solution.rfind("\\boxed");
  if (idx == std::string::npos) idx = solution.rfind("\\fbox");
  if (idx == std::string::npos) return std::nullopt;
  int open = 0;
  for (size_t i = idx; i < solution.size(); ++i) {
    if (solution[i] == '{') ++open;
    if (solution[i] == '}' && --open == 0) return solution.substr(idx, i + 1 - idx);
  }
  return std::nullopt;
}

std::string remove_boxed(const std::string& s) {
  if (contains(s, "\\boxed ")) {
    STRATA_CHECK(s.starts_with("\\boxed "), "'", one_line(s.substr(0, 40)), "' is not \\boxed ...");
    return s.substr(7);
  }
  STRATA_CHECK(s.starts_with("\\boxed{") && s.ends_with("}"), "'", one_line(s.substr(0, 40)),
               "' is not \\boxed{...}");
  return s.substr(7, s.size() - 8);
}

std::string reference(const std::string& solution, const std::string& where) {
  const auto boxed = last_boxed(solution);
  STRATA_CHECK(boxed, where, ": the solution has no \\boxed{...} answer");
  try {
    return remove_boxed(*boxed);
  } catch (const Error& e) {
    fail(cat(where, ": the solution's answer ", e.what()));
  }
}

std::optional<std::string> normalise(const std::string& answer) {
  try {
    return strip_string(answer);
  } catch (const Raise&) {
    return std::nullopt;
  }
}

bool equivalent(const std::string& a, const std::string& b) {
  const auto na = normalise(a), nb = normalise(b);
  if (na && nb) return *na == *nb;
  return a == b;
}

bool correct(const std::string& generation, const std::string& reference) {
  const size_t first = generation.find('$'), last = generation.rfind('$');
  const std::string answer = first == std::string::npos || first == last
                                 ? generation
                                 : generation.substr(first + 1, last - first - 1);
  return equivalent(answer, reference);
}

}  // namespace strata::math_answer
