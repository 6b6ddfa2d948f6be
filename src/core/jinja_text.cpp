#include "core/jinja_text.h"

#include "core/jinja_internal.h"
#include "core/text.h"

namespace strata::jinja {

namespace {

bool upper_cp(uint32_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7);
}
bool lower_cp(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 0xDF && c <= 0xFF && c != 0xF7);
}
uint32_t up(uint32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  return c;
}
uint32_t down(uint32_t c) { return upper_cp(c) ? c + 0x20 : c; }

// Whether a letter has case (for title's word boundaries): Latin, Greek,
// Cyrillic, Armenian; CJK ideographs have none.
bool cased(uint32_t c) { return upper_cp(c) || lower_cp(c) || (c >= 0x100 && c <= 0x58F); }

template <typename F>
std::string map_cps(const std::string& s, F f) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(s, i);
    const uint32_t m = f(cp, k++);
    if (m == cp)
      out.append(s, start, i - start);
    else
      append_utf8(out, m);
  }
  return out;
}

}  // namespace

std::string py_strip(const std::string& s, const Value* chars, char which) {
  std::vector<uint32_t> set;
  if (chars && chars->is_string())
    for (size_t i = 0; i < chars->as_string().size();)
      set.push_back(next_code_point(chars->as_string(), i));
  auto strip_it = [&](uint32_t cp) {
    if (!chars || !chars->is_string()) return is_python_space(cp);
    for (uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  const auto off = code_point_offsets(s);
  size_t b = 0, e = off.size() - 1;
  auto cp_at = [&](size_t k) {
    size_t i = off[k];
    return next_code_point(s, i);
  };
  if (which != 'r')
    while (b < e && strip_it(cp_at(b))) ++b;
  if (which != 'l')
    while (e > b && strip_it(cp_at(e - 1))) --e;
  return s.substr(off[b], off[e] - off[b]);
}

std::string to_upper(const std::string& s) {
  return map_cps(s, [](uint32_t c, size_t) { return up(c); });
}
std::string to_lower(const std::string& s) {
  return map_cps(s, [](uint32_t c, size_t) { return down(c); });
}
std::string capitalize(const std::string& s) {
  return map_cps(s, [](uint32_t c, size_t k) { return k == 0 ? up(c) : down(c); });
}
std::string python_title(const std::string& s) {
  bool prev_cased = false;
  return map_cps(s, [&](uint32_t c, size_t) {
    const uint32_t m = prev_cased ? down(c) : up(c);
    prev_cased = cased(c);
    return m;
  });
}
std::string jinja_title(const std::string& s) {
  // Words start after runs of -, whitespace, (, {, [, <; each word's first
  // character is upper-cased and the rest lower-cased.
  bool start = true;
  return map_cps(s, [&](uint32_t c, size_t) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
    const uint32_t m = sep ? c : start ? up(c) : down(c);
    start = sep;
    return m;
  });
}

bool is_letter(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xD7 || c == 0xF7 || c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA;
  if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) ||
      (c >= 0xFF00 && c <= 0xFF20) || (c >= 0x1F000 && c <= 0x1FAFF))
    return false;
  return !is_python_space(c);
}

static bool case_test(const std::string& s, bool want_lower) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = next_code_point(s, i);
    if (want_lower ? upper_cp(c) : lower_cp(c)) return false;
    any |= want_lower ? lower_cp(c) : upper_cp(c);
  }
  return any;
}
bool is_lower(const std::string& s) { return case_test(s, true); }
bool is_upper(const std::string& s) { return case_test(s, false); }

}  // namespace strata::jinja
