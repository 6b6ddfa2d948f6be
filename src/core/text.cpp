#include "core/text.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <stdexcept>

namespace strata {

std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::string shorten(const std::string& s, size_t max) {
  if (s.size() <= max || max < 8) return s;
  const size_t tail = max / 3, head = max - tail - 3;
  return s.substr(0, head) + "..." + s.substr(s.size() - tail);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::string trim(std::string_view s, std::string_view chars) {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(chars) - b + 1));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(size_t(std::max(n, 0)), '\0');
  if (n > 0) std::vsnprintf(out.data(), size_t(n) + 1, format, again);
  va_end(again);
  return out;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 11) return false;
  size_t used = 0;
  try {
    const long v = std::stol(s, &used);
    if (used != s.size() || v < INT_MIN || v > INT_MAX) return false;
    *out = int(v);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

uint32_t next_code_point(std::string_view s, size_t* at) {
  const auto byte = [&](size_t i) { return uint32_t(static_cast<unsigned char>(s[i])); };
  const size_t i = *at;
  const uint32_t b0 = byte(i);
  int extra = 0;
  uint32_t cp = b0, min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    extra = 1, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    extra = 2, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    extra = 3, cp = b0 & 0x07, min = 0x10000;
  }
  if (extra > 0 && i + size_t(extra) < s.size()) {
    bool ok = true;
    for (int k = 1; ok && k <= extra; ++k) {
      const uint32_t b = byte(i + size_t(k));
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
      *at = i + size_t(extra) + 1;
      return cp;
    }
  }
  *at = i + 1;
  return b0;  // ASCII, or a stray byte counted on its own
}

std::vector<std::string> python_split(std::string_view s, std::string_view sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = s.find(sep, from)) != std::string_view::npos; from = at + sep.size())
    out.emplace_back(s.substr(from, at - from));
  out.emplace_back(s.substr(from));
  return out;
}

std::string python_replace(std::string_view s, std::string_view old, std::string_view with) {
  std::string out;
  size_t last = 0;
  for (size_t at; (at = s.find(old, last)) != std::string_view::npos; last = at + old.size()) {
    out += s.substr(last, at - last);
    out += with;
  }
  out += s.substr(last);
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (size_t at = 0; at < s.size(); ++n) next_code_point(s, &at);
  return n;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string python_strip(std::string_view s) {
  size_t begin = s.size(), end = 0;
  for (size_t at = 0; at < s.size();) {
    const size_t here = at;
    if (!is_python_space(next_code_point(s, &at))) {
      begin = std::min(begin, here);
      end = at;
    }
  }
  return begin < end ? std::string(s.substr(begin, end - begin)) : std::string();
}

void require_text(std::string_view s, const std::string& what) {
  if (const size_t nul = s.find('\0'); nul != std::string_view::npos)
    fail_one_line(what, ": not a text file (a NUL byte at offset ", nul, ")");
  for (size_t at = 0; at < s.size();) {
    const size_t here = at;
    const auto b = static_cast<unsigned char>(s[at]);
    next_code_point(s, &at);
    if (b >= 0x80 && at == here + 1) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "%02x", b);
      fail_one_line(what, ": not UTF-8 text (byte 0x", hex, " at offset ", here, ")");
    }
  }
}

size_t python_strip_end(std::string_view s) {
  size_t end = 0;
  for (size_t at = 0; at < s.size();)
    if (!is_python_space(next_code_point(s, &at))) end = at;
  return end;
}

int64_t python_split_count(std::string_view s) {
  int64_t pieces = 1;
  bool in_space = false;
  for (size_t at = 0; at < s.size();) {
    const bool space = is_python_space(next_code_point(s, &at));
    if (space && !in_space) ++pieces;
    in_space = space;
  }
  return pieces;
}

}  // namespace strata

namespace strata {

std::string canonical_dtype(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "fp32" || n == "float32" || n == "f32") return "fp32";
  if (n == "bf16" || n == "bfloat16") return "bf16";
  if (n == "fp16" || n == "float16" || n == "f16") return "fp16";
  return name;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace strata
