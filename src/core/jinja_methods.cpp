// Jinja built-ins, part one: the Python methods of str, list and dict that
// templates call, Jinja's tests (x is defined, ...) and the globals range,
// dict and namespace.
#include <algorithm>

#include "core/error.h"
#include "core/jinja_internal.h"
#include "core/jinja_text.h"

namespace strata::jinja {

namespace {

const std::string& string_arg(Args& a, size_t i, const char* what) {
  if (i >= a.positional.size() || !a.positional[i].is_string())
    fail(cat(what, "() needs a string argument"));
  return a.positional[i].as_string();
}

// Python's str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    size_t i = 0;
    while (i < s.size()) {
      size_t j = i;
      while (j < s.size()) {  // skip whitespace
        size_t k = j;
        if (!is_python_space(next_code_point(s, k))) break;
        j = k;
      }
      if (j >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        out.emplace_back(py_strip(s.substr(j), nullptr, 'r'));
        return out;
      }
      size_t e = j;
      while (e < s.size()) {
        size_t k = e;
        if (is_python_space(next_code_point(s, k))) break;
        e = k;
      }
      out.emplace_back(s.substr(j, e - j));
      i = e;
    }
    return out;
  }
  if (!sep.is_string()) fail("split() separator must be a string or None");
  const std::string& d = sep.as_string();
  if (d.empty()) fail("empty separator");
  size_t i = 0;
  for (;;) {
    const size_t j = s.find(d, i);
    if (j == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) break;
    out.emplace_back(s.substr(i, j - i));
    i = j + d.size();
  }
  out.emplace_back(s.substr(i));
  return out;
}

List splitlines(const std::string& s) {
  List out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const uint32_t cp = next_code_point(s, i);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c ||
                     cp == 0x1d || cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    out.emplace_back(s.substr(start, at - start));
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const auto off = code_point_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count < 0 || done < count) out += to, ++done;
      out += s.substr(off[i], off[i + 1] - off[i]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t i = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out += s.substr(i, j - i) + to;
    i = j + from.size();
  }
  return out + s.substr(i);
}

// Code-point index of byte offset `b`.
int64_t cp_index(const std::string& s, size_t b) {
  return int64_t(code_point_offsets(s.substr(0, b)).size()) - 1;
}

bool affix(const std::string& s, const Value& what, bool prefix) {
  const List options = what.is_list() ? what.items() : List{what};
  for (const Value& o : options) {
    if (!o.is_string()) fail("startswith/endswith need a string or a tuple of strings");
    const std::string& x = o.as_string();
    if (x.size() > s.size()) continue;
    if (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)
      return true;
  }
  return false;
}

Value string_method(const std::string& s, const std::string& name, Args& a) {
  static const Value none(nullptr), minus_one(int64_t(-1));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value& chars = arg(a, 0, "chars", none);
    return Value(py_strip(s, chars.is_none() ? nullptr : &chars, name[0] == 's' ? 'b' : name[0]));
  }
  if (name == "split")
    return Value::list(split(s, arg(a, 0, "sep", none), arg(a, 1, "maxsplit", minus_one).as_int()));
  if (name == "splitlines") return Value::list(splitlines(s));
  if (name == "upper") return Value(to_upper(s));
  if (name == "lower") return Value(to_lower(s));
  if (name == "title") return Value(python_title(s));
  if (name == "capitalize") return Value(capitalize(s));
  if (name == "replace")
    return Value(replace(s, string_arg(a, 0, "replace"), string_arg(a, 1, "replace"),
                         arg(a, 2, "count", minus_one).as_int()));
  if (name == "startswith" || name == "endswith") {
    if (a.positional.empty()) fail(cat(name, "() needs an argument"));
    return Value(affix(s, a.positional[0], name == "startswith"));
  }
  if (name == "find" || name == "index" || name == "rfind" || name == "count") {
    const std::string& x = string_arg(a, 0, name.c_str());
    if (name == "count") {
      if (x.empty()) return Value(Value(s).length() + 1);
      int64_t n = 0;
      for (size_t i = s.find(x); i != std::string::npos; i = s.find(x, i + x.size())) ++n;
      return Value(n);
    }
    const size_t at = name == "rfind" ? s.rfind(x) : s.find(x);
    if (at == std::string::npos) {
      if (name == "index") fail("substring not found");
      return Value(int64_t(-1));
    }
    return Value(cp_index(s, at));
  }
  if (name == "join") {
    if (a.positional.empty()) fail("join() needs an iterable");
    const List items = iterable_items(a.positional[0]);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      const Value& x = items[i];
      if (!x.is_string())
        fail(cat("sequence item ", i, ": expected str instance, ", x.type_name(), " found"));
      out += (i ? s : "") + x.as_string();
    }
    return Value(out);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (size_t i = 0; i < s.size();) {
      const uint32_t c = next_code_point(s, i);
      const bool digit = c >= '0' && c <= '9', alpha = is_letter(c);
      const bool ok = name == "isdigit"   ? digit
                      : name == "isalpha" ? alpha
                      : name == "isspace" ? is_python_space(c)
                                          : digit || alpha;
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "islower" || name == "isupper")
    return Value(name == "islower" ? is_lower(s) : is_upper(s));
  fail(cat("'str' object has no attribute '", name, "'"));
}

bool is_string_method(const std::string& n) {
  static const char* names[] = {
      "strip",      "lstrip",  "rstrip",     "split",    "splitlines", "upper",   "lower",  "title",
      "capitalize", "replace", "startswith", "endswith", "find",       "rfind",   "index",  "count",
      "join",       "isdigit", "isalpha",    "isspace",  "isalnum",    "islower", "isupper"};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

}  // namespace

Value bound_method(const Value& subject, const std::string& name) {
  if (subject.is_string() && is_string_method(name)) {
    const std::string s = subject.as_string();
    return Value::function([s, name](Args& a) { return string_method(s, name, a); });
  }
  if (subject.is_list() && (name == "index" || name == "count" || name == "append")) {
    Value list = subject;
    return Value::function([list, name](Args& a) mutable -> Value {
      if (a.positional.size() != 1) fail(cat(name, "() takes exactly one argument"));
      if (name == "append") {
        list.items().push_back(a.positional[0]);
        return Value(nullptr);
      }
      int64_t n = 0;
      for (size_t i = 0; i < list.items().size(); ++i) {
        if (!equal(list.items()[i], a.positional[0])) continue;
        if (name == "index") return Value(int64_t(i));
        ++n;
      }
      if (name == "index") fail(cat(a.positional[0].repr(), " is not in list"));
      return Value(n);
    });
  }
  if (subject.is_dict() &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    const Value d = subject;
    return Value::function([d, name](Args& a) -> Value {
      if (name == "get") {
        if (a.positional.empty() || !a.positional[0].is_string()) fail("get() needs a key");
        const Value* v = d.find(a.positional[0].as_string());
        return v ? *v : a.positional.size() > 1 ? a.positional[1] : Value(nullptr);
      }
      List out;
      for (const auto& [k, v] : d.entries()) {
        if (name == "items")
          out.push_back(Value::tuple({Value(k), v}));
        else
          out.push_back(name == "keys" ? Value(k) : v);
      }
      return Value::list(std::move(out));
    });
  }
  return {};
}

bool has_test(const std::string& n) {
  static const char* names[] = {
      "defined", "undefined", "none",        "boolean", "true",        "false",    "integer",
      "float",   "number",    "string",      "mapping", "iterable",    "sequence", "callable",
      "sameas",  "escaped",   "even",        "odd",     "divisibleby", "eq",       "equalto",
      "==",      "ne",        "!=",          "lt",      "lessthan",    "<",        "le",
      "<=",      "gt",        "greaterthan", ">",       "ge",          ">=",       "in",
      "lower",   "upper",     "filter",      "test"};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

bool apply_test(Renderer& r, const std::string& n, const Value& v, Args& a) {
  using K = Value::Kind;
  auto other = [&]() -> const Value& {
    if (a.positional.empty()) fail(cat("test '", n, "' needs an argument"));
    return r.check_defined(a.positional[0]);
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.kind() == K::Bool;
  if (n == "true") return v.kind() == K::Bool && v.as_bool();
  if (n == "false") return v.kind() == K::Bool && !v.as_bool();
  if (n == "integer") return v.kind() == K::Int;
  if (n == "float") return v.kind() == K::Float;
  if (n == "number") return v.is_number();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable" || n == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (n == "callable") return v.is_function();
  if (n == "escaped") return false;
  if (n == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    if (v.is_list()) return &v.items() == &o.items();
    if (v.is_dict()) return &v.entries() == &o.entries();
    return equal(v, o) && !v.is_string() && v.kind() != K::Float;
  }
  if (n == "even" || n == "odd" || n == "divisibleby") {
    r.check_defined(v);
    if (v.kind() != K::Int && v.kind() != K::Bool) fail(cat("test '", n, "' needs an integer"));
    const int64_t d = n == "divisibleby" ? other().as_int() : 2;
    if (d == 0) fail("integer division or modulo by zero");
    const bool divisible = v.as_int() % d == 0;
    return n == "odd" ? !divisible : divisible;
  }
  if (n == "eq" || n == "equalto" || n == "==") return equal(r.check_defined(v), other());
  if (n == "ne" || n == "!=") return !equal(r.check_defined(v), other());
  if (n == "lt" || n == "lessthan" || n == "<") return less(r.check_defined(v), other());
  if (n == "le" || n == "<=") return !less(other(), r.check_defined(v));
  if (n == "gt" || n == "greaterthan" || n == ">") return less(other(), r.check_defined(v));
  if (n == "ge" || n == ">=") return !less(r.check_defined(v), other());
  if (n == "in") {
    const Value& hay = other();
    if (hay.is_string())
      return v.is_string() && hay.as_string().find(v.as_string()) != std::string::npos;
    if (hay.is_dict()) return v.is_string() && hay.find(v.as_string());
    if (hay.is_list())
      return std::any_of(hay.items().begin(), hay.items().end(),
                         [&](const Value& x) { return equal(x, v); });
    fail(cat("argument of type '", hay.type_name(), "' is not iterable"));
  }
  if (n == "lower" || n == "upper") {
    if (!v.is_string()) return false;
    return n == "lower" ? is_lower(v.as_string()) : is_upper(v.as_string());
  }
  if (n == "filter" || n == "test") {
    if (!v.is_string()) return false;
    return n == "filter" ? has_filter(v.as_string()) : has_test(v.as_string());
  }
  fail(cat("unknown test '", n, "'"));
}

Value global_function(const std::string& name) {
  if (name == "range")
    return Value::function([](Args& a) {
      std::vector<int64_t> p;
      for (const Value& v : a.positional) {
        if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool)
          fail(cat("range() takes integers, not '", v.type_name(), "'"));
        p.push_back(v.as_int());
      }
      if (p.empty() || p.size() > 3) fail("range() takes 1 to 3 arguments");
      const int64_t start = p.size() > 1 ? p[0] : 0, stop = p.size() > 1 ? p[1] : p[0];
      const int64_t step = p.size() > 2 ? p[2] : 1;
      if (step == 0) fail("range() arg 3 must not be zero");
      if ((stop - start) / step > 10'000'000) fail("range() too large (over 10,000,000 items)");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value::list(std::move(out));
    });
  if (name == "dict" || name == "namespace")
    return Value::function([name](Args& a) {
      Dict d;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) fail(cat(name, "() takes keyword arguments or a dict"));
        d.insert(d.end(), p.entries().begin(), p.entries().end());
      }
      Value out = name == "dict" ? Value::dict() : Value::name_space();
      for (const auto& [k, v] : d) out.set(k, v);
      for (const auto& [k, v] : a.named) out.set(k, v);
      return out;
    });
  return {};
}

}  // namespace strata::jinja
