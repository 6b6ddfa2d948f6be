// Jinja built-ins, part two: the filters (x | name(args)), as Jinja 3
// defines them, lm-evaluation-harness's regex_replace and strata's literal_eval.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/jinja.h"
#include "core/jinja_internal.h"
#include "core/jinja_text.h"
#include "core/regex.h"

namespace strata::jinja {

namespace {

const Value kNone(nullptr), kFalse(false), kEmpty("");

}  // namespace

List iterable_items(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& kv : v.entries()) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      List out;
      const auto off = code_point_offsets(v.as_string());
      for (size_t i = 0; i + 1 < off.size(); ++i)
        out.emplace_back(v.as_string().substr(off[i], off[i + 1] - off[i]));
      return out;
    }
    default:
      fail(cat("'", v.type_name(), "' object is not iterable"));
  }
}

namespace {

// Jinja's attribute lookup for map/selectattr/sort: "a.b" or "a.0".
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t dot = std::min(path.find('.', i), path.size());
    const std::string part = path.substr(i, dot - i);
    if (v.is_dict()) {
      const Value* f = v.find(part);
      v = f ? *f : Value::undefined(cat("'dict object' has no attribute '", part, "'"));
    } else if (v.is_list() && !part.empty() && std::isdigit(static_cast<unsigned char>(part[0]))) {
      const size_t k = std::strtoul(part.c_str(), nullptr, 10);
      v = k < v.items().size() ? v.items()[k] : Value::undefined("no such element");
    } else {
      v = Value::undefined(cat("'", v.type_name(), " object' has no attribute '", part, "'"));
    }
    i = dot + 1;
  }
  return v;
}

// A sort key: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(to_lower(v.as_string())) : v;
}

std::string indent(const std::string& s0, const Value& width, bool first, bool blank) {
  if (!width.is_string() && width.as_int() > 4096) fail("indent: a width over 4096");
  const std::string pad = width.is_string()
                              ? width.as_string()
                              : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i)
    out += "\n" + ((blank || !lines[i].empty()) ? pad + lines[i] : lines[i]);
  return first ? pad + out : out;
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) fail(cat("round needs a number, not '", v.type_name(), "'"));
  const double x = v.as_double();
  if (method == "common" && v.kind() != Value::Kind::Float) return Value(v.as_int());
  if (method == "common" && precision < 0) {
    const double scale = std::pow(10.0, double(-precision));
    return Value(std::nearbyint(x / scale) * scale);
  }
  if (method == "common") {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(std::clamp<int64_t>(precision, 0, 300)), x);
    return Value(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, double(precision));
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  fail("round: method must be 'common', 'ceil' or 'floor'");
}

// Python's float(s) for a stripped string: strtod without its hexadecimal
// forms (float('0x1A') raises).
bool python_float(const std::string& s, double& d) {
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  d = std::strtod(s.c_str(), &end);
  return *end == 0;
}

Value to_int(const Value& v, const Value& dflt, int base) {
  if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return Value(v.as_int());
  if (v.kind() == Value::Kind::Float) return Value(float_to_int(v.as_double()));
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, 'b');
    // Python's int(s, base) takes base 0 or 2..36 (strtoll sets no end for others).
    if (base == 0 || (base >= 2 && base <= 36)) {
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (!s.empty() && *end == 0) return Value(int64_t(i));
    }
    // Not an integer in `base`: read as a float, whatever the base, as Jinja
    // does ('1.5' | int(0, 16) is 1).
    double d = 0;
    if (python_float(s, d) && std::isfinite(d)) return Value(float_to_int(d));
  }
  return dflt;
}

Value to_float(const Value& v, const Value& dflt) {
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, 'b');
    double d = 0;
    if (python_float(s, d)) return Value(d);
  }
  return dflt;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string tojson(Renderer& r, const Value& v, Args& a) {
  JsonStyle st;
  const Value& ind = arg(a, 0, "indent", kNone);
  if (!ind.is_none() && !ind.is_undefined()) st.indent = int(ind.as_int());
  if (r.program->options.tojson_unsorted) {
    st.ensure_ascii = arg(a, 99, "ensure_ascii", kFalse).truthy();
    st.sort_keys = arg(a, 99, "sort_keys", kFalse).truthy();
    const Value& sep = arg(a, 99, "separators", kNone);
    if (sep.is_list() && sep.items().size() == 2) {
      st.item_separator = sep.items()[0].str();
      st.key_separator = sep.items()[1].str();
    }
    return dump_json(v, st);
  }
  st.ensure_ascii = true;
  st.sort_keys = true;
  std::string out;
  for (char c : dump_json(v, st)) {
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else if (c == '\'')
      out += "\\u0027";
    else
      out += c;
  }
  return out;
}

Value select(Renderer& r, const List& items, Args& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string())
      fail("selectattr needs an attribute name");
    attribute = a.positional[next++].as_string();
  }
  std::string test;
  if (next < a.positional.size()) test = a.positional[next++].str();
  Args test_args;
  test_args.positional.assign(a.positional.begin() + long(std::min(next, a.positional.size())),
                              a.positional.end());
  List out;
  for (const Value& item : items) {
    const Value v = by_attr ? attr_path(item, attribute) : item;
    const bool pass = test.empty() ? v.truthy() : apply_test(r, test, v, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value minmax(const List& items, Args& a, bool want_max) {
  const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
  const Value& attribute = arg(a, 1, "attribute", kNone);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    auto key = [&](size_t k) {
      return sort_key(attribute.is_string() ? attr_path(items[k], attribute.as_string()) : items[k],
                      cs);
    };
    if (want_max ? less(key(best), key(i)) : less(key(i), key(best))) best = i;
  }
  return items[best];
}

Value sort(const List& items0, Args& a) {
  List items = items0;
  const bool reverse = arg(a, 0, "reverse", kFalse).truthy();
  const bool cs = arg(a, 1, "case_sensitive", kFalse).truthy();
  const Value& attribute = arg(a, 2, "attribute", kNone);
  auto key = [&](const Value& v) {
    return sort_key(attribute.is_string() ? attr_path(v, attribute.as_string()) : v, cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

std::string truncate(const std::string& s, Args& a) {
  static const Value k255(int64_t(255)), kDots("..."), k5(int64_t(5));
  const int64_t length = arg(a, 0, "length", k255).as_int();
  const bool killwords = arg(a, 1, "killwords", kFalse).truthy();
  const std::string end = arg(a, 2, "end", kDots).str();
  const Value& lw = arg(a, 3, "leeway", kNone);
  const int64_t leeway = lw.is_none() ? 5 : lw.as_int();
  const auto off = code_point_offsets(s);
  const int64_t n = int64_t(off.size()) - 1, n_end = Value(end).length();
  if (length < n_end) fail("truncate: length is shorter than the end marker");
  if (leeway < 0) fail("truncate: leeway must be >= 0");
  if (length >= n || n - length <= leeway) return s;
  std::string head = s.substr(0, off[size_t(length - n_end)]);
  if (killwords) return head + end;
  const size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head.resize(sp);
  return head + end;
}

std::string center(const std::string& s, int64_t width) {
  const int64_t n = Value(s).length();
  if (width <= n) return s;
  const int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
  return std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' ');
}

// Python's re.sub replacement for one match: \1..\99 and \g<N> insert a
// group (empty where it took no part), \n \t \\ their characters.
std::string expand(const std::string& repl, const Regex::Match& m, const std::string& s) {
  std::string out;
  auto group = [&](size_t g) {
    if (g == 0) return s.substr(m.begin, m.end - m.begin);
    if (g > m.groups.size()) fail(cat("regex_replace: invalid group reference ", g));
    const auto [b, e] = m.groups[g - 1];
    return b == Regex::npos ? std::string() : s.substr(b, e - b);
  };
  for (size_t i = 0; i < repl.size(); ++i) {
    if (repl[i] != '\\' || i + 1 >= repl.size()) {
      out += repl[i];
      continue;
    }
    const char c = repl[++i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t g = size_t(c - '0');
      if (i + 1 < repl.size() && std::isdigit(static_cast<unsigned char>(repl[i + 1])))
        g = g * 10 + size_t(repl[++i] - '0');
      out += group(g);
    } else if (c == 'g' && i + 1 < repl.size() && repl[i + 1] == '<') {
      const size_t close = repl.find('>', i);
      const std::string ref = repl.substr(i + 2, close == std::string::npos ? 0 : close - i - 2);
      if (ref.empty() || ref.find_first_not_of("0123456789") != std::string::npos)
        fail("regex_replace: only numbered groups \\g<N> are supported");
      out += group(std::stoul(ref));
      i = close;
    } else if (c == 'n' || c == 't' || c == 'r' || c == '\\') {
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : '\\';
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      fail(cat("regex_replace: bad escape \\", std::string(1, c), " in the replacement"));
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

// lm-evaluation-harness's regex_replace: re.sub(pattern, repl, s, count).
std::string regex_replace(const std::string& s, Args& a) {
  if (a.positional.size() < 2) fail("regex_replace needs a pattern and a replacement");
  const std::string repl = a.positional[1].str();
  const Regex re = Regex::compile(a.positional[0].str(), "regex_replace");
  static const Value zero(int64_t(0));
  const int64_t count = arg(a, 2, "count", zero).as_int();
  std::string out;
  size_t last = 0;
  int64_t done = 0;
  for (const Regex::Match& m : re.matches(s)) {
    if (count > 0 && done == count) break;
    out += s.substr(last, m.begin - last) + expand(repl, m, s);
    last = m.end;
    ++done;
  }
  return out + s.substr(last);
}

const char* kFilters[] = {"default",    "d",           "length", "count",         "join",
                          "trim",       "upper",       "lower",  "capitalize",    "title",
                          "replace",    "first",       "last",   "list",          "string",
                          "int",        "float",       "abs",    "round",         "indent",
                          "items",      "dictsort",    "map",    "select",        "reject",
                          "selectattr", "rejectattr",  "unique", "sort",          "reverse",
                          "sum",        "min",         "max",    "batch",         "wordcount",
                          "center",     "truncate",    "tojson", "safe",          "e",
                          "escape",     "forceescape", "attr",   "regex_replace", "format",
                          "pprint",     "literal_eval"};

}  // namespace

bool has_filter(const std::string& n) {
  return std::find(std::begin(kFilters), std::end(kFilters), n) != std::end(kFilters);
}

Value apply_filter(Renderer& r, const std::string& n, Value v, Args& a) {
  if (n == "default" || n == "d") {
    const bool boolean = arg(a, 1, "boolean", kFalse).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", kEmpty);
    return v;
  }
  if (n == "length" || n == "count")
    return Value(v.is_undefined() ? 0 : std::max<int64_t>(0, v.length()));
  if (n == "string") return Value(v.str());
  if (n == "pprint") return Value(v.repr());
  if (n == "upper") return Value(to_upper(v.str()));
  if (n == "lower") return Value(to_lower(v.str()));
  if (n == "capitalize") return Value(capitalize(v.str()));
  if (n == "title") return Value(jinja_title(v.str()));
  if (n == "trim") {
    const Value& chars = arg(a, 0, "chars", kNone);
    return Value(py_strip(v.str(), chars.is_none() ? nullptr : &chars, 'b'));
  }
  if (n == "safe" || n == "e" || n == "escape" || n == "forceescape")
    return n == "safe" ? v : Value(escape_html(v.str()));
  if (n == "replace") {
    if (a.positional.size() < 2) fail("replace needs old and new strings");
    return bound_method(Value(v.str()), "replace").fn()(a);
  }
  if (n == "int") {
    static const Value zero(int64_t(0));
    static const Value ten(int64_t(10));
    return to_int(v, arg(a, 0, "default", zero), int(arg(a, 1, "base", ten).as_int()));
  }
  if (n == "float") {
    static const Value zero(0.0);
    return to_float(v, arg(a, 0, "default", zero));
  }
  if (n == "abs") {
    if (!v.is_number()) fail(cat("bad operand type for abs(): '", v.type_name(), "'"));
    return v.kind() == Value::Kind::Float
               ? Value(std::fabs(v.as_double()))
               : Value(int64_t(std::llabs(v.as_int() == INT64_MIN ? INT64_MAX : v.as_int())));
  }
  if (n == "round") {
    static const Value zero(int64_t(0)), common("common");
    return round_value(v, arg(a, 0, "precision", zero).as_int(), arg(a, 1, "method", common).str());
  }
  if (n == "indent") {
    static const Value four(int64_t(4));
    return Value(indent(v.str(), arg(a, 0, "width", four), arg(a, 1, "first", kFalse).truthy(),
                        arg(a, 2, "blank", kFalse).truthy()));
  }
  if (n == "tojson") return Value(tojson(r, v, a));
  if (n == "regex_replace") return Value(regex_replace(v.str(), a));
  if (n == "literal_eval") return v.is_list() || v.is_dict() ? v : literal_eval(v.str());
  if (n == "format") {
    const std::string f = v.str();
    std::string out;
    size_t k = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i] == '%' && i + 1 < f.size() && f[i + 1] == '%') {
        out += '%';
        ++i;
      } else if (f[i] == '%' && i + 1 < f.size() && (f[i + 1] == 's' || f[i + 1] == 'd')) {
        if (k >= a.positional.size()) fail("not enough arguments for format string");
        const Value& x = a.positional[k++];
        out += f[i + 1] == 'd' ? std::to_string(x.as_int()) : x.str();
        ++i;
      } else {
        out += f[i];
      }
    }
    return Value(out);
  }
  if (n == "wordcount") {
    int64_t words = 0;
    bool in = false;
    const std::string s = v.str();
    for (size_t i = 0; i < s.size();) {
      const uint32_t c = next_code_point(s, i);
      const bool w = is_letter(c) || (c >= '0' && c <= '9') || c == '_';
      words += w && !in;
      in = w;
    }
    return Value(words);
  }
  if (n == "center") {
    static const Value eighty(int64_t(80));
    return Value(center(v.str(), arg(a, 0, "width", eighty).as_int()));
  }
  if (n == "truncate") return Value(truncate(v.str(), a));
  if (n == "attr") return attr_path(v, arg(a, 0, "name", kEmpty).str());
  if (n == "items" || n == "dictsort") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) fail(cat(n, " needs a dict, not '", v.type_name(), "'"));
    List pairs;
    for (const auto& [k, x] : v.entries()) pairs.push_back(Value::tuple({Value(k), x}));
    if (n == "items") return Value::list(std::move(pairs));
    const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
    static const Value key("key");
    const size_t by = arg(a, 1, "by", key).str() == "value" ? 1 : 0;
    const bool reverse = arg(a, 2, "reverse", kFalse).truthy();
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      const Value kx = sort_key(x.items()[by], cs), ky = sort_key(y.items()[by], cs);
      return reverse ? less(ky, kx) : less(kx, ky);
    });
    return Value::list(std::move(pairs));
  }
  const List items = iterable_items(v);
  if (n == "list") return Value::list(items);
  if (n == "first" || n == "last") {
    if (items.empty()) return Value::undefined(cat("No ", n, " item, sequence was empty."));
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    List rev(items.rbegin(), items.rend());
    if (v.is_string()) {
      std::string s;
      for (const Value& c : rev) s += c.as_string();
      return Value(s);
    }
    return Value::list(std::move(rev));
  }
  if (n == "join") {
    const Value& sep = arg(a, 0, "d", kEmpty);
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      const Value x = attribute.is_none() ? items[i] : attr_path(items[i], attribute.str());
      out += (i ? sep.str() : "") + r.check_defined(x).str();
    }
    return Value(out);
  }
  if (n == "map") {
    List out;
    const Value& attribute = arg(a, 99, "attribute", kNone);
    if (!attribute.is_none()) {
      const Value& dflt = arg(a, 99, "default", Value());
      for (const Value& x : items) {
        Value y = attr_path(x, attribute.str());
        out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
      }
      return Value::list(std::move(out));
    }
    if (a.positional.empty()) fail("map needs a filter name or attribute=");
    const std::string f = a.positional[0].str();
    Args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.named = a.named;
    for (const Value& x : items) {
      Args copy = rest;
      out.push_back(apply_filter(r, f, x, copy));
    }
    return Value::list(std::move(out));
  }
  if (n == "select" || n == "reject") return select(r, items, a, false, n == "select");
  if (n == "selectattr" || n == "rejectattr") return select(r, items, a, true, n == "selectattr");
  if (n == "unique") {
    const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
    const Value& attribute = arg(a, 1, "attribute", kNone);
    List out, seen;
    for (const Value& x : items) {
      const Value key = sort_key(attribute.is_none() ? x : attr_path(x, attribute.str()), cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); }))
        continue;
      seen.push_back(key);
      out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (n == "sort") return sort(items, a);
  if (n == "sum") {
    const Value& attribute = arg(a, 0, "attribute", kNone);
    static const Value zero(int64_t(0));
    Value total = arg(a, 1, "start", zero);
    for (const Value& x : items) {
      const Value y = attribute.is_none() ? x : attr_path(x, attribute.str());
      if (!y.is_number() || !total.is_number()) fail("sum needs numbers");
      int64_t r = 0;
      if (total.kind() == Value::Kind::Float || y.kind() == Value::Kind::Float)
        total = Value(total.as_double() + y.as_double());
      else if (__builtin_add_overflow(total.as_int(), y.as_int(), &r))
        fail("sum: integer overflow (template integers are 64-bit)");
      else
        total = Value(r);
    }
    return total;
  }
  if (n == "min" || n == "max") return minmax(items, a, n == "max");
  if (n == "batch") {
    if (a.positional.empty()) fail("batch needs a size");
    const int64_t size = a.positional[0].as_int();
    if (size <= 0) fail("batch size must be positive");
    const Value& fill = arg(a, 1, "fill_with", kNone);
    List out, cur;
    for (const Value& x : items) {
      cur.push_back(x);
      if (int64_t(cur.size()) == size) out.push_back(Value::list(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
      if (!fill.is_none())
        while (int64_t(cur.size()) < size) cur.push_back(fill);
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
  }
  fail(cat("unknown filter '", n, "'"));
}

}  // namespace strata::jinja
