// Python literals read as ast.literal_eval reads them (core/jinja.h's
// literal_eval): strings (single, double or triple quotes, r prefix, the
// escapes \n \t \r \0 \xhh \uhhhh \Uhhhhhhhh \\ \' \" and line
// continuation; adjacent strings joined), integers, floats, True, False,
// None, lists, tuples and dicts, nested. Harness datasets store structured
// fields this way (RACE's `problems`).
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "core/jinja.h"
#include "core/jinja_internal.h"
#include "core/text.h"

namespace strata::jinja {

namespace {

constexpr int kMaxDepth = 200;

class LiteralReader {
 public:
  explicit LiteralReader(const std::string& s) : s_(s) {}

  Value read() {
    Value v = value(0);
    skip();
    if (i_ != s_.size()) bad("text after the literal");
    return v;
  }

 private:
  [[noreturn]] void bad(const char* what) const {
    fail(cat("literal_eval: ", what, " at offset ", i_, " of '", one_line(s_.substr(0, 60)),
             s_.size() > 60 ? "...'" : "'"));
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool word(const char* w) {
    const std::string_view v(w);
    if (s_.compare(i_, v.size(), v) != 0) return false;
    const size_t end = i_ + v.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
      return false;
    i_ = end;
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) bad("nesting deeper than 200");
    skip();
    if (i_ >= s_.size()) bad("unexpected end");
    const char c = s_[i_];
    if (c == '[' || c == '(') return sequence(depth, c == '[' ? ']' : ')');
    if (c == '{') return mapping(depth);
    if (c == '\'' || c == '"' ||
        ((c == 'r' || c == 'R' || c == 'u' || c == 'U') && i_ + 1 < s_.size() &&
         (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"')))
      return strings();
    if (word("True")) return Value(true);
    if (word("False")) return Value(false);
    if (word("None")) return Value(nullptr);
    return number();
  }

  Value sequence(int depth, char close) {
    ++i_;
    List items;
    bool comma = false;
    while (!eat(close)) {
      if (!items.empty() && !comma) bad("expected ',' between items");
      items.push_back(value(depth + 1));
      comma = eat(',');
    }
    if (close == ')' && items.size() == 1 && !comma) return items[0];  // (x) is x
    return close == ']' ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }

  Value mapping(int depth) {
    ++i_;
    Dict entries;
    bool comma = false;
    while (!eat('}')) {
      if (!entries.empty() && !comma) bad("expected ',' between entries");
      const Value k = value(depth + 1);
      if (!k.is_string()) bad("a dict key that is not a string");
      if (!eat(':')) bad("expected ':'");
      Value v = value(depth + 1);
      bool replaced = false;
      for (auto& [key, old] : entries)
        if (key == k.as_string()) old = v, replaced = true;
      if (!replaced) entries.emplace_back(k.as_string(), std::move(v));
      comma = eat(',');
    }
    return Value::dict(std::move(entries));
  }

  // One or more adjacent string literals, joined.
  Value strings() {
    std::string out;
    do {
      bool raw = false;
      if (s_[i_] == 'r' || s_[i_] == 'R') raw = true, ++i_;
      if (s_[i_] == 'u' || s_[i_] == 'U') ++i_;
      out += one_string(raw);
      skip();
    } while (i_ < s_.size() && (s_[i_] == '\'' || s_[i_] == '"'));
    return Value(out);
  }

  uint32_t hex(size_t digits) {
    if (i_ + digits > s_.size()) bad("truncated escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char h = s_[i_++];
      if (!std::isxdigit(static_cast<unsigned char>(h))) bad("bad hex digit in an escape");
      v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : std::tolower(h) - 'a' + 10);
    }
    return v;
  }

  std::string one_string(bool raw) {
    const char q = s_[i_];
    const bool triple = s_.compare(i_, 3, std::string(3, q)) == 0;
    i_ += triple ? 3 : 1;
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) bad("unterminated string");
      const char c = s_[i_];
      if (c == q && (!triple || s_.compare(i_, 3, std::string(3, q)) == 0)) {
        i_ += triple ? 3 : 1;
        return out;
      }
      if (c == '\n' && !triple) bad("newline in a string");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      if (i_ + 1 >= s_.size()) bad("unterminated string");
      const char e = s_[i_ + 1];
      if (raw) {
        out += c;
        out += e;
        i_ += 2;
        continue;
      }
      i_ += 2;
      switch (e) {
        case '\n':
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          append_utf8(out, hex(2));
          break;
        case 'u':
          append_utf8(out, hex(4));
          break;
        case 'U': {
          const uint32_t cp = hex(8);
          if (cp > 0x10FFFF) bad("a code point past U+10FFFF");
          append_utf8(out, cp);
          break;
        }
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
  }

  Value number() {
    const size_t start = i_;
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
    bool is_float = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (std::isdigit(static_cast<unsigned char>(c)) || c == '_') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++i_;
        if ((c == 'e' || c == 'E') && i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
      } else {
        break;
      }
    }
    std::string text = s_.substr(start, i_ - start);
    std::erase(text, '_');
    if (text.empty() || text == "-" || text == "+") bad("not a Python literal");
    char* end = nullptr;
    if (is_float) {
      const double d = std::strtod(text.c_str(), &end);
      if (*end) bad("a malformed number");
      return Value(d);
    }
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (*end) bad("a malformed number");
    if (errno == ERANGE) bad("an integer beyond 64 bits");
    return Value(int64_t(v));
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

Value literal_eval(const std::string& text) { return LiteralReader(text).read(); }

}  // namespace strata::jinja
