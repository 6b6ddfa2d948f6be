// Jinja lexer: template text into tokens (jinja_internal.h). Whitespace control follows Jinja 3:
// "{%-" strips every blank before the tag, "-%}" every blank after it; lstrip_blocks strips the
// blanks between a line's start and a block or comment tag; trim_blocks
// drops the newline after one; "+" turns either off for its tag.
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/jinja_internal.h"
#include "core/text.h"

namespace strata::jinja {

void fail_at(const std::string& tmpl, Pos pos, const std::string& message) {
  fail(cat(tmpl, ":", pos.line, ":", pos.col, ": ", message));
}

namespace {

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string rstrip_blanks(const std::string& s) {
  size_t e = s.size();
  while (e > 0 && blank(s[e - 1])) --e;
  return s.substr(0, e);
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name, const Options& o)
      : src_(src), name_(name), opt_(o) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string data = src_.substr(pos_, tag - pos_);
      const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
      if (tag < src_.size()) {
        const char kind = src_[tag + 1];
        const char control = tag + 2 < src_.size() ? src_[tag + 2] : 0;
        if (control == '-') {
          data = rstrip_blanks(data);
        } else if (control != '+' && opt_.lstrip_blocks && kind != '{') {
          const size_t nl = data.rfind('\n');
          const size_t l = nl == std::string::npos ? 0 : nl + 1;
          if ((l > 0 || line_starting) && l < data.size() &&
              data.find_first_not_of(" \t\r\f\v", l) == std::string::npos)
            data.resize(l);
        }
      }
      if (!data.empty()) push(Tok::Data, data, pos_);
      if (tag >= src_.size()) break;
      pos_ = tag;
      const char kind = src_[tag + 1];
      if (kind == '#')
        comment();
      else if (kind == '%' && raw_block()) {
      } else
        tag_tokens(kind == '{');
    }
    push(Tok::End, "", src_.size());
    return std::move(out_);
  }

 private:
  Pos pos_of(size_t off) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= off ? lo : hi) = mid;
    }
    return {int(lo) + 1, int(off - line_starts_[lo]) + 1};
  }
  [[noreturn]] void error(size_t off, const std::string& msg) const {
    fail_at(name_, pos_of(off), msg);
  }
  void push(Tok t, std::string text, size_t off) {
    Token k;
    k.type = t;
    k.text = std::move(text);
    k.pos = pos_of(off);
    out_.push_back(std::move(k));
  }
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }
  // After a tag's closing marker at `after`: "-" strips the blanks that
  // follow; trim_blocks (block and comment tags, unless "+") one newline.
  void close_tag(size_t after, char control, bool block) {
    pos_ = after;
    if (control == '-') {
      while (pos_ < src_.size() && blank(src_[pos_])) ++pos_;
    } else if (block && control != '+' && opt_.trim_blocks && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
    }
  }
  void comment() {
    const size_t end = src_.find("#}", pos_ + 2);
    if (end == std::string::npos) error(pos_, "unclosed comment: no '#}'");
    close_tag(end + 2, src_[end - 1], true);
  }
  // {% raw %}...{% endraw %}: the text between, verbatim.
  bool raw_block() {
    size_t i = pos_ + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && blank(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && blank(src_[i])) ++i;
    char control = 0;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) control = src_[i++];
    if (src_.compare(i, 2, "%}") != 0) return false;
    close_tag(i + 2, control, true);
    for (size_t at = find_tag(pos_); at < src_.size(); at = find_tag(at + 1)) {
      size_t j = at + 2;
      const char begin_control = src_[j] == '-' || src_[j] == '+' ? src_[j++] : 0;
      while (j < src_.size() && blank(src_[j])) ++j;
      if (src_[at + 1] != '%' || src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && blank(src_[j])) ++j;
      char end_control = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) end_control = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, at - pos_);
      if (begin_control == '-') text = rstrip_blanks(text);
      if (!text.empty()) push(Tok::Data, text, pos_);
      close_tag(j + 2, end_control, true);
      return true;
    }
    error(pos_, "unclosed {% raw %}: no {% endraw %}");
  }
  void tag_tokens(bool variable) {
    const size_t begin = pos_;
    push(variable ? Tok::VarBegin : Tok::BlockBegin, "", begin);
    pos_ += 2;
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) ++pos_;
    int depth = 0;
    const char* close = variable ? "}}" : "%}";
    for (;;) {
      while (pos_ < src_.size() && blank(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        error(begin, variable ? "unclosed '{{': no '}}'" : "unclosed '{%': no '%}'");
      if (depth == 0) {
        char control = 0;
        size_t at = pos_;
        if ((src_[at] == '-' || src_[at] == '+') && src_.compare(at + 1, 2, close) == 0)
          control = src_[at++];
        if (src_.compare(at, 2, close) == 0 && (control != '+' || !variable)) {
          push(variable ? Tok::VarEnd : Tok::BlockEnd, "", pos_);
          close_tag(at + 2, control, !variable);
          return;
        }
      }
      expression_token(depth);
    }
  }
  void expression_token(int& depth) {
    const size_t at = pos_;
    const char c = src_[at];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = at;
      while (e < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      push(Tok::Name, src_.substr(at, e - at), at);
      pos_ = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      number();
    } else if (c == '\'' || c == '"') {
      string_literal();
    } else {
      static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|"};
      for (const char* op : ops) {
        const size_t n = std::strlen(op);
        if (src_.compare(at, n, op) != 0) continue;
        if (n == 1 && std::strchr("([{", op[0])) ++depth;
        if (n == 1 && std::strchr(")]}", op[0])) --depth;
        push(Tok::Op, op, at);
        pos_ = at + n;
        return;
      }
      error(at, cat("unexpected character '", std::string(1, c), "'"));
    }
  }
  void number() {
    const size_t at = pos_;
    auto digits = [&](size_t i) {
      while (i < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[i])) || src_[i] == '_'))
        ++i;
      return i;
    };
    size_t e = digits(at);
    bool is_float = false;
    const bool after_dot = !out_.empty() && out_.back().type == Tok::Op && out_.back().text == ".";
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        e = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = at; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    push(is_float ? Tok::Float : Tok::Int, text, at);
    if (is_float)
      out_.back().d = std::strtod(text.c_str(), nullptr);
    else
      out_.back().i = std::strtoll(text.c_str(), nullptr, 10);
    pos_ = e;
  }
  // Python's string escapes (\n \t \\ \' \" \xNN \uNNNN \UNNNNNNNN, octal);
  // an unknown escape keeps its backslash, as Python does.
  void string_literal() {
    const size_t at = pos_;
    const char q = src_[at];
    std::string out;
    size_t i = at + 1;
    for (;;) {
      if (i >= src_.size()) error(at, "unterminated string literal");
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out += c;
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      static const char plain_from[] = "ntr\\'\"abfv\n", plain_to[] = "\n\t\r\\'\"\a\b\f\v";
      if (const char* p = std::strchr(plain_from, e); p && e) {
        if (e != '\n') out += plain_to[p - plain_from];
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const std::string hex = src_.substr(i, n);
        if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          error(i - 2, cat("bad \\", std::string(1, e), " escape in a string literal"));
        append_utf8(out, uint32_t(std::strtoul(hex.c_str(), nullptr, 16)));
        i += n;
      } else if (e >= '0' && e <= '7') {
        uint32_t v = uint32_t(e - '0');
        for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
          v = v * 8 + uint32_t(src_[i] - '0');
        append_utf8(out, v);
      } else {
        out += '\\';
        out += e;
      }
    }
    push(Tok::String, out, at);
    pos_ = i + 1;
  }

  const std::string& src_;
  const std::string& name_;
  const Options& opt_;
  std::vector<size_t> line_starts_{0};
  std::vector<Token> out_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& name, const Options& o) {
  return Lexer(source, name, o).run();
}

}  // namespace strata::jinja
