// Jinja templates, as lm-evaluation-harness task YAMLs and Hugging Face chat
// templates write them: strata's own interpreter of the subset those use.
//
//   {{ expr }}, {% if/elif/else %}, {% for x in xs if cond %} with loop.*,
//   {% else %} on an empty loop, {% break %}/{% continue %}, {% set x = ... %}
//   (also ns.attr on a namespace(), and {% set x %}...{% endset %}),
//   {% macro %}, {% filter %}, {% raw %}, {# comments #}, whitespace control
//   ({{- -}}, {%- -%}, {%+ +%}) with trim_blocks, lstrip_blocks and
//   keep_trailing_newline; expressions with Python's operators and literals,
//   attribute, index and slice access, the str/list/dict methods templates
//   call (.strip(), .split(), .index(), .items(), ...), Jinja's filters
//   (join, trim, length, default, tojson, map, selectattr, ...) and tests
//   (defined, none, string, mapping, divisibleby, ...), and the globals
//   range, dict, namespace.
//
// A construct outside that subset ({% include %}, {% extends %}, a filter or
// method it does not know) is a one-line strata::Error naming the template,
// line and column: "<name>:3:14: unknown filter 'foo'". Rendering errors name
// the same place. Values print as Python prints them (True, None, 1.0,
// ['a', "b's"]); strings are UTF-8 and index by code point; case mapping
// (upper, lower, title) covers ASCII letters only.
#pragma once

#include <memory>
#include <string>

#include "core/jinja_value.h"

namespace strata::jinja {

struct Options {
  bool trim_blocks = false;            // drop the newline after a block tag
  bool lstrip_blocks = false;          // drop blanks before a block tag on its line
  bool keep_trailing_newline = false;  // else one trailing newline is dropped
  // Undefined variables are errors wherever used, except in `is defined`
  // and `default` (the harness's StrictUndefined); else they print as "".
  bool strict_undefined = false;
  // tojson as Hugging Face's chat templates define it (keys in order,
  // non-ASCII kept) instead of Jinja's (sorted keys, ASCII with <>&'
  // escaped).
  bool tojson_unsorted = false;
};

// lm-evaluation-harness's environment: StrictUndefined, trailing newline kept
// (its regex_replace filter is always available).
Options harness_options();
// transformers' chat-template environment: trim_blocks, lstrip_blocks,
// tojson unsorted (the caller passes raise_exception and strftime_now).
Options chat_options();

struct Program;

class Template {
 public:
  // Parses `source`; `name` names the template in errors (a file, or
  // "arc.yaml: doc_to_text"). Throws strata::Error on a syntax error.
  Template(const std::string& source, std::string name, Options options = {});

  // Renders with `variables` (a dict) as the top-level names.
  std::string render(const Value& variables) const;
  // When the template is one {{ expression }} and nothing else, its value
  // (a list stays a list); otherwise the rendered text as a string.
  Value evaluate(const Value& variables) const;

  const std::string& name() const;

 private:
  std::shared_ptr<const Program> program_;
};

// A function value for templates that call raise_exception(message): it
// throws strata::Error "<message>".
Value raise_exception_function();

// A Python literal as ast.literal_eval reads it ("[{'a': 1}, (2, 'b')]",
// strings, numbers, True/False/None, lists, tuples, dicts); throws
// strata::Error naming the offset for anything else. Also the `literal_eval`
// filter, a strata extension for datasets that store structure as Python
// text (RACE's problems); a list or dict passes through unchanged.
Value literal_eval(const std::string& text);

}  // namespace strata::jinja
