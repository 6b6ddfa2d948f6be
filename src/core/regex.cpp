// Regex over PCRE2 (8-bit code units, UTF-8). See core/regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace strata {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? cat("PCRE2 error ", code) : std::string(reinterpret_cast<char*>(buf), size_t(n));
}

// One search's working memory: match data, and a JIT stack larger than the
// default 32 KiB, made only when a search needs it (deeply nested
// repetitions on long text).
struct Search {
  explicit Search(const pcre2_code* code)
      : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    STRATA_CHECK(md, "regex: out of memory for match data");
  }
  ~Search() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  // pcre2_match's result: > 0 a match, PCRE2_ERROR_NOMATCH none; other
  // errors throw.
  int match(const pcre2_code* code, std::string_view text, size_t start, uint32_t options,
            const std::string& pattern) {
    for (;;) {
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                 start, options, md, ctx);
      if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return rc == 0 ? 1 : rc;
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {
        stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
        ctx = pcre2_match_context_create(nullptr);
        STRATA_CHECK(stack && ctx, "regex: out of memory for a JIT stack");
        pcre2_jit_stack_assign(ctx, nullptr, stack);
        continue;
      }
      fail(cat("regex '", pattern, "': the search failed on a ", text.size(), "-byte text (",
               pcre2_message(rc), ")"));
    }
  }

  pcre2_match_data* md = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
};

size_t next_char(std::string_view text, size_t p) {
  ++p;
  while (p < text.size() && (uint8_t(text[p]) & 0xC0) == 0x80) ++p;
  return p;
}

}  // namespace

bool Regex::available() { return true; }

Regex Regex::compile(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &err, &offset, nullptr);
  STRATA_CHECK(code, where, ": bad regular expression '", pattern, "': ", pcre2_message(err),
               " (at offset ", offset, ")");
  auto c = std::make_shared<Code>();
  c->code = code;
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where there is no JIT, the interpreter runs
  Regex r;
  r.code_ = std::move(c);
  r.pattern_ = pattern;
  r.where_ = where;
  return r;
}

bool Regex::search(std::string_view text, size_t start, Match* m) const {
  STRATA_CHECK(code_, "regex: search with no compiled pattern");
  if (start > text.size()) return false;
  Search s(code_->code);
  const int rc = s.match(code_->code, text, start, 0, pattern_);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
  const uint32_t pairs = pcre2_get_ovector_count(s.md);
  m->begin = ov[0];
  m->end = ov[1];
  m->groups.clear();
  for (uint32_t g = 1; g < pairs; ++g) {
    if (ov[2 * g] == PCRE2_UNSET)
      m->groups.emplace_back(npos, npos);
    else
      m->groups.emplace_back(ov[2 * g], ov[2 * g + 1]);
  }
  return true;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (const Match& m : matches(text)) out.emplace_back(m.begin, m.end);
  return out;
}

std::string Regex::replace_all(std::string_view text, std::string_view with) const {
  std::string out;
  size_t prev = 0;
  for (const Match& m : matches(text)) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(with);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

std::vector<Regex::Match> Regex::matches(std::string_view text) const {
  STRATA_CHECK(code_, "regex: search with no compiled pattern");
  std::vector<Match> out;
  Search s(code_->code);
  size_t start = 0;
  bool after_empty = false;
  while (start <= text.size()) {
    // After an empty match, first a non-empty one at the same place, else on
    // from the next character (pcre2demo's loop, Python's finditer).
    const uint32_t opts = after_empty ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    const int rc = s.match(code_->code, text, start, opts, pattern_);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (!after_empty || start >= text.size()) break;
      start = next_char(text, start);
      after_empty = false;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const uint32_t pairs = pcre2_get_ovector_count(s.md);
    Match& m = out.emplace_back();
    m.begin = ov[0];
    m.end = ov[1];
    for (uint32_t g = 1; g < pairs; ++g) {
      if (ov[2 * g] == PCRE2_UNSET)
        m.groups.emplace_back(npos, npos);
      else
        m.groups.emplace_back(ov[2 * g], ov[2 * g + 1]);
    }
    after_empty = ov[0] == ov[1];
    start = ov[1];
  }
  return out;
}

}  // namespace strata
