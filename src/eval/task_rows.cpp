// Rows, field paths, templates, choice lists and gold answers (task_rows.h).
#include "eval/task_rows.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>

#include "core/text.h"

namespace strata::task_internal {

bool valid_path(std::string_view p) {
  if (p.empty()) return false;
  bool need_name = true;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '[') {
      const size_t close = p.find(']', i);
      if (close == std::string_view::npos || need_name) return false;
      for (size_t k = i + 1; k < close; ++k)
        if (!std::isdigit(static_cast<unsigned char>(p[k]))) return false;
      i = close + 1;
    } else if (p[i] == '.') {
      if (need_name) return false;
      need_name = true;
      ++i;
    } else if (p[i] == ']' || p[i] == '{' || p[i] == '}' || p[i] == '|') {
      return false;
    } else {
      need_name = false;
      ++i;
    }
  }
  return !need_name;
}

bool lookup(const json& v, std::string_view path, json& out) {
  if (path.empty()) {
    out = v;
    return true;
  }
  if (path[0] == '.') return lookup(v, path.substr(1), out);
  if (path[0] == '[') {
    const size_t close = path.find(']');
    const std::string_view index = path.substr(1, close - 1);
    const std::string_view rest = path.substr(close + 1);
    if (!v.is_array()) return false;
    if (index.empty()) {
      out = json::array();
      for (const json& e : v) {
        json x;
        if (!lookup(e, rest, x)) return false;
        out.push_back(std::move(x));
      }
      return true;
    }
    size_t i = 0;
    // An index too large for size_t is missing, not element 0.
    const bool parsed =
        std::from_chars(index.data(), index.data() + index.size(), i).ec == std::errc();
    return parsed && i < v.size() && lookup(v[i], rest, out);
  }
  const size_t end = std::min(path.size(), path.find_first_of(".["));
  if (!v.is_object()) return false;
  const auto it = v.find(std::string(path.substr(0, end)));
  return it != v.end() && lookup(*it, path.substr(end), out);
}

bool scalar_text(const json& v, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_boolean()) {
    out = v.get<bool>() ? "true" : "false";
  } else if (v.is_number()) {
    out = v.dump();
  } else {
    return false;
  }
  return true;
}

const char* json_kind(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_null()) return "null";
  return "a scalar";
}

json need(const Row& row, const std::string& path) {
  json v;
  if (!lookup(row.fields, path, v)) fail_one_line(row.where, ": missing field '", path, "'");
  return v;
}

std::string need_text(const Row& row, const std::string& path) {
  const json v = need(row, path);
  std::string s;
  if (!scalar_text(v, s))
    fail_one_line(row.where, ": field '", path, "' is ", json_kind(v), ", expected text");
  return s;
}

Template::Template(const std::string& source, const std::string& at) {
  std::string literal;
  for (size_t i = 0; i < source.size(); ++i) {
    const char c = source[i];
    if ((c == '{' || c == '}') && i + 1 < source.size() && source[i + 1] == c) {
      literal += c;
      ++i;
    } else if (c == '}') {
      fail_one_line(at, ": unmatched '}' in template (write '}}' for a literal brace)");
    } else if (c == '{') {
      const size_t close = source.find('}', i);
      if (close == std::string::npos)
        fail_one_line(at, ": unclosed '{' in template (write '{{' for a literal brace)");
      Part p;
      p.literal = std::move(literal);
      literal.clear();
      std::string spec = source.substr(i + 1, close - i - 1);
      size_t bar = spec.find('|');
      p.path = spec.substr(0, bar);
      if (!valid_path(p.path)) fail_one_line(at, ": bad field '", p.path, "' in template");
      while (bar != std::string::npos) {
        const size_t next = spec.find('|', bar + 1);
        const std::string f =
            spec.substr(bar + 1, next == std::string::npos ? next : next - bar - 1);
        if (f == "strip") {
          p.filters.push_back(Filter::Strip);
        } else if (f == "spaces") {
          p.filters.push_back(Filter::Spaces);
        } else {
          fail_one_line(at, ": unknown filter '", f, "' in template (known: strip, spaces)");
        }
        bar = next;
      }
      parts_.push_back(std::move(p));
      i = close;
    } else {
      literal += c;
    }
  }
  tail_ = std::move(literal);
}

std::string Template::render(const Row& row) const {
  std::string out;
  for (const Part& p : parts_) {
    out += p.literal;
    std::string v = p.path == "_group" ? row.group : need_text(row, p.path);
    for (Filter f : p.filters) {
      if (f == Filter::Strip) v = python_strip(v);
      if (f == Filter::Spaces) std::replace(v.begin(), v.end(), '_', ' ');
    }
    out += v;
  }
  return out + tail_;
}

std::vector<std::string> ListSpec::eval(const Row& row) const {
  std::vector<std::string> out;
  if (path.empty()) {
    for (const Template& t : items) out.push_back(t.render(row));
    return out;
  }
  const json v = need(row, path);
  if (!v.is_array())
    fail_one_line(row.where, ": field '", path, "' is ", json_kind(v), ", expected a list");
  for (const json& e : v) {
    std::string s;
    if (!scalar_text(e, s))
      fail_one_line(row.where, ": field '", path, "' holds ", json_kind(e), ", expected text");
    out.push_back(std::move(s));
  }
  return out;
}

int GoldSpec::eval(const Row& row) const {
  if (!map.empty()) {
    const std::string v = need_text(row, field);
    const auto it = map.find(v);
    if (it == map.end())
      fail_one_line(row.where, ": gold: '", v, "' (field '", field, "') is not in the map");
    return it->second;
  }
  if (!index_in.empty()) {
    const std::string v = need_text(row, field);
    ListSpec list{index_in, {}};
    const std::vector<std::string> keys = list.eval(row);
    const auto it = std::find(keys.begin(), keys.end(), v);
    if (it == keys.end())
      fail_one_line(row.where, ": gold: '", v, "' (field '", field, "') is not in '", index_in,
                    "'");
    return int(it - keys.begin());
  }
  const json v = need(row, field);
  if (v.is_number_integer()) {  // range-checked: get<int>() would wrap 4294967296 to 0
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                               : v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      fail_one_line(row.where, ": gold ", v.dump(), " is not a choice index");
    return int(v.get<int64_t>());
  }
  std::string s;
  if (v.is_string()) s = trim(v.get<std::string>());
  int g = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), g);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    fail_one_line(row.where, ": gold field '", field, "' is ",
                  v.dump(-1, ' ', false, json::error_handler_t::replace),
                  ", expected an integer index");
  return g;
}

}  // namespace strata::task_internal
