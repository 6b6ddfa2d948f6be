// Jinja parser: tokens (jinja_lex.cpp) into the syntax tree of
// jinja_internal.h, with Jinja's operator precedence (lowest first):
// x if c else y; or; and; not; comparisons (== != < <= > >= in, not in;
// chained); + -; ~; * / // %; **; unary - +; then postfix . [] () and the
// filter and test suffixes | and is.
#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "core/jinja_internal.h"

namespace strata::jinja {

namespace {

ExprPtr make(ExprKind kind, Pos pos, std::vector<ExprPtr> args = {}, std::string name = {}) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->pos = pos;
  e->args = std::move(args);
  e->name = std::move(name);
  return e;
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& name) : t_(std::move(toks)), name_(name) {}

  Body parse() {
    Body body = parse_body({}, nullptr);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void error(const Token& at, const std::string& msg) const {
    fail_at(name_, at.pos, msg);
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  std::string describe(const Token& k) const {
    switch (k.type) {
      case Tok::End:
        return "end of template";
      case Tok::VarEnd:
        return "'}}'";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::Data:
        return "text";
      case Tok::String:
        return "a string";
      case Tok::Int:
      case Tok::Float:
        return "a number";
      default:
        return "'" + k.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur(), cat("expected '", op, "', found ", describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error(cur(), cat("expected a name, found ", describe(cur())));
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error(cur(), cat("expected '%}', found ", describe(cur())));
    ++i_;
  }

  // Nodes until a block tag named in `ends` (left at that name: *which is
  // set to it) or, with no ends, the end of the template.
  Body parse_body(std::initializer_list<const char*> ends, std::string* which,
                  const Token* opener = nullptr) {
    Body body;
    for (;;) {
      const Token& k = cur();
      if (k.type == Tok::End) {
        if (ends.size() == 0) return body;
        error(opener ? *opener : k, cat("unclosed '", opener ? opener->text : "", "': expected '",
                                        *ends.begin(), "' before the end of the template"));
      }
      if (k.type == Tok::Data) {
        Node n;
        n.kind = NodeKind::Text;
        n.pos = k.pos;
        n.text = k.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (k.type == Tok::VarBegin) {
        ++i_;
        Node n;
        n.kind = NodeKind::Output;
        n.pos = cur().pos;
        n.expr = parse_tuple(true);
        if (cur().type != Tok::VarEnd) error(cur(), cat("expected '}}', found ", describe(cur())));
        ++i_;
        body.push_back(std::move(n));
      } else if (k.type == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.type != Tok::Name) error(name, "expected a tag name after '{%'");
        for (const char* e : ends)
          if (name.text == e) {
            i_ += 2;
            *which = e;
            return body;
          }
        ++i_;
        statement(body);
      } else {
        error(k, cat("unexpected ", describe(k)));
      }
    }
  }

  void statement(Body& body) {
    const Depth guard(*this);
    const Token& tag = cur();
    const std::string& n = tag.text;
    Node node;
    node.pos = tag.pos;
    ++i_;
    std::string which;
    if (n == "if") {
      node.kind = NodeKind::If;
      ExprPtr c = parse_tuple(false);
      for (;;) {
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"}, &which, &tag);
        node.branches.emplace_back(c, std::move(b));
        if (which != "elif") break;
        c = parse_tuple(false);
      }
      if (which == "else") {
        expect_block_end();
        node.else_body = parse_body({"endif"}, &which, &tag);
      }
      expect_block_end();
    } else if (n == "for") {
      node.kind = NodeKind::For;
      do node.targets.push_back(expect_name());
      while (skip_op(","));
      if (!skip_name("in")) error(cur(), cat("expected 'in', found ", describe(cur())));
      node.expr = parse_tuple(false);
      if (skip_name("if")) node.cond = parse_expression(true);
      node.recursive = skip_name("recursive");
      expect_block_end();
      node.body = parse_body({"else", "endfor"}, &which, &tag);
      if (which == "else") {
        expect_block_end();
        node.else_body = parse_body({"endfor"}, &which, &tag);
      }
      expect_block_end();
    } else if (n == "set") {
      node.targets.push_back(expect_name());
      if (skip_op(".")) {
        node.attr = expect_name();
      } else {
        while (skip_op(",")) node.targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        node.kind = NodeKind::Set;
        node.expr = parse_tuple(true);
        expect_block_end();
      } else {
        node.kind = NodeKind::SetBlock;
        if (node.targets.size() != 1 || !node.attr.empty())
          error(cur(), "a {% set %} block assigns one name");
        if (skip_op("|")) node.expr = filter_chain(nullptr, tag.pos);
        expect_block_end();
        node.body = parse_body({"endset"}, &which, &tag);
        expect_block_end();
      }
    } else if (n == "macro") {
      node.kind = NodeKind::Macro;
      node.targets.push_back(expect_name());
      expect_op("(");
      while (!skip_op(")")) {
        if (node.targets.size() > 1) expect_op(",");
        if (skip_op(")")) break;
        node.targets.push_back(expect_name());
        node.defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
      }
      expect_block_end();
      node.body = parse_body({"endmacro"}, &which, &tag);
      if (cur().type == Tok::Name) ++i_;  // {% endmacro name %}
      expect_block_end();
    } else if (n == "filter") {
      node.kind = NodeKind::FilterBlock;
      node.expr = filter_chain(nullptr, tag.pos);
      expect_block_end();
      node.body = parse_body({"endfilter"}, &which, &tag);
      expect_block_end();
    } else if (n == "call") {
      node.kind = NodeKind::CallBlock;
      node.expr = parse_expression(true);
      if (node.expr->kind != ExprKind::Call) error(tag, "{% call %} needs a macro call");
      expect_block_end();
      node.body = parse_body({"endcall"}, &which, &tag);
      expect_block_end();
    } else if (n == "break" || n == "continue") {
      node.kind = n == "break" ? NodeKind::Break : NodeKind::Continue;
      expect_block_end();
    } else if (n == "generation") {  // transformers' marker of assistant text: no effect here
      expect_block_end();
      Body inner = parse_body({"endgeneration"}, &which, &tag);
      expect_block_end();
      for (auto& x : inner) body.push_back(std::move(x));
      return;
    } else if (n == "include" || n == "import" || n == "from" || n == "extends" || n == "block" ||
               n == "with" || n == "autoescape") {
      error(tag, cat("{% ", n, " %} is not supported (strata's Jinja has no template loader)"));
    } else {
      error(tag, cat("unknown tag '", n, "'"));
    }
    body.push_back(std::move(node));
  }

  // A comma-separated tuple (a list) or a single expression.
  ExprPtr parse_tuple(bool with_cond) {
    const Pos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty() && !skip_op(",")) break;
      if (!items.empty()) comma = true;
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) break;
      items.push_back(parse_expression(with_cond));
    }
    if (items.empty()) error(cur(), cat("expected an expression, found ", describe(cur())));
    if (items.size() == 1 && !comma) return items[0];
    return make(ExprKind::TupleLit, pos, std::move(items));
  }

  // Nesting of expressions and blocks, bounded so that a hostile template
  // cannot exhaust the stack.
  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth)
        p.error(p.cur(), cat("nested more than ", kMaxDepth, " levels deep"));
    }
    ~Depth() { --p.depth_; }
  };
  static constexpr int kMaxDepth = 200;

  ExprPtr parse_expression(bool with_cond) {
    const Depth guard(*this);
    ExprPtr e = parse_or();
    if (!with_cond) return e;
    while (is_name("if")) {
      const Pos pos = cur().pos;
      ++i_;
      ExprPtr c = parse_or();
      ExprPtr other = skip_name("else") ? parse_expression(true) : nullptr;
      e = make(ExprKind::Cond, pos, {e, c, other});
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Pos pos = t_[i_++].pos;
      e = make(ExprKind::Or, pos, {e, parse_and()});
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Pos pos = t_[i_++].pos;
      e = make(ExprKind::And, pos, {e, parse_not()});
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Pos pos = t_[i_++].pos;
      return make(ExprKind::Not, pos, {parse_not()});
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Pos pos = cur().pos;
    ExprPtr first = parse_math1();
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Compare;
    e->pos = pos;
    e->args.push_back(first);
    for (;;) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = t_[i_++].text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      e->ops.push_back(op);
      e->args.push_back(parse_math1());
    }
    if (e->ops.empty()) return first;
    return e;
  }
  ExprPtr binary_loop(ExprPtr (Parser::*next)(), std::initializer_list<const char*> ops) {
    ExprPtr e = (this->*next)();
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (!hit) return e;
      const Pos pos = t_[i_++].pos;
      e = make(ExprKind::Binary, pos, {e, (this->*next)()}, hit);
    }
  }
  ExprPtr parse_math1() { return binary_loop(&Parser::parse_concat, {"+", "-"}); }
  ExprPtr parse_concat() { return binary_loop(&Parser::parse_math2, {"~"}); }
  ExprPtr parse_math2() { return binary_loop(&Parser::parse_pow, {"*", "/", "//", "%"}); }
  ExprPtr parse_pow() { return binary_loop(&Parser::parse_unary_filtered, {"**"}); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const Depth guard(*this);
    const Pos pos = cur().pos;
    ExprPtr e;
    if (skip_op("-"))
      e = make(ExprKind::Negate, pos, {parse_unary(false)});
    else if (skip_op("+"))
      e = make(ExprKind::Plus, pos, {parse_unary(false)});
    else
      e = parse_primary();
    e = postfix(e);
    if (with_filter) e = filter_suffixes(e);
    return e;
  }

  ExprPtr literal(Pos pos, Value v) {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Literal;
    e->pos = pos;
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& k = cur();
    switch (k.type) {
      case Tok::Name: {
        ++i_;
        if (k.text == "true" || k.text == "True") return literal(k.pos, Value(true));
        if (k.text == "false" || k.text == "False") return literal(k.pos, Value(false));
        if (k.text == "none" || k.text == "None") return literal(k.pos, Value(nullptr));
        return make(ExprKind::Name, k.pos, {}, k.text);
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += t_[i_++].text;
        return literal(k.pos, Value(s));
      }
      case Tok::Int:
        ++i_;
        return literal(k.pos, Value(k.i));
      case Tok::Float:
        ++i_;
        return literal(k.pos, Value(k.d));
      case Tok::Op:
        if (k.text == "(") {
          ++i_;
          if (skip_op(")")) return make(ExprKind::TupleLit, k.pos);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (k.text == "[") {
          ++i_;
          std::vector<ExprPtr> items;
          while (!skip_op("]")) {
            if (!items.empty()) expect_op(",");
            if (skip_op("]")) break;
            items.push_back(parse_expression(true));
          }
          return make(ExprKind::ListLit, k.pos, std::move(items));
        }
        if (k.text == "{") {
          ++i_;
          std::vector<ExprPtr> items;
          while (!skip_op("}")) {
            if (!items.empty()) expect_op(",");
            if (skip_op("}")) break;
            items.push_back(parse_expression(true));
            expect_op(":");
            items.push_back(parse_expression(true));
          }
          return make(ExprKind::DictLit, k.pos, std::move(items));
        }
        break;
      default:
        break;
    }
    error(k, cat("unexpected ", describe(k)));
  }

  void call_args(Expr& e) {
    while (!skip_op(")")) {
      if (!e.args.empty() && (e.args.size() > 1 || !e.kwargs.empty())) expect_op(",");
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) error(cur(), "*args and **kwargs are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error(cur(), "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const Pos pos = cur().pos;
      if (skip_op(".")) {
        if (cur().type == Tok::Int) {
          e = make(ExprKind::Index, pos, {e, literal(pos, Value(t_[i_++].i))});
        } else {
          e = make(ExprKind::Attr, pos, {e}, expect_name());
        }
      } else if (skip_op("[")) {
        std::vector<ExprPtr> parts;
        bool slice = false;
        ExprPtr part;
        for (;;) {
          if (is_op(":")) {
            ++i_;
            slice = true;
            parts.push_back(part);
            part = nullptr;
          } else if (skip_op("]")) {
            parts.push_back(part);
            break;
          } else {
            if (part) error(cur(), cat("expected ']', found ", describe(cur())));
            part = parse_expression(true);
          }
        }
        if (slice) {
          parts.resize(3);
          e = make(ExprKind::Slice, pos, {e, parts[0], parts[1], parts[2]});
        } else {
          if (!parts[0]) error(cur(), "an empty subscript []");
          e = make(ExprKind::Index, pos, {e, parts[0]});
        }
      } else if (skip_op("(")) {
        auto c = std::make_shared<Expr>();
        c->kind = ExprKind::Call;
        c->pos = e->pos;
        c->args.push_back(e);
        call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }

  // name[(args)] [| name[(args)]]...: the filters of {% filter %} and
  // {% set x | f %}, applied to `subject` (null: the block's text).
  ExprPtr filter_chain(ExprPtr subject, Pos pos) {
    do {
      auto f = std::make_shared<Expr>();
      f->kind = ExprKind::Filter;
      f->pos = cur().pos;
      f->name = expect_name();
      while (is_op(".") && peek().type == Tok::Name) {
        f->name += "." + peek().text;
        i_ += 2;
      }
      f->args.push_back(subject);
      if (skip_op("(")) call_args(*f);
      subject = f;
    } while (skip_op("|"));
    (void)pos;
    return subject;
  }

  ExprPtr filter_suffixes(ExprPtr e) {
    for (;;) {
      if (skip_op("|")) {
        auto f = std::make_shared<Expr>();
        f->kind = ExprKind::Filter;
        f->pos = cur().pos;
        f->name = expect_name();
        f->args.push_back(e);
        if (skip_op("(")) call_args(*f);
        e = f;
      } else if (is_name("is")) {
        ++i_;
        auto t = std::make_shared<Expr>();
        t->kind = ExprKind::Test;
        t->negated = skip_name("not");
        t->pos = cur().pos;
        t->name = expect_name();
        t->args.push_back(e);
        if (skip_op("(")) {
          call_args(*t);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String ||
                    cur().type == Tok::Int || cur().type == Tok::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                   !is_name("is")) {
          t->args.push_back(postfix(parse_primary()));
        }
        e = t;
      } else if (skip_op("(")) {
        auto c = std::make_shared<Expr>();
        c->kind = ExprKind::Call;
        c->pos = e->pos;
        c->args.push_back(e);
        call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name,
                                        const Options& options) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      src += source[i];
    } else {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  auto p = std::make_shared<Program>();
  p->name = name;
  p->options = options;
  p->body = Parser(lex(src, name, options), name).parse();
  return p;
}

}  // namespace strata::jinja
