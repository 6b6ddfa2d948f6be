// The Jinja interpreter's syntax tree, shared by its parser
// (jinja_parse.cpp), evaluator (jinja_eval.cpp) and built-ins
// (jinja_methods.cpp, jinja_filters.cpp). Not for use outside core/jinja*.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/jinja.h"

namespace strata::jinja {

struct Pos {
  int line = 1, col = 1;
};

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, String, Op, End };

struct Token {
  Tok type = Tok::End;
  std::string text;  // Data: the text; Name, Op: as written; String: unescaped
  Pos pos;
  int64_t i = 0;  // Int
  double d = 0;   // Float
};

// Splits a template (newlines already "\n") into tokens (jinja_lex.cpp).
std::vector<Token> lex(const std::string& source, const std::string& name, const Options& o);

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

enum class ExprKind {
  Literal,  // literal
  Name,     // name
  Attr,     // args[0].name
  Index,    // args[0][args[1]]
  Slice,    // args[0][args[1]:args[2]:args[3]] (null where absent)
  Call,     // args[0](args[1..], kwargs)
  Filter,   // args[0] | name(args[1..], kwargs); args[0] null in {% filter %}
  Test,     // args[0] is [not] name(args[1..])
  Not,      // not args[0]
  Negate,   // -args[0]
  Plus,     // +args[0]
  Binary,   // args[0] name args[1]: + - * / // % ** ~ in, "not in"
  Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
  And,
  Or,
  Cond,      // args[0] if args[1] else args[2] (args[2] null: undefined)
  ListLit,   // [args...]
  TupleLit,  // (args...) and a, b
  DictLit,   // {args[0]: args[1], ...}
};

struct Expr {
  ExprKind kind = ExprKind::Literal;
  Pos pos;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using Body = std::vector<Node>;

enum class NodeKind {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  Break,
  Continue,
  FilterBlock
};

struct Node {
  NodeKind kind = NodeKind::Text;
  Pos pos;
  std::string text;  // Text
  ExprPtr expr;      // Output, Set, For (iterable), FilterBlock, CallBlock (the call)
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body) in order
  Body body, else_body;                            // For, SetBlock, Macro, FilterBlock; If, For
  std::vector<std::string> targets;  // For: loop names; Set: names; Macro: name, then parameters
  std::string attr;                  // Set on a namespace: ns.attr (targets[0] is ns)
  ExprPtr cond;                      // For: the inline `if`
  bool recursive = false;            // For: loop(items) renders the body again
  std::vector<ExprPtr> defaults;     // Macro: each parameter's default (null: none)
};

struct Program {
  std::string name;
  Options options;
  Body body;
};

// Parses a template (jinja_parse.cpp).
std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name,
                                        const Options& options);

// "<template>:<line>:<col>: <message>", thrown as strata::Error.
[[noreturn]] void fail_at(const std::string& tmpl, Pos pos, const std::string& message);

// A call's argument: the i-th positional one, else the one named `name`,
// else `dflt`.
inline const Value& arg(Args& a, size_t i, const char* name, const Value& dflt) {
  if (i < a.positional.size()) return a.positional[i];
  for (const auto& [k, v] : a.named)
    if (k == name) return v;
  return dflt;
}

// Built-ins (jinja_methods.cpp, jinja_filters.cpp). Each throws strata::Error with a plain
// message; the evaluator adds the template and position.
struct Renderer;
Value apply_filter(Renderer& r, const std::string& name, Value subject, Args& args);
bool apply_test(Renderer& r, const std::string& name, const Value& subject, Args& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// A method of a str, list or dict (subject.name), or undefined when the
// subject has none of that name.
Value bound_method(const Value& subject, const std::string& name);
// The globals every template sees: range, dict, namespace.
Value global_function(const std::string& name);
// The items a for loop or list() sees: a list's items, a dict's keys, a
// string's characters; throws for other kinds.
List iterable_items(const Value& v);
// Python's str.strip family: which = 'b' both, 'l' left, 'r' right; chars
// null: whitespace.
std::string py_strip(const std::string& s, const Value* chars, char which);

// The most text a template may make, and the longest string it may build.
constexpr size_t kMaxText = size_t(256) << 20;

// Python's operators on template values (jinja_ops.cpp): + - * / // % ** ~
// and `in` / `not in` (binary_op), == != < <= > >= in, not in (compare_op),
// and `needle in hay` (contains). Undefined operands follow the renderer's
// strictness.
struct Renderer;
Value binary_op(const Renderer& r, const std::string& op, const Value& a, const Value& b);
bool compare_op(const Renderer& r, const std::string& op, const Value& a, const Value& b);
bool contains(const Renderer& r, const Value& hay, const Value& needle);

// The evaluator's state, shared with the built-ins that call back into it
// (filters that apply tests, map with a filter name).
struct Renderer {
  const Program* program = nullptr;
  std::vector<std::map<std::string, Value>> scopes;  // innermost last
  Value variables;
  int call_depth = 0;  // macro calls and recursive loops in progress
  // Throws for an undefined value in strict mode (printing, iterating,
  // comparing); returns `v` otherwise.
  const Value& check_defined(const Value& v) const;
};

}  // namespace strata::jinja
