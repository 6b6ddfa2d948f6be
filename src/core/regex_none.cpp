// Regex in a build without PCRE2 (libpcre2-dev): compiling a pattern fails
// in one line naming what the build lacks, so what needs one (tokenizer.json
// pre-tokenizers, eval filters and stop patterns) says so.
#include "core/error.h"
#include "core/regex.h"

namespace strata {

struct Regex::Code {};

bool Regex::available() { return false; }

Regex Regex::compile(const std::string& pattern, const std::string& where) {
  fail(cat(where, ": this build has no PCRE2 (libpcre2-dev), so the regular expression '", pattern,
           "' cannot be used (rebuild with PCRE2)"));
}

bool Regex::search(std::string_view, size_t, Match*) const {
  fail("regex: search with no compiled pattern");
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view) const {
  fail("regex: search with no compiled pattern");
}

std::vector<Regex::Match> Regex::matches(std::string_view) const {
  fail("regex: search with no compiled pattern");
}

std::string Regex::replace_all(std::string_view, std::string_view) const {
  fail("regex: search with no compiled pattern");
}

}  // namespace strata
