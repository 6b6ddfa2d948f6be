#include "core/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace strata::jinja {

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::dict(Dict entries) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(entries));
  return v;
}

Value Value::name_space(Dict entries) {
  Value v = dict(std::move(entries));
  v.name_space_ = true;
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::undefined(std::string what) {
  Value v;
  v.s_ = std::move(what);
  return v;
}

template <typename J>
static Value value_of_json(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value(nullptr);
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(value_of_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), value_of_json(*it));
      return Value::dict(std::move(d));
    }
    default:
      return Value(nullptr);
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return value_of_json(j); }
Value Value::from_json(const nlohmann::json& j) { return value_of_json(j); }

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  dict_->emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return d_ != 0;
    case Kind::String:
      return !s_.empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return !dict_->empty();
    case Kind::Function:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Dict:
      return name_space_ ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e-05"
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (std::isdigit(static_cast<unsigned char>(sci[i]))) digits += sci[i];
  const std::string sign = d < 0 ? "-" : "";
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + m + eb;
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return sign + out;
}

// Decodes the code point at s[i] (advancing i); an invalid byte is itself.

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    next_code_point(s, i);
  }
  out.push_back(s.size());
  return out;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Python's str.isprintable() for one code point, for the common cases:
// controls, separators other than the space, format characters.
static bool printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
      (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff)
    return false;
  if ((cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0xfff9 && cp <= 0xfffb)) return false;
  return true;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const char q = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(s, i);
    char buf[16];
    if (cp == uint32_t(q) || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += q;
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return s_;
    case Kind::Function:
      return "<function>";
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return i_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return float_repr(d_);
    case Kind::String:
      return string_repr(s_);
    case Kind::List: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = name_space_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + string_repr((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      return out + (name_space_ ? "}>" : "}");
    }
    case Kind::Function:
      return "<function>";
  }
  return "";
}

int64_t Value::length() const {
  switch (kind_) {
    case Kind::String:
      return int64_t(code_point_offsets(s_).size()) - 1;
    case Kind::List:
      return int64_t(list_->size());
    case Kind::Dict:
      return int64_t(dict_->size());
    default:
      return -1;
  }
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::None:
      return nullptr;
    case Kind::Bool:
      return bool(i_);
    case Kind::Int:
      return i_;
    case Kind::Float:
      return d_;
    case Kind::String:
      return s_;
    case Kind::List: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : *list_) a.push_back(e.to_json());
      return a;
    }
    case Kind::Dict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, e] : *dict_) o[k] = e.to_json();
      return o;
    }
    default:
      fail(cat("Object of type ", type_name(), " is not JSON serializable"));
  }
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::Float || b.kind() == K::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None:
      return true;
    case K::String:
      return a.as_string() == b.as_string();
    case K::List:
      return std::equal(a.items().begin(), a.items().end(), b.items().begin(), b.items().end(),
                        [](const Value& x, const Value& y) { return equal(x, y); });
    case K::Dict: {
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* w = b.find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    }
    case K::Function:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float)
      return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail(cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(),
           "'"));
}

static void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(s, i);
    char buf[16];
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s, start, i - start);
    }
  }
  out += '"';
}

static void dump(const Value& v, const JsonStyle& st, int depth, std::string& out) {
  using K = Value::Kind;
  const std::string item_sep = !st.item_separator.empty() ? st.item_separator
                               : st.indent >= 0           ? ","
                                                          : ", ";
  const std::string key_sep = !st.key_separator.empty() ? st.key_separator : ": ";
  auto newline = [&](int d) {
    if (st.indent >= 0) out += "\n" + std::string(size_t(st.indent * d), ' ');
  };
  switch (v.kind()) {
    case K::None:
      out += "null";
      return;
    case K::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case K::Int:
      out += std::to_string(v.as_int());
      return;
    case K::Float: {
      const double d = v.as_double();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                             : float_repr(d);
      return;
    }
    case K::String:
      dump_string(v.as_string(), st.ensure_ascii, out);
      return;
    case K::List: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        dump(v.items()[i], st, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case K::Dict: {
      if (v.entries().empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> e;
      for (const auto& kv : v.entries()) e.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(e.begin(), e.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < e.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        dump_string(e[i]->first, st.ensure_ascii, out);
        out += key_sep;
        dump(e[i]->second, st, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail(cat("Object of type ", v.type_name(), " is not JSON serializable"));
  }
}

std::string dump_json(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(v, style, 0, out);
  return out;
}

}  // namespace strata::jinja
