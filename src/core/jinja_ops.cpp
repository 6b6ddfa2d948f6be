// Python's operators on template values (jinja_internal.h): arithmetic with
// Python's int/float rules (floor division and modulo toward minus
// infinity, / always a float), string and list concatenation and
// repetition, "%" formatting, comparisons and `in`.
#include <cmath>

#include "core/error.h"
#include "core/jinja_internal.h"

namespace strata::jinja {

namespace {

// Python's integers have no bounds; these are 64-bit, and an overflow is an
// error rather than a wrong number.
[[noreturn]] void overflow() { fail("integer overflow (template integers are 64-bit)"); }
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& v, int64_t n) {
  const size_t unit = v.is_string() ? v.as_string().size() : v.items().size();
  if (n > 0 && unit > 0 && size_t(n) > kMaxText / unit)
    fail(cat("repetition makes more than ", kMaxText >> 20, " MiB"));
  if (v.is_string()) {
    std::string s;
    for (int64_t k = 0; k < n; ++k) s += v.as_string();
    return Value(s);
  }
  List l;
  for (int64_t k = 0; k < n; ++k) l.insert(l.end(), v.items().begin(), v.items().end());
  return Value::list(std::move(l));
}

// Python's "%s %d" % args, for %s, %d, %i, %r and %%.
Value percent_format(const std::string& f, const Value& args) {
  const List list = args.is_list() ? args.items() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      out += f[i];
      continue;
    }
    const char c = f[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) fail("not enough arguments for format string");
    const Value& v = list[next++];
    if (c == 's')
      out += v.str();
    else if (c == 'r')
      out += v.repr();
    else if ((c == 'd' || c == 'i') && v.is_number())
      out += std::to_string(v.as_int());
    else
      fail(cat("unsupported format character '", std::string(1, c), "'"));
  }
  if (next < list.size()) fail("not all arguments converted during string formatting");
  return Value(out);
}

}  // namespace

bool compare_op(const Renderer& r, const std::string& op, const Value& a, const Value& b) {
  if (op == "in" || op == "not in") return contains(r, b, a) == (op == "in");
  if (op == "==" || op == "!=") {
    if (a.is_undefined() || b.is_undefined()) {
      r.check_defined(a);
      r.check_defined(b);
    }
    return equal(a, b) == (op == "==");
  }
  r.check_defined(a);
  r.check_defined(b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  return !less(a, b);  // >=
}

bool contains(const Renderer& r, const Value& hay, const Value& needle) {
  switch (r.check_defined(hay).kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!r.check_defined(needle).is_string())
        fail(cat("'in <string>' requires string as left operand, not ", needle.type_name()));
      return hay.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& x : hay.items())
        if (equal(x, needle)) return true;
      return false;
    case Value::Kind::Dict:
      return needle.is_string() && hay.find(needle.as_string()) != nullptr;
    default:
      fail(cat("argument of type '", hay.type_name(), "' is not iterable"));
  }
}

Value binary_op(const Renderer& r, const std::string& op, const Value& a0, const Value& b0) {
  const Value& a = op == "~" ? r.check_defined(a0) : a0;
  const Value& b = op == "~" ? r.check_defined(b0) : b0;
  if (op == "~") return Value(a.str() + b.str());
  if (op == "in" || op == "not in") return Value(contains(r, b, a) == (op == "in"));
  if (a.is_undefined()) fail(a.undefined_message());
  if (b.is_undefined()) fail(b.undefined_message());
  const bool floats = a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float;
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    const int64_t i = a.as_int(), j = b.as_int();
    if (op == "+") return floats ? Value(x + y) : Value(add(i, j));
    if (op == "-") return floats ? Value(x - y) : Value(sub(i, j));
    if (op == "*") return floats ? Value(x * y) : Value(mul(i, j));
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero");
    if (op == "/") return Value(x / y);
    if (!floats && j == -1 && (op == "//" || op == "%"))  // INT64_MIN // -1 overflows
      return op == "%" ? Value(int64_t(0)) : Value(sub(0, i));
    if (op == "//") return floats ? Value(std::floor(x / y)) : Value(floor_div(i, j));
    if (op == "%") {
      if (!floats) {  // the sign of the divisor, as Python's
        int64_t m = i % j;
        if (m != 0 && ((m < 0) != (j < 0))) m += j;
        return Value(m);
      }
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (op == "**") {
      if (!floats && j >= 0) {
        if (i == 0) return Value(int64_t(j == 0 ? 1 : 0));
        if (i == 1) return Value(int64_t(1));
        if (i == -1) return Value(int64_t(j % 2 ? -1 : 1));
        int64_t p = 1;  // |i| >= 2 overflows within 63 steps
        for (int64_t k = 0; k < j; ++k) p = mul(p, i);
        return Value(p);
      }
      return Value(std::pow(x, y));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (op == "+" && a.is_list() && b.is_list()) {
    List l = a.items();
    l.insert(l.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(l));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.kind() == Value::Kind::Int)
    return repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && a.kind() == Value::Kind::Int)
    return repeat(b, a.as_int());
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  fail(cat("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(),
           "'"));
}

}  // namespace strata::jinja
