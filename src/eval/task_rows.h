// A data row of an evaluation task and the text a task file draws from it:
// field paths into the row ("question.choices[].text"), templates with
// placeholders ("{question|strip}"), choice lists and the gold answer.
// Internal to the eval layer (eval/task_file.cpp, task_formats.cpp, task.cpp).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/philox.h"

namespace strata::task_internal {

using json = nlohmann::json;

// A path into a row: "query", "choices[2]", "question.stem",
// "question.choices[].text" ("[]" maps the rest of the path over a list).
bool valid_path(std::string_view p);

// Resolves a valid path in `v` into `out`; false when some part is missing.
bool lookup(const json& v, std::string_view path, json& out);

// A scalar field as text; false for lists, objects and null.
bool scalar_text(const json& v, std::string& out);

// "a list", "an object", "null" or "a scalar", for messages.
const char* json_kind(const json& v);

struct Row {
  json fields;        // a JSON object
  std::string where;  // "<data file>:<line>"
  std::string group;  // "" when the task has no groups
};

// A field that must be there: its value, or an error naming the row.
json need(const Row& row, const std::string& path);
// The same as text (a scalar), or an error naming the row.
std::string need_text(const Row& row, const std::string& path);

// "{path}" or "{path|filter|...}" placeholders in literal text; "{{" and "}}"
// are literal braces. `_group` is the example's group.
class Template {
 public:
  Template() = default;
  // `at` names the TOML key for errors ("eval/x.toml:4: text").
  Template(const std::string& source, const std::string& at);
  std::string render(const Row& row) const;

 private:
  enum class Filter { Strip, Spaces };
  struct Part {
    std::string literal;  // text before the placeholder
    std::string path;
    std::vector<Filter> filters;
  };
  std::vector<Part> parts_;
  std::string tail_;
};

// choices / contexts: a field holding a list of strings, or a list of templates.
struct ListSpec {
  std::string path;             // the field, when not empty
  std::vector<Template> items;  // else one template per entry
  std::vector<std::string> eval(const Row& row) const;
};

// The gold answer: a field holding the index, a field mapped through a table,
// or a field whose value is looked up in a list field (ARC's answerKey among
// the choice labels).
struct GoldSpec {
  std::string field;
  std::map<std::string, int> map;  // when not empty
  std::string index_in;            // when not empty
  int eval(const Row& row) const;
};

// k distinct few-shot examples of `pool` (sorted indices), never `self`: the
// first k (first_n), or a partial Fisher-Yates shuffle driven by `rng`.
std::vector<int> draw_shots(const std::vector<int>& pool, int self, int k, bool first_n,
                            const PhiloxStream& rng);

}  // namespace strata::task_internal
