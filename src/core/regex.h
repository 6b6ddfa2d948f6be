// Regular expressions as Python, PCRE and the Hugging Face tokenizers write
// them: PCRE2 (Debian libpcre2-dev) in UTF-8 mode with Unicode properties
// (\p{L}, \p{N}), Unicode \s \d \w, lookaround, inline flags such as (?i) and
// (?s), and a JIT where the platform has one. Text that is not valid UTF-8 is
// searched all the same (invalid bytes never match a character class).
// Without PCRE2 (a build that lacks it) compiling a pattern fails in one line
// naming what the build lacks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

class Regex {
 public:
  struct Match {
    size_t begin = 0, end = 0;  // byte offsets of the whole match
    // Capture groups 1..n: [begin, end) byte offsets, or {npos, npos} where
    // a group took no part in the match.
    std::vector<std::pair<size_t, size_t>> groups;
  };
  static constexpr size_t npos = std::string_view::npos;

  // Throws strata::Error "<where>: bad regular expression '<pattern>': <why>
  // (at offset N)" when the pattern does not compile.
  static Regex compile(const std::string& pattern, const std::string& where);
  // True when this build has PCRE2.
  static bool available();

  // The first match starting at or after byte `start`, or false.
  bool search(std::string_view text, size_t start, Match* m) const;
  // Every non-overlapping match, left to right, as [begin, end) byte ranges
  // (an empty match advances by one character, as Python's finditer does).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // Every match with its groups (Python's finditer).
  std::vector<Match> matches(std::string_view text) const;
  // The text with every match replaced by `with`, taken literally (Python's
  // re.sub with a replacement free of backslashes).
  std::string replace_all(std::string_view text, std::string_view with) const;

  const std::string& pattern() const { return pattern_; }

  struct Code;  // the compiled pattern (PCRE2's), shared between copies

 private:
  std::shared_ptr<const Code> code_;
  std::string pattern_, where_;
};

}  // namespace strata
