// Jinja evaluator: renders the syntax tree (jinja_internal.h) with Python's
// operator semantics and Jinja's scoping (a {% for %} body and a macro have
// their own names; {% if %} does not; namespace() attributes cross scopes).
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/jinja_internal.h"

namespace strata::jinja {

Options harness_options() {
  Options o;
  o.strict_undefined = true;
  o.keep_trailing_newline = true;
  return o;
}

Options chat_options() {
  Options o;
  o.trim_blocks = true;
  o.lstrip_blocks = true;
  o.tojson_unsorted = true;
  return o;
}

const Value& Renderer::check_defined(const Value& v) const {
  // An undefined without a message is Jinja's plain Undefined (the value of
  // `a if c` when c is false), lenient even in strict mode.
  if (v.is_undefined() && program->options.strict_undefined && !v.undefined_message().empty())
    fail(v.undefined_message());
  return v;
}

namespace {

// An error that already names the template and position.
class PlacedError : public Error {
 public:
  explicit PlacedError(const std::string& m) : Error(m) {}
};

enum class Flow { Normal, Break, Continue };

// Bounds on what a template may make: macro calls and recursive loops nested
// deeper than this, and text or strings longer than this, are errors (not a
// crashed stack or an exhausted memory).
constexpr int kMaxCallDepth = 100;

// One more level of macro call or recursive loop, for its lifetime.
struct CallDepth {
  int& depth;
  explicit CallDepth(int& d) : depth(d) {
    if (++depth > kMaxCallDepth)
      fail(cat("macro calls or recursive loops nested more than ", kMaxCallDepth, " deep"));
  }
  ~CallDepth() { --depth; }
};

class Evaluator {
 public:
  explicit Evaluator(Renderer& r) : r_(r) {}

  Flow render(const Body& body, std::string& out) {
    for (const Node& n : body) {
      const Flow f = node(n, out);
      if (out.size() > kMaxText) fail(cat("the rendered text passes ", kMaxText >> 20, " MiB"));
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const PlacedError&) {
      throw;
    } catch (const Error& err) {
      throw PlacedError(cat(r_.program->name, ":", e.pos.line, ":", e.pos.col, ": ", err.what()));
    }
  }

 private:
  const Value& defined(const Value& v) const { return r_.check_defined(v); }
  bool truthy(const Value& v) const { return defined(v).truthy(); }

  Flow node(const Node& n, std::string& out) {
    try {
      return node_inner(n, out);
    } catch (const PlacedError&) {
      throw;
    } catch (const Error& err) {
      throw PlacedError(cat(r_.program->name, ":", n.pos.line, ":", n.pos.col, ": ", err.what()));
    }
  }

  Flow node_inner(const Node& n, std::string& out) {
    switch (n.kind) {
      case NodeKind::Text:
        out += n.text;
        return Flow::Normal;
      case NodeKind::Output:
        out += defined(eval(*n.expr)).str();
        return Flow::Normal;
      case NodeKind::If:
        for (const auto& [c, b] : n.branches)
          if (truthy(eval(*c))) return render(b, out);
        return render(n.else_body, out);
      case NodeKind::For:
        return for_loop(n, out);
      case NodeKind::Set: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value ns = lookup(n.targets[0]);
          if (!ns.is_namespace())
            fail(cat("cannot assign attribute '", n.attr, "' on '", n.targets[0],
                     "': it is not a namespace()"));
          ns.set(n.attr, std::move(v));
        } else {
          assign(n.targets, std::move(v));
        }
        return Flow::Normal;
      }
      case NodeKind::SetBlock: {
        std::string text;
        render(n.body, text);
        assign(n.targets, n.expr ? apply_block_filters(*n.expr, text) : Value(text));
        return Flow::Normal;
      }
      case NodeKind::FilterBlock: {
        std::string text;
        render(n.body, text);
        out += defined(apply_block_filters(*n.expr, text)).str();
        return Flow::Normal;
      }
      case NodeKind::Macro:
        define_macro(n);
        return Flow::Normal;
      case NodeKind::CallBlock: {
        const Node* block = &n;
        std::map<std::string, Value> frame;
        frame["caller"] = Value::function([this, block](Args&) {
          std::string text;
          render(block->body, text);
          return Value(text);
        });
        r_.scopes.push_back(std::move(frame));
        out += defined(eval(*n.expr)).str();
        r_.scopes.pop_back();
        return Flow::Normal;
      }
      case NodeKind::Break:
        return Flow::Break;
      case NodeKind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  Value apply_block_filters(const Expr& chain, const std::string& text) {
    block_text_ = Value(text);
    return eval(chain);
  }

  void assign(const std::vector<std::string>& targets, Value v) {
    auto& scope = r_.scopes.back();
    if (targets.size() == 1) {
      scope[targets[0]] = std::move(v);
      return;
    }
    if (!v.is_list() || v.items().size() != targets.size())
      fail(cat("cannot unpack ", v.type_name(), " into ", targets.size(), " names"));
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = v.items()[i];
  }

  Value lookup(const std::string& name) const {
    for (auto s = r_.scopes.rbegin(); s != r_.scopes.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return it->second;
    if (const Value* v = r_.variables.find(name)) return *v;
    Value g = global_function(name);
    if (!g.is_undefined()) return g;
    return Value::undefined(cat("'", name, "' is undefined"));
  }

  List iterate(const Value& v) const { return iterable_items(defined(v)); }

  Flow for_loop(const Node& n, std::string& out) {
    run_loop(n, iterate(eval(*n.expr)), 0, out);
    return Flow::Normal;
  }

  // One level of a loop (depth > 0: called as loop(items) in a recursive
  // loop). Each iteration has its own scope: a name set in the body does not
  // carry over to the next iteration or out of the loop.
  void run_loop(const Node& n, const List& all, int depth, std::string& out) {
    const CallDepth guard(r_.call_depth);
    List items;
    r_.scopes.emplace_back();
    for (const Value& item : all) {
      if (n.cond) {
        assign(n.targets, item);
        if (!truthy(eval(*n.cond))) continue;
      }
      items.push_back(item);
    }
    r_.scopes.pop_back();
    const auto len = int64_t(items.size());
    bool iterated = false;  // as Jinja: set when a body runs to its end
    for (int64_t i = 0; i < len; ++i) {
      r_.scopes.emplace_back();
      assign(n.targets, items[size_t(i)]);
      Dict loop = {{"index", Value(i + 1)},      {"index0", Value(i)},
                   {"revindex", Value(len - i)}, {"revindex0", Value(len - i - 1)},
                   {"first", Value(i == 0)},     {"last", Value(i == len - 1)},
                   {"length", Value(len)},       {"depth", Value(depth + 1)},
                   {"depth0", Value(depth)}};
      loop.emplace_back(
          "previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
      loop.emplace_back("nextitem", i + 1 < len ? items[size_t(i + 1)]
                                                : Value::undefined("there is no next item"));
      loop.emplace_back("cycle", Value::function([i](Args& a) {
                          if (a.positional.empty()) fail("loop.cycle() needs arguments");
                          return a.positional[size_t(i) % a.positional.size()];
                        }));
      Value loop_value = Value::dict(std::move(loop));
      if (n.recursive)
        loop_value.set_call([this, &n, depth](Args& a) {
          if (a.positional.size() != 1) fail("loop() takes one iterable");
          std::string text;
          run_loop(n, iterate(a.positional[0]), depth + 1, text);
          return Value(text);
        });
      r_.scopes.back()["loop"] = loop_value;
      const Flow f = render(n.body, out);
      r_.scopes.pop_back();
      if (f == Flow::Break) break;
      iterated |= f == Flow::Normal;
    }
    if (!iterated) render(n.else_body, out);
  }

  void define_macro(const Node& n) {
    const Node* def = &n;
    Renderer* r = &r_;
    r_.scopes.back()[n.targets[0]] = Value::function([def, r](Args& a) {
      std::map<std::string, Value> frame;
      const size_t nparams = def->targets.size() - 1;
      if (a.positional.size() > nparams)
        fail(cat("macro '", def->targets[0], "' takes ", nparams, " arguments, ",
                 a.positional.size(), " given"));
      Evaluator ev(*r);
      for (size_t p = 0; p < nparams; ++p) {
        const std::string& name = def->targets[p + 1];
        if (p < a.positional.size())
          frame[name] = a.positional[p];
        else if (def->defaults[p])
          frame[name] = ev.eval(*def->defaults[p]);
        else
          frame[name] = Value::undefined(cat("'", name, "' is undefined"));
      }
      for (auto& [k, v] : a.named) {
        bool known = false;
        for (size_t p = 0; p < nparams; ++p) known |= def->targets[p + 1] == k;
        if (!known) fail(cat("macro '", def->targets[0], "' has no parameter '", k, "'"));
        frame[k] = v;
      }
      const CallDepth guard(r->call_depth);
      r->scopes.push_back(std::move(frame));
      std::string text;
      ev.render(def->body, text);
      r->scopes.pop_back();
      return Value(text);
    });
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Literal:
        return e.literal;
      case ExprKind::Name:
        return lookup(e.name);
      case ExprKind::Attr:
        return attribute(eval(*e.args[0]), e.name);
      case ExprKind::Index:
        return index(eval(*e.args[0]), eval(*e.args[1]));
      case ExprKind::Slice:
        return slice(e);
      case ExprKind::Call:
        return call(e);
      case ExprKind::Filter: {
        Value subject = e.args[0] ? eval(*e.args[0]) : block_text_;
        if (e.name != "default" && e.name != "d") defined(subject);
        Args a = arguments(e);
        return apply_filter(r_, e.name, std::move(subject), a);
      }
      case ExprKind::Test: {
        const Value subject = eval(*e.args[0]);
        Args a = arguments(e);
        return Value(apply_test(r_, e.name, subject, a) != e.negated);
      }
      case ExprKind::Not:
        return Value(!truthy(eval(*e.args[0])));
      case ExprKind::Negate:
      case ExprKind::Plus: {
        const Value v = defined(eval(*e.args[0]));
        if (!v.is_number()) fail(cat("bad operand type for unary -: '", v.type_name(), "'"));
        if (e.kind == ExprKind::Plus) return v.kind() == Value::Kind::Bool ? Value(v.as_int()) : v;
        if (v.kind() == Value::Kind::Float) return Value(-v.as_double());
        if (v.as_int() == INT64_MIN) fail("integer overflow (template integers are 64-bit)");
        return Value(-v.as_int());
      }
      case ExprKind::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case ExprKind::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case ExprKind::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("");
      case ExprKind::ListLit:
      case ExprKind::TupleLit: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return e.kind == ExprKind::TupleLit ? Value::tuple(std::move(l))
                                            : Value::list(std::move(l));
      }
      case ExprKind::DictLit: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = defined(eval(*e.args[i]));
          d.set(k.is_string() ? k.as_string() : k.repr(), eval(*e.args[i + 1]));
        }
        return d;
      }
      case ExprKind::Binary:
        return binary_op(r_, e.name, eval(*e.args[0]), eval(*e.args[1]));
      case ExprKind::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare_op(r_, e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
    }
    return {};
  }

  Args arguments(const Expr& e) {
    Args a;
    for (size_t i = 1; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.named.emplace_back(k, eval(*v));
    return a;
  }

  Value call(const Expr& e) {
    const Value f = eval(*e.args[0]);
    if (f.is_undefined()) fail(f.undefined_message());
    if (!f.callable()) fail(cat("'", f.type_name(), "' object is not callable"));
    Args a = arguments(e);
    return f.fn()(a);
  }

  static Value attribute(const Value& v, const std::string& name) {
    if (v.is_undefined()) fail(v.undefined_message());
    if (v.is_dict() && !v.is_namespace()) {
      Value m = bound_method(v, name);
      if (!m.is_undefined()) return m;
    }
    if (v.is_dict()) {
      if (const Value* f = v.find(name)) return *f;
      return Value::undefined(cat("'", v.type_name(), " object' has no attribute '", name, "'"));
    }
    Value m = bound_method(v, name);
    if (m.is_undefined())
      return Value::undefined(cat("'", v.type_name(), " object' has no attribute '", name, "'"));
    return m;
  }

  static Value index(const Value& v, const Value& key) {
    if (v.is_undefined()) fail(v.undefined_message());
    if (v.is_dict()) {
      if (key.is_string())
        if (const Value* f = v.find(key.as_string())) return *f;
      if (key.is_string() && !v.is_namespace()) {
        Value m = bound_method(v, key.as_string());
        if (!m.is_undefined()) return m;
      }
      return Value::undefined(cat("'", v.type_name(), " object' has no attribute ", key.repr()));
    }
    if ((v.is_list() || v.is_string()) && key.kind() == Value::Kind::Int) {
      const int64_t n = v.length();
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return Value::undefined(cat("'", v.type_name(), " object' has no element ", key.as_int()));
      if (v.is_list()) return v.items()[size_t(i)];
      const auto off = code_point_offsets(v.as_string());
      return Value(v.as_string().substr(off[size_t(i)], off[size_t(i) + 1] - off[size_t(i)]));
    }
    if (key.is_string()) return attribute(v, key.as_string());
    return Value::undefined(cat("'", v.type_name(), " object' has no element ", key.repr()));
  }

  Value slice(const Expr& e) {
    const Value v = defined(eval(*e.args[0]));
    auto bound = [&](int k) -> std::optional<int64_t> {
      if (!e.args[size_t(k)]) return std::nullopt;
      const Value b = eval(*e.args[size_t(k)]);
      if (b.is_none()) return std::nullopt;
      if (b.kind() != Value::Kind::Int && b.kind() != Value::Kind::Bool)
        fail("slice indices must be integers or None");
      return b.as_int();
    };
    const auto start = bound(1), stop = bound(2), step_opt = bound(3);
    const int64_t step = step_opt.value_or(1);
    if (step == 0) fail("slice step cannot be zero");
    if (!v.is_list() && !v.is_string())
      fail(cat("'", v.type_name(), "' object is not subscriptable"));
    const int64_t n = v.length();
    auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
      if (!x) return dflt;
      int64_t i = *x < 0 ? *x + n : *x;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = clamp(start, step > 0 ? 0 : n - 1), en = clamp(stop, step > 0 ? n : -1);
    std::vector<int64_t> picked;
    for (int64_t i = b; step > 0 ? i < en : i > en; i += step) picked.push_back(i);
    if (v.is_list()) {
      List l;
      for (int64_t i : picked) l.push_back(v.items()[size_t(i)]);
      return Value::list(std::move(l));
    }
    const auto off = code_point_offsets(v.as_string());
    std::string s;
    for (int64_t i : picked)
      s += v.as_string().substr(off[size_t(i)], off[size_t(i) + 1] - off[size_t(i)]);
    return Value(s);
  }

  Renderer& r_;
  Value block_text_;
};

}  // namespace

Template::Template(const std::string& source, std::string name, Options options)
    : program_(parse_template(source, name, options)) {}

const std::string& Template::name() const { return program_->name; }

static Renderer make_renderer(const Program* p, const Value& variables) {
  Renderer r;
  r.program = p;
  r.variables = variables.is_dict() ? variables : Value::dict();
  r.scopes.emplace_back();
  return r;
}

std::string Template::render(const Value& variables) const {
  Renderer r = make_renderer(program_.get(), variables);
  std::string out;
  Evaluator(r).render(program_->body, out);
  return out;
}

Value Template::evaluate(const Value& variables) const {
  const Body& body = program_->body;
  if (body.size() != 1 || body[0].kind != NodeKind::Output) return Value(render(variables));
  Renderer r = make_renderer(program_.get(), variables);
  Evaluator ev(r);
  return r.check_defined(ev.eval(*body[0].expr));
}

Value raise_exception_function() {
  return Value::function([](Args& a) -> Value {
    fail(a.positional.empty() ? std::string("raise_exception() called") : a.positional[0].str());
  });
}

}  // namespace strata::jinja
