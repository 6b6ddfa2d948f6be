#include "core/text.h"

#include <algorithm>
#include <climits>
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

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
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

}  // namespace strata
