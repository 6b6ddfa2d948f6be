// Evaluation tasks: eval/<name>.toml -> rendered loglikelihood requests.
//
// Loading runs in three steps, each of which may throw a one-line
// strata::Error naming the task file and line or the data file and line:
//   1. the task file is parsed and every key checked (type, allowed values,
//      whether the task's kind uses it, data files present);
//   2. the data files are read through the task's format adapter into rows
//      (JSON objects: one per JSONL line or CSV record) and each row is turned
//      into an Item: its text, choices or per-choice contexts, target, gold;
//   3. every example (the first `limit`) gets its few-shot preamble and its
//      requests. Few-shot examples are Items of the few-shot split.
//
// Request layout (lm-evaluation-harness): context = description + shots +
// text, each shot being `text + target_delimiter + answer + fewshot_delimiter`;
// the continuation of choice c is `target_delimiter + choice_c`, so it carries
// the leading space and contexts never end with the delimiter.
#include "eval/task.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/philox.h"
#include "core/text.h"
#include "core/toml_kind.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Philox purpose word of few-shot sampling ("EVFS").
constexpr uint32_t kFewshotStream = 0x45564653u;

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.replace: every non-overlapping occurrence, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// ------------------------------------------------------------ field paths

// A path into a row: "query", "choices[2]", "question.stem",
// "question.choices[].text" ("[]" maps the rest of the path over a list).
bool valid_path(std::string_view p) {
  if (p.empty()) return false;
  bool need_name = true;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '[') {
      const size_t close = p.find(']', i);
      if (close == std::string_view::npos || need_name) return false;
      for (size_t k = i + 1; k < close; ++k)
        if (!std::isdigit(static_cast<unsigned char>(p[k]))) return false;
      i = close + 1;
    } else if (p[i] == '.') {
      if (need_name) return false;
      need_name = true;
      ++i;
    } else if (p[i] == ']' || p[i] == '{' || p[i] == '}' || p[i] == '|') {
      return false;
    } else {
      need_name = false;
      ++i;
    }
  }
  return !need_name;
}

// Resolves a valid path in `v` into `out`; false when some part is missing.
bool lookup(const json& v, std::string_view path, json& out) {
  if (path.empty()) {
    out = v;
    return true;
  }
  if (path[0] == '.') return lookup(v, path.substr(1), out);
  if (path[0] == '[') {
    const size_t close = path.find(']');
    const std::string_view index = path.substr(1, close - 1);
    const std::string_view rest = path.substr(close + 1);
    if (!v.is_array()) return false;
    if (index.empty()) {
      out = json::array();
      for (const json& e : v) {
        json x;
        if (!lookup(e, rest, x)) return false;
        out.push_back(std::move(x));
      }
      return true;
    }
    size_t i = 0;
    // An index too large for size_t is missing, not element 0.
    const bool parsed =
        std::from_chars(index.data(), index.data() + index.size(), i).ec == std::errc();
    return parsed && i < v.size() && lookup(v[i], rest, out);
  }
  const size_t end = std::min(path.size(), path.find_first_of(".["));
  if (!v.is_object()) return false;
  const auto it = v.find(std::string(path.substr(0, end)));
  return it != v.end() && lookup(*it, path.substr(end), out);
}

// A scalar field as text; false for lists, objects and null.
bool scalar_text(const json& v, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_boolean()) {
    out = v.get<bool>() ? "true" : "false";
  } else if (v.is_number()) {
    out = v.dump();
  } else {
    return false;
  }
  return true;
}

const char* json_kind(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_null()) return "null";
  return "a scalar";
}

// ------------------------------------------------------------ rows

struct Row {
  json fields;        // a JSON object
  std::string where;  // "<data file>:<line>"
  std::string group;  // "" when the task has no groups
};

// A field that must be there: its value, or an error naming the row.
json need(const Row& row, const std::string& path) {
  json v;
  if (!lookup(row.fields, path, v)) fail_one_line(row.where, ": missing field '", path, "'");
  return v;
}

std::string need_text(const Row& row, const std::string& path) {
  const json v = need(row, path);
  std::string s;
  if (!scalar_text(v, s))
    fail_one_line(row.where, ": field '", path, "' is ", json_kind(v), ", expected text");
  return s;
}

// ------------------------------------------------------------ templates

// "{path}" or "{path|filter|...}" placeholders in literal text; "{{" and "}}"
// are literal braces. `_group` is the example's group.
class Template {
 public:
  Template() = default;
  // `at` names the TOML key for errors ("eval/x.toml:4: text").
  Template(const std::string& source, const std::string& at) {
    std::string literal;
    for (size_t i = 0; i < source.size(); ++i) {
      const char c = source[i];
      if ((c == '{' || c == '}') && i + 1 < source.size() && source[i + 1] == c) {
        literal += c;
        ++i;
      } else if (c == '}') {
        fail_one_line(at, ": unmatched '}' in template (write '}}' for a literal brace)");
      } else if (c == '{') {
        const size_t close = source.find('}', i);
        if (close == std::string::npos)
          fail_one_line(at, ": unclosed '{' in template (write '{{' for a literal brace)");
        Part p;
        p.literal = std::move(literal);
        literal.clear();
        std::string spec = source.substr(i + 1, close - i - 1);
        size_t bar = spec.find('|');
        p.path = spec.substr(0, bar);
        if (!valid_path(p.path)) fail_one_line(at, ": bad field '", p.path, "' in template");
        while (bar != std::string::npos) {
          const size_t next = spec.find('|', bar + 1);
          const std::string f =
              spec.substr(bar + 1, next == std::string::npos ? next : next - bar - 1);
          if (f == "strip") {
            p.filters.push_back(Filter::Strip);
          } else if (f == "spaces") {
            p.filters.push_back(Filter::Spaces);
          } else {
            fail_one_line(at, ": unknown filter '", f, "' in template (known: strip, spaces)");
          }
          bar = next;
        }
        parts_.push_back(std::move(p));
        i = close;
      } else {
        literal += c;
      }
    }
    tail_ = std::move(literal);
  }

  std::string render(const Row& row) const {
    std::string out;
    for (const Part& p : parts_) {
      out += p.literal;
      std::string v = p.path == "_group" ? row.group : need_text(row, p.path);
      for (Filter f : p.filters) {
        if (f == Filter::Strip) v = python_strip(v);
        if (f == Filter::Spaces) std::replace(v.begin(), v.end(), '_', ' ');
      }
      out += v;
    }
    return out + tail_;
  }

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
  std::vector<std::string> eval(const Row& row) const {
    std::vector<std::string> out;
    if (path.empty()) {
      for (const Template& t : items) out.push_back(t.render(row));
      return out;
    }
    const json v = need(row, path);
    if (!v.is_array())
      fail_one_line(row.where, ": field '", path, "' is ", json_kind(v), ", expected a list");
    for (const json& e : v) {
      std::string s;
      if (!scalar_text(e, s))
        fail_one_line(row.where, ": field '", path, "' holds ", json_kind(e), ", expected text");
      out.push_back(std::move(s));
    }
    return out;
  }
};

// The gold answer: a field holding the index, a field mapped through a table,
// or a field whose value is looked up in a list field (ARC's answerKey among
// the choice labels).
struct GoldSpec {
  std::string field;
  std::map<std::string, int> map;  // when not empty
  std::string index_in;            // when not empty
  int eval(const Row& row) const {
    if (!map.empty()) {
      const std::string v = need_text(row, field);
      const auto it = map.find(v);
      if (it == map.end())
        fail_one_line(row.where, ": gold: '", v, "' (field '", field, "') is not in the map");
      return it->second;
    }
    if (!index_in.empty()) {
      const std::string v = need_text(row, field);
      ListSpec list{index_in, {}};
      const std::vector<std::string> keys = list.eval(row);
      const auto it = std::find(keys.begin(), keys.end(), v);
      if (it == keys.end())
        fail_one_line(row.where, ": gold: '", v, "' (field '", field, "') is not in '", index_in,
                      "'");
      return int(it - keys.begin());
    }
    const json v = need(row, field);
    if (v.is_number_integer()) {  // range-checked: get<int>() would wrap 4294967296 to 0
      if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                                 : v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
        fail_one_line(row.where, ": gold ", v.dump(), " is not a choice index");
      return int(v.get<int64_t>());
    }
    std::string s;
    if (v.is_string()) s = trim(v.get<std::string>());
    int g = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), g);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size())
      fail_one_line(row.where, ": gold field '", field, "' is ",
                    v.dump(-1, ' ', false, json::error_handler_t::replace),
                    ", expected an integer index");
    return g;
  }
};

// ------------------------------------------------------------ task file

enum class Format { Jsonl, Csv, Piqa, HellaswagOriginal, Text };
enum class Split { File, Paragraph, Wikitext, Separator };

struct Config {
  std::string file;  // the TOML file
  std::string summary;
  TaskKind kind = TaskKind::MultipleChoice;
  Format format = Format::Jsonl;
  std::vector<std::string> data, fewshot_data;
  std::string labels, fewshot_labels;
  std::string data_at;  // "<file>:<line>: data" for errors
  bool first_n = false;
  int shots = 0;
  std::optional<Template> description, text, target;
  std::optional<ListSpec> choices, contexts;
  GoldSpec gold;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n";
  std::string group_by;  // "", "file" or a field path
  std::vector<std::pair<std::string, std::string>> strip_prefix;
  // field -> (suffix, replacement) pairs; each row's field must end in one.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>
      replace_suffix;
  std::vector<std::string> metrics;
  bool comparable = true;
  std::string comparable_note, harness_task;
  int version = 0;
  std::map<std::string, std::string> categories;  // group -> category
  GenerationSpec generation;
  std::vector<FilterStep> filters;
  ExactMatchSpec exact_match;
  std::string execute;
  Split split = Split::File;
  std::string separator;
  bool detokenize_wikitext = false;
};

// Which kinds use a key: bit 0 multiple_choice, 1 last_word, 2 perplexity.
constexpr int kMC = 1, kLW = 2, kPPL = 4, kGen = 8, kRows = kMC | kLW | kGen, kAll = 15;
struct KeyInfo {
  const char* name;
  int kinds;
};
constexpr KeyInfo kKeys[] = {
    {"summary", kAll},
    {"kind", kAll},
    {"format", kAll},
    {"data", kAll},
    {"metrics", kAll},
    {"labels", kRows},
    {"fewshot_data", kRows},
    {"fewshot_labels", kRows},
    {"fewshot_sampler", kRows},
    {"shots", kRows},
    {"description", kRows},
    {"text", kRows},
    {"target", kRows},
    {"target_delimiter", kRows},
    {"fewshot_delimiter", kRows},
    {"group_by", kRows},
    {"strip_prefix", kRows},
    {"replace_suffix", kRows},
    {"comparable", kAll},
    {"comparable_note", kAll},
    {"harness_task", kAll},
    {"version", kAll},
    {"categories", kMC},
    {"until", kGen},
    {"max_gen_toks", kGen},
    {"temperature", kGen},
    {"do_sample", kGen},
    {"filters", kGen},
    {"exact_match", kGen},
    {"execute", kGen},
    {"choices", kMC},
    {"contexts", kMC},
    {"gold", kMC},
    {"split", kPPL},
    {"separator", kPPL},
    {"detokenize", kPPL},
};

// Reads one task file's keys with file:line errors.
class TaskFile {
 public:
  explicit TaskFile(const std::string& path) : path_(path) {
    const std::string text = read_file(path, "task file");
    try {
      table_ = toml::parse(std::string_view(text), std::string_view(path));
    } catch (const toml::parse_error& e) {
      fail_one_line(path, ":", e.source().begin.line, ": ", e.description());
    }
  }

  const std::string& path() const { return path_; }
  const toml::table& table() const { return table_; }
  std::string at(const toml::node& n) const { return cat(path_, ":", n.source().begin.line); }
  std::string at(std::string_view key) const {
    const toml::node* n = table_.get(key);
    return n ? cat(at(*n), ": ", key) : cat(path_, ": ", key);
  }
  const toml::node* get(std::string_view key) const { return table_.get(key); }

  std::optional<std::string> str(std::string_view key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) fail_one_line(at(key), ": expected a string, got ", toml_kind(*n));
    return n->as_string()->get();
  }
  std::string need_str(std::string_view key) const {
    auto s = str(key);
    if (!s) fail_one_line(path_, ": missing key '", key, "'");
    return *s;
  }
  std::optional<int64_t> integer(std::string_view key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) fail_one_line(at(key), ": expected an integer, got ", toml_kind(*n));
    return n->as_integer()->get();
  }
  // One of `allowed` (listed in the error).
  std::string choice(std::string_view key, const std::vector<std::string>& allowed,
                     const std::string& fallback) const {
    const std::optional<std::string> s = str(key);
    if (!s) {
      if (fallback.empty())
        fail_one_line(path_, ": missing key '", key, "' (one of ", join(allowed, ", "), ")");
      return fallback;
    }
    if (std::find(allowed.begin(), allowed.end(), *s) == allowed.end())
      fail_one_line(at(key), ": expected one of ", join(allowed, ", "), ", got '", *s, "'");
    return *s;
  }
  std::vector<std::string> str_list(std::string_view key) const {
    std::vector<std::string> out;
    const toml::node* n = get(key);
    if (!n) return out;
    const toml::array* a = n->as_array();
    if (!a) fail_one_line(at(key), ": expected an array of strings, got ", toml_kind(*n));
    for (const toml::node& e : *a) {
      if (!e.is_string())
        fail_one_line(at(key), ": expected an array of strings, got ", toml_kind(e), " in it");
      out.push_back(e.as_string()->get());
    }
    return out;
  }

 private:
  std::string path_;
  toml::table table_;
};

// "*" matches any run of characters (one path component only).
bool glob_match(std::string_view pat, std::string_view s) {
  if (pat.empty()) return s.empty();
  if (pat[0] == '*') {
    for (size_t i = 0; i <= s.size(); ++i)
      if (glob_match(pat.substr(1), s.substr(i))) return true;
    return false;
  }
  return !s.empty() && pat[0] == s[0] && glob_match(pat.substr(1), s.substr(1));
}

// A data path relative to the task file's directory; a '*' in the file name
// expands to the matching files, sorted.
std::vector<std::string> resolve_files(const TaskFile& tf, std::string_view key) {
  const std::string value = tf.need_str(key);
  const fs::path p = fs::path(value).is_absolute()
                         ? fs::path(value).lexically_normal()
                         : (fs::path(tf.path()).parent_path() / value).lexically_normal();
  const std::string name = p.filename().string();
  if (name.find('*') == std::string::npos) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) fail_one_line(tf.at(key), ": no such file '", p.string(), "'");
    return {p.string()};
  }
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path(), ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file() && glob_match(name, it->path().filename().string()))
      out.push_back((p.parent_path() / it->path().filename()).string());
  if (out.empty()) fail_one_line(tf.at(key), ": no file matches '", p.string(), "'");
  std::sort(out.begin(), out.end());
  return out;
}

ListSpec list_spec(const TaskFile& tf, std::string_view key) {
  const toml::node* n = tf.get(key);
  const std::string at = tf.at(key);
  ListSpec spec;
  if (n->is_string()) {
    spec.path = n->as_string()->get();
    if (!valid_path(spec.path)) fail_one_line(at, ": bad field '", spec.path, "'");
  } else {
    for (const std::string& s : tf.str_list(key)) spec.items.emplace_back(s, at);
    if (spec.items.empty()) fail_one_line(at, ": empty list");
  }
  return spec;
}

GoldSpec gold_spec(const TaskFile& tf) {
  const toml::node* n = tf.get("gold");
  const std::string at = tf.at("gold");
  GoldSpec g;
  if (n->is_string()) {
    g.field = n->as_string()->get();
  } else if (const toml::table* t = n->as_table()) {
    for (const auto& [k, v] : *t) {
      const std::string at_k = cat(tf.at(v), ": gold.", k.str());
      if (k == "field" && v.is_string()) {
        g.field = v.as_string()->get();
      } else if (k == "index_in" && v.is_string()) {
        g.index_in = v.as_string()->get();
        if (!valid_path(g.index_in)) fail_one_line(at_k, ": bad field '", g.index_in, "'");
      } else if (k == "map" && v.is_table()) {
        for (const auto& [mk, mv] : *v.as_table()) {
          if (!mv.is_integer() || mv.as_integer()->get() < 0 || mv.as_integer()->get() > INT32_MAX)
            fail_one_line(at_k, ": map values are choice indices (integers from 0)");
          g.map[std::string(mk.str())] = int(mv.as_integer()->get());
        }
        if (g.map.empty()) fail_one_line(at_k, ": empty map");
      } else if (k == "field" || k == "index_in" || k == "map") {
        fail_one_line(at_k, ": expected ", k == "map" ? "a table" : "a string", ", got ",
                      toml_kind(v));
      } else {
        fail_one_line(at_k, ": unknown key (gold takes field, and map or index_in)");
      }
    }
    if (!g.map.empty() && !g.index_in.empty())
      fail_one_line(at, ": give map or index_in, not both");
  } else {
    fail_one_line(at, ": expected a field name or a table, got ", toml_kind(*n));
  }
  if (!valid_path(g.field)) fail_one_line(at, ": bad or missing field '", g.field, "'");
  return g;
}

// libstdc++ compiles a regular expression recursively: a pattern nested some
// ten thousand levels deep overflows the stack (strata eval crashed). Task
// patterns are short; longer ones are refused before they are compiled.
void check_regex_size(const std::string& pattern, const std::string& at) {
  constexpr size_t kMaxRegex = 1000;
  if (pattern.size() > kMaxRegex)
    fail_one_line(at, ": a regex of ", pattern.size(), " characters (at most ", kMaxRegex, ")");
}

// generate_until keys: generation settings, filters, exact_match options,
// execution.
void read_generation(const TaskFile& tf, Config& c) {
  GenerationSpec& g = c.generation;
  if (tf.get("until")) g.until = tf.str_list("until");
  for (const std::string& u : g.until)
    if (u.empty()) fail_one_line(tf.at("until"), ": an empty stop string");
  const int64_t max_toks = tf.integer("max_gen_toks").value_or(g.max_gen_toks);
  if (max_toks < 1 || max_toks > 100000)
    fail_one_line(tf.at("max_gen_toks"), ": expected 1..100000, got ", max_toks);
  g.max_gen_toks = int(max_toks);
  if (const toml::node* n = tf.get("temperature")) {
    if (!n->is_number()) fail_one_line(tf.at("temperature"), ": expected a number");
    g.temperature = n->value<double>().value_or(0.0);
    if (!(g.temperature >= 0 && g.temperature <= 100))
      fail_one_line(tf.at("temperature"), ": expected 0..100, got ", g.temperature);
  }
  if (const toml::node* n = tf.get("do_sample")) {
    if (!n->is_boolean()) fail_one_line(tf.at("do_sample"), ": expected true or false");
    g.do_sample = n->as_boolean()->get();
  }
  if (g.do_sample && g.temperature == 0)
    fail_one_line(tf.at("do_sample"), ": do_sample = true needs a temperature > 0");
  if (const toml::node* n = tf.get("filters")) {
    const toml::array* a = n->as_array();
    if (!a) fail_one_line(tf.at("filters"), ": expected a list of tables");
    for (const toml::node& e : *a) {
      const toml::table* t = e.as_table();
      if (!t) fail_one_line(tf.at(e), ": filters: expected a table {function = ...}");
      FilterStep f;
      for (const auto& [k, v] : *t) {
        const std::string at = cat(tf.at(v), ": filters.", k.str());
        if (k == "function" || k == "regex_pattern" || k == "fallback") {
          if (!v.is_string()) fail_one_line(at, ": expected a string");
          (k == "function"   ? f.function
           : k == "fallback" ? f.fallback
                             : f.pattern) = v.as_string()->get();
        } else if (k == "group_select") {
          if (!v.is_integer() || v.as_integer()->get() < INT32_MIN ||
              v.as_integer()->get() > INT32_MAX)
            fail_one_line(at, ": expected an integer (a match index)");
          f.group_select = int(v.as_integer()->get());
        } else {
          fail_one_line(at, ": unknown key (function, regex_pattern, group_select, fallback)");
        }
      }
      static const std::vector<std::string> kFunctions = {"regex", "take_first", "strip",
                                                          "lowercase"};
      if (std::find(kFunctions.begin(), kFunctions.end(), f.function) == kFunctions.end())
        fail_one_line(tf.at(e), ": filters: unknown function '", f.function,
                      "' (known: ", join(kFunctions, ", "), ")");
      if (f.function == "regex") {
        if (f.pattern.empty()) fail_one_line(tf.at(e), ": filters: regex needs regex_pattern");
        check_regex_size(f.pattern, cat(tf.at(e), ": filters: regex_pattern"));
        try {
          std::regex check(f.pattern);
        } catch (const std::regex_error& err) {
          fail_one_line(tf.at(e), ": filters: bad regex_pattern '", f.pattern, "': ", err.what());
        }
      }
      c.filters.push_back(std::move(f));
    }
  }
  if (const toml::node* n = tf.get("exact_match")) {
    const toml::table* t = n->as_table();
    if (!t) fail_one_line(tf.at("exact_match"), ": expected a table");
    for (const auto& [k, v] : *t) {
      const std::string at = cat(tf.at(v), ": exact_match.", k.str());
      if (k == "ignore_case" || k == "ignore_punctuation") {
        if (!v.is_boolean()) fail_one_line(at, ": expected true or false");
        (k == "ignore_case" ? c.exact_match.ignore_case : c.exact_match.ignore_punctuation) =
            v.as_boolean()->get();
      } else if (k == "regexes_to_ignore") {
        const toml::array* a = v.as_array();
        for (size_t i = 0; a && i < a->size(); ++i) {
          if (!(*a)[i].is_string()) fail_one_line(at, ": expected a list of strings");
          const std::string re = (*a)[i].as_string()->get();
          check_regex_size(re, at);
          try {
            std::regex check(re);
          } catch (const std::regex_error& err) {
            fail_one_line(at, ": bad regex '", re, "': ", err.what());
          }
          c.exact_match.regexes_to_ignore.push_back(re);
        }
        if (!a) fail_one_line(at, ": expected a list of strings");
      } else {
        fail_one_line(at, ": unknown key (ignore_case, ignore_punctuation, regexes_to_ignore)");
      }
    }
  }
  c.execute = tf.choice("execute", {"none", "humaneval"}, "none");
  if (c.execute == "none") c.execute.clear();
  for (const std::string& m : c.metrics)
    if ((m == "pass@1") != !c.execute.empty())
      fail_one_line(tf.at("metrics"), ": ",
                    m == "pass@1" ? "pass@1 needs execute = \"humaneval\""
                                  : "tasks with execute report pass@1 only");
}

Config read_config(const std::string& path) {
  const TaskFile tf(path);
  Config c;
  c.file = path;

  const std::string kind =
      tf.choice("kind", {"multiple_choice", "last_word", "perplexity", "generate_until"}, "");
  const int bit = kind == "multiple_choice" ? kMC
                  : kind == "last_word"     ? kLW
                  : kind == "perplexity"    ? kPPL
                                            : kGen;
  c.kind = bit == kMC    ? TaskKind::MultipleChoice
           : bit == kLW  ? TaskKind::LastWord
           : bit == kGen ? TaskKind::Generate
                         : TaskKind::Perplexity;
  for (const auto& [k, v] : tf.table()) {
    const std::string key(k.str());
    const KeyInfo* info = nullptr;
    for (const KeyInfo& ki : kKeys)
      if (key == ki.name) info = &ki;
    if (!info) {
      std::string best;
      size_t best_d = 3;  // suggest only close matches
      for (const KeyInfo& ki : kKeys)
        if (const size_t d = edit_distance(key, ki.name); d < best_d) best = ki.name, best_d = d;
      fail_one_line(tf.at(v), ": unknown key '", key, "'",
                    best.empty() ? std::string() : cat(" (did you mean '", best, "'?)"));
    }
    if (!(info->kinds & bit))
      fail_one_line(tf.at(v), ": key '", key, "' is not used by ", kind, " tasks");
  }

  c.summary = tf.need_str("summary");
  const std::string format =
      tf.choice("format", {"jsonl", "csv", "piqa", "hellaswag_original", "text"}, "");
  c.format = format == "jsonl"  ? Format::Jsonl
             : format == "csv"  ? Format::Csv
             : format == "piqa" ? Format::Piqa
             : format == "text" ? Format::Text
                                : Format::HellaswagOriginal;
  if ((c.format == Format::Text) != (bit == kPPL))
    fail_one_line(tf.at("format"), ": ",
                  bit == kPPL ? "perplexity tasks read format \"text\""
                              : "format \"text\" is for perplexity tasks");
  c.data_at = tf.at("data");
  c.data = resolve_files(tf, "data");

  const std::vector<std::string> known_metrics =
      bit == kMC    ? std::vector<std::string>{"acc", "acc_norm", "acc_bytes", "acc_macro"}
      : bit == kLW  ? std::vector<std::string>{"acc", "perplexity"}
      : bit == kGen ? std::vector<std::string>{"exact_match", "pass@1"}
                    : std::vector<std::string>{"word_perplexity", "byte_perplexity",
                                               "bits_per_byte", "token_perplexity"};
  c.metrics = tf.str_list("metrics");
  if (c.metrics.empty())
    c.metrics = bit == kMC    ? std::vector<std::string>{"acc", "acc_norm"}
                : bit == kGen ? std::vector<std::string>{"exact_match"}
                              : known_metrics;
  for (const std::string& m : c.metrics)
    if (std::find(known_metrics.begin(), known_metrics.end(), m) == known_metrics.end())
      fail_one_line(tf.at("metrics"), ": unknown metric '", m, "' for ", kind,
                    " tasks (known: ", join(known_metrics, ", "), ")");

  if (const toml::node* n = tf.get("comparable")) {
    if (!n->is_boolean()) fail_one_line(tf.at("comparable"), ": expected true or false");
    c.comparable = n->as_boolean()->get();
  }
  c.comparable_note = tf.str("comparable_note").value_or("");
  if (!c.comparable && c.comparable_note.empty())
    fail_one_line(tf.at("comparable"), ": comparable = false needs a comparable_note (the reason)");
  c.harness_task = tf.str("harness_task").value_or("");
  const int64_t version = tf.integer("version").value_or(0);
  if (version < 0 || version > INT32_MAX)
    fail_one_line(tf.at("version"), ": expected 0..", INT32_MAX, ", got ", version);
  c.version = int(version);
  if (const toml::node* n = tf.get("categories")) {
    const toml::table* t = n->as_table();
    if (!t) fail_one_line(tf.at("categories"), ": expected a table {category = [groups]}");
    for (const auto& [k, v] : *t) {
      const toml::array* a = v.as_array();
      if (!a) fail_one_line(tf.at(v), ": categories.", k.str(), ": expected a list of groups");
      for (const toml::node& g : *a) {
        if (!g.is_string())
          fail_one_line(tf.at(v), ": categories.", k.str(), ": expected a list of group names");
        const std::string name = g.as_string()->get();
        if (!c.categories.emplace(name, std::string(k.str())).second)
          fail_one_line(tf.at(v), ": categories.", k.str(), ": group '", name,
                        "' is already in category '", c.categories[name], "'");
      }
    }
  }

  if (bit == kPPL) {
    const std::string split =
        tf.choice("split", {"file", "paragraph", "wikitext", "separator"}, "file");
    c.split = split == "file"        ? Split::File
              : split == "paragraph" ? Split::Paragraph
              : split == "wikitext"  ? Split::Wikitext
                                     : Split::Separator;
    c.separator = tf.str("separator").value_or("");
    if ((c.split == Split::Separator) != !c.separator.empty())
      fail_one_line(tf.at(c.separator.empty() ? "split" : "separator"),
                    ": split = \"separator\" goes with a non-empty separator key");
    c.detokenize_wikitext = tf.choice("detokenize", {"none", "wikitext"}, "none") == "wikitext";
    return c;
  }

  const bool labelled = c.format == Format::Piqa;
  for (const char* key : {"labels", "fewshot_labels"})
    if (tf.get(key) && !labelled)
      fail_one_line(tf.at(key), ": only format \"piqa\" reads a labels file");
  if (labelled) c.labels = resolve_files(tf, "labels").at(0);
  if (tf.get("fewshot_data")) {
    c.fewshot_data = resolve_files(tf, "fewshot_data");
    if (labelled) c.fewshot_labels = resolve_files(tf, "fewshot_labels").at(0);
  } else if (tf.get("fewshot_labels")) {
    fail_one_line(tf.at("fewshot_labels"), ": needs fewshot_data");
  }
  c.first_n = tf.choice("fewshot_sampler", {"random", "first_n"}, "random") == "first_n";
  const int64_t shots = tf.integer("shots").value_or(0);
  if (shots < 0 || shots > 1000) fail_one_line(tf.at("shots"), ": expected 0..1000, got ", shots);
  c.shots = int(shots);
  c.target_delimiter = tf.str("target_delimiter").value_or(" ");
  c.fewshot_delimiter = tf.str("fewshot_delimiter").value_or("\n\n");
  c.group_by = tf.str("group_by").value_or("");
  if (!c.group_by.empty() && c.group_by != "file" && !valid_path(c.group_by))
    fail_one_line(tf.at("group_by"), ": expected \"file\" or a field, got '", c.group_by, "'");
  if (const toml::node* n = tf.get("strip_prefix")) {
    const toml::table* t = n->as_table();
    if (!t)
      fail_one_line(tf.at("strip_prefix"), ": expected a table {field = \"prefix\"}, got ",
                    toml_kind(*n));
    for (const auto& [k, v] : *t) {
      if (!v.is_string())
        fail_one_line(tf.at(v), ": strip_prefix.", k.str(), ": expected a string");
      c.strip_prefix.emplace_back(std::string(k.str()), v.as_string()->get());
    }
  }
  if (const toml::node* n = tf.get("replace_suffix")) {
    const toml::table* t = n->as_table();
    if (!t)
      fail_one_line(tf.at("replace_suffix"),
                    ": expected a table {field = [[\"suffix\", \"replacement\"], ...]}");
    for (const auto& [k, v] : *t) {
      std::vector<std::pair<std::string, std::string>> pairs;
      const toml::array* a = v.as_array();
      for (size_t i = 0; a && i < a->size(); ++i) {
        const toml::array* p = (*a)[i].as_array();
        if (!p || p->size() != 2 || !(*p)[0].is_string() || !(*p)[1].is_string()) {
          a = nullptr;
          break;
        }
        pairs.emplace_back((*p)[0].as_string()->get(), (*p)[1].as_string()->get());
      }
      if (!a || pairs.empty())
        fail_one_line(tf.at(v), ": replace_suffix.", k.str(),
                      ": expected a list of [\"suffix\", \"replacement\"] pairs");
      c.replace_suffix.emplace_back(std::string(k.str()), std::move(pairs));
    }
  }
  if (auto d = tf.str("description")) c.description = Template(*d, tf.at("description"));
  if (auto t = tf.str("text")) c.text = Template(*t, tf.at("text"));
  if (auto t = tf.str("target")) c.target = Template(*t, tf.at("target"));

  if (bit == kLW) {
    if (!c.text || !c.target) fail_one_line(path, ": last_word tasks need text and target");
    return c;
  }
  if (bit == kGen) {
    if (!c.text || !c.target) fail_one_line(path, ": generate_until tasks need text and target");
    read_generation(tf, c);
    return c;
  }
  if (tf.get("contexts")) {
    // Partial scoring: one context per choice, one shared continuation.
    if (tf.get("choices") || c.text)
      fail_one_line(tf.at("contexts"), ": contexts replace text and choices (partial scoring)");
    if (!c.target)
      fail_one_line(tf.at("contexts"), ": contexts need a target (the shared continuation)");
    c.contexts = list_spec(tf, "contexts");
  } else {
    if (!tf.get("choices")) fail_one_line(path, ": missing key 'choices'");
    if (!c.text) fail_one_line(path, ": missing key 'text'");
    if (c.target)
      fail_one_line(tf.at("target"),
                    ": multiple_choice tasks answer with the gold choice; target is "
                    "for contexts or last_word");
    c.choices = list_spec(tf, "choices");
  }
  if (!tf.get("gold")) fail_one_line(path, ": missing key 'gold'");
  c.gold = gold_spec(tf);
  return c;
}

// ------------------------------------------------------------ data formats

std::vector<Row> read_jsonl(const std::string& path) {
  const std::string text = read_file(path, "data file");
  std::vector<Row> rows;
  size_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view s(text.data() + pos, end - pos);
    pos = end + 1;
    if (trim(s).empty()) continue;
    Row r;
    r.where = cat(path, ":", line);
    // Nesting is bounded while parsing: fields are copied recursively when
    // they are looked up, and a value nested 100,000 deep overflowed the stack.
    const json::parser_callback_t bounded = [&](int depth, json::parse_event_t, json&) {
      if (depth > 64) fail_one_line(r.where, ": JSON nested deeper than 64 levels");
      return true;
    };
    try {
      r.fields = json::parse(s, bounded);
    } catch (const json::parse_error& e) {
      fail_one_line(r.where, ": malformed JSON: ", e.what());
    }
    if (!r.fields.is_object())
      fail_one_line(r.where, ": expected a JSON object, got ", r.fields.type_name());
    rows.push_back(std::move(r));
  }
  return rows;
}

// RFC 4180 CSV: fields separated by commas, records by LF or CRLF; a quoted
// field may hold commas, line breaks and doubled quotes (""). The first record
// is the header naming the fields; blank lines are skipped.
std::vector<Row> read_csv(const std::string& path) {
  const std::string text = read_file(path, "data file");
  std::vector<std::vector<std::string>> records;
  std::vector<size_t> lines;  // first line of each record
  std::vector<std::string> rec;
  std::string field;
  bool in_quotes = false, quoted = false;  // inside quotes; the field was quoted
  size_t line = 1, rec_line = 1, quote_line = 1;
  auto end_field = [&] {
    rec.push_back(std::move(field));
    field.clear();
    quoted = false;
  };
  auto end_record = [&] {
    end_field();
    if (!(rec.size() == 1 && rec[0].empty())) {
      records.push_back(std::move(rec));
      lines.push_back(rec_line);
    }
    rec.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_quotes) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (ch == '"') {
        in_quotes = false;
      } else {
        line += ch == '\n';
        field += ch;
      }
      continue;
    }
    if (ch == ',') {
      end_field();
    } else if (ch == '\n' || (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      i += ch == '\r';
      end_record();
      rec_line = ++line;
    } else if (quoted) {
      fail_one_line(path, ":", line, ": unexpected text after a closing quote");
    } else if (ch == '"') {
      if (!field.empty()) fail_one_line(path, ":", line, ": quote inside an unquoted field");
      in_quotes = quoted = true;
      quote_line = line;
    } else {
      field += ch;
    }
  }
  if (in_quotes) fail_one_line(path, ":", quote_line, ": unterminated quoted field");
  if (!field.empty() || quoted || !rec.empty()) end_record();

  if (records.empty()) fail_one_line(path, ": empty CSV file (expected a header)");
  const std::vector<std::string>& header = records[0];
  std::vector<Row> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    Row row;
    row.where = cat(path, ":", lines[r]);
    if (records[r].size() != header.size())
      fail_one_line(row.where, ": ", records[r].size(), " fields, the header has ", header.size());
    row.fields = json::object();
    for (size_t f = 0; f < header.size(); ++f) row.fields[header[f]] = std::move(records[r][f]);
    rows.push_back(std::move(row));
  }
  return rows;
}

// PIQA's labels file: one 0/1 per line, the i-th for the i-th JSONL row.
void attach_labels(std::vector<Row>& rows, const std::string& labels_path) {
  const std::string text = read_file(labels_path, "labels file");
  size_t n = 0, line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string s = trim(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    if (s.empty()) continue;
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      fail_one_line(labels_path, ":", line, ": expected an integer label, got '", s, "'");
    if (n < rows.size()) rows[n].fields["label"] = v;
    ++n;
  }
  if (n != rows.size())
    fail_one_line(labels_path, ": ", n, " labels for ", rows.size(), " examples in the data file");
}

// Python's str.capitalize on ASCII: first letter upper, the rest lower.
std::string capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    s[i] = char(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

// The harness's HellaSwag clean-up: strip, " [title]" -> ". ", drop
// "[...]" spans (not across lines), one pass of "  " -> " ".
std::string hellaswag_clean(const std::string& in) {
  std::string s = trim(in);
  replace_all(s, " [title]", ". ");
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    out += s[i];
  }
  replace_all(out, "  ", " ");
  return out;
}

// Original HellaSwag rows gain the fields the harness derives: "query"
// ("<activity_label>: <ctx_a> <Ctx_b>", cleaned) and "choices" (cleaned endings).
void hellaswag_derive(std::vector<Row>& rows) {
  for (Row& r : rows) {
    const std::string ctx = need_text(r, "ctx_a") + " " + capitalize(need_text(r, "ctx_b"));
    r.fields["query"] = hellaswag_clean(need_text(r, "activity_label") + ": " + ctx);
    json choices = json::array();
    for (const std::string& e : ListSpec{"endings", {}}.eval(r))
      choices.push_back(hellaswag_clean(e));
    r.fields["choices"] = std::move(choices);
  }
}

// All rows of one split, through the task's format adapter.
std::vector<Row> read_rows(const Config& c, const std::vector<std::string>& files,
                           const std::string& labels) {
  std::vector<Row> rows;
  for (const std::string& f : files) {
    std::vector<Row> part = c.format == Format::Csv ? read_csv(f) : read_jsonl(f);
    if (c.format == Format::Piqa) attach_labels(part, labels);
    if (c.format == Format::HellaswagOriginal) hellaswag_derive(part);
    std::string file_group = fs::path(f).stem().string();
    if (const size_t u = file_group.rfind('_'); u != std::string::npos && u > 0)
      file_group.resize(u);
    for (Row& r : part) {
      for (const auto& [field, prefix] : c.strip_prefix) {
        const auto it = r.fields.find(field);
        if (it != r.fields.end() && it->is_string() &&
            it->get_ref<const std::string&>().rfind(prefix, 0) == 0)
          *it = it->get<std::string>().substr(prefix.size());
      }
      for (const auto& [field, pairs] : c.replace_suffix) {
        const auto it = r.fields.find(field);
        if (it == r.fields.end() || !it->is_string())
          fail_one_line(r.where, ": replace_suffix: field '", field, "' is missing or not text");
        std::string v = it->get<std::string>();
        bool done = false;
        for (const auto& [suffix, with] : pairs)
          if (!done && v.ends_with(suffix)) {
            v = v.substr(0, v.size() - suffix.size()) + with;
            done = true;
          }
        if (!done)
          fail_one_line(r.where, ": field '", field,
                        "' ends with none of the suffixes in replace_suffix");
        *it = std::move(v);
      }
      if (c.group_by == "file")
        r.group = file_group;
      else if (!c.group_by.empty())
        r.group = need_text(r, c.group_by);
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

// ------------------------------------------------------------ items

// One rendered example before few-shot assembly.
struct Item {
  std::string text;                  // context text (empty with per-choice contexts)
  std::vector<std::string> options;  // choices, or per-choice contexts
  std::string target;                // LastWord / partial scoring continuation
  int gold = 0;
  std::string group, where, description;
};

Item make_item(const Config& c, const Row& row) {
  Item it;
  it.group = row.group;
  it.where = row.where;
  if (c.description) it.description = c.description->render(row);
  if (c.text) it.text = c.text->render(row);
  if (c.target) it.target = c.target->render(row);
  if (c.kind == TaskKind::MultipleChoice) {
    it.options = c.contexts ? c.contexts->eval(row) : c.choices->eval(row);
    if (it.options.empty()) fail_one_line(row.where, ": no choices");
    it.gold = c.gold.eval(row);
    if (it.gold < 0 || size_t(it.gold) >= it.options.size())
      fail_one_line(row.where, ": gold ", it.gold, " out of range for ", it.options.size(),
                    c.contexts ? " contexts" : " choices");
  }
  return it;
}

// The item as a few-shot example: (question, answer); the shot's text is
// question + target_delimiter + answer.
std::pair<std::string, std::string> solved(const Config& c, const Item& it) {
  if (c.kind != TaskKind::MultipleChoice) return {it.text, it.target};
  if (c.contexts) return {it.options[size_t(it.gold)], it.target};
  return {it.text, it.options[size_t(it.gold)]};
}

// k distinct entries of `pool` (sorted indices), never `self`: the first k
// (first_n), or a partial Fisher-Yates shuffle driven by `rng`.
std::vector<int> draw_shots(const std::vector<int>& pool, int self, int k, bool first_n,
                            const PhiloxStream& rng) {
  std::vector<int> out;
  if (first_n) {
    for (int p : pool) {
      if (int(out.size()) == k) break;
      if (p != self) out.push_back(p);
    }
    return out;
  }
  // Positions of a virtual copy of `pool`; only swapped ones are stored.
  int64_t n = int64_t(pool.size());
  std::unordered_map<int64_t, int64_t> moved;
  auto at = [&](int64_t j) {
    const auto it = moved.find(j);
    return it == moved.end() ? j : it->second;
  };
  const auto self_it = std::lower_bound(pool.begin(), pool.end(), self);
  if (self >= 0 && self_it != pool.end() && *self_it == self) {
    const int64_t p = self_it - pool.begin();  // move self to the end, out of reach
    moved[p] = n - 1;
    moved[n - 1] = p;
    --n;
  }
  for (int j = 0; j < k; ++j) {
    const int64_t r = std::min(n - 1, j + int64_t(rng.uniform(uint64_t(j)) * double(n - j)));
    const int64_t vj = at(j), vr = at(r);
    moved[j] = vr;
    moved[r] = vj;
    out.push_back(pool[size_t(vr)]);
  }
  return out;
}

// ------------------------------------------------------------ text tasks

// Whitespace as Python's \s sees it in UTF-8 text: its byte length at `i`
// (0 when none), and the length of the one ending at `end`.
size_t space_at(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (is_ascii_space(char(c)) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  if (c == 0xc2 && (byte(i + 1) == 0x85 || byte(i + 1) == 0xa0)) return 2;
  if (c == 0xe1 && byte(i + 1) == 0x9a && byte(i + 2) == 0x80) return 3;
  if (c == 0xe2 && byte(i + 1) == 0x80 &&
      (byte(i + 2) <= 0x8a || byte(i + 2) == 0xa8 || byte(i + 2) == 0xa9 || byte(i + 2) == 0xaf) &&
      byte(i + 2) >= 0x80)
    return 3;
  if (c == 0xe2 && byte(i + 1) == 0x81 && byte(i + 2) == 0x9f) return 3;
  if (c == 0xe3 && byte(i + 1) == 0x80 && byte(i + 2) == 0x80) return 3;
  return 0;
}
size_t space_before(const std::string& s, size_t begin, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end - begin; ++len)
    if (space_at(s, end - len) == len) return len;
  return 0;
}

// re.sub(open \s* ([^close]*?) \s* close, open \1 close): trims the inside of
// each pair, scanning left to right.
void tidy_pairs(std::string& s, char open, char close) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t o = s.find(open, i);
    const size_t c = o == std::string::npos ? o : s.find(close, o + 1);
    if (c == std::string::npos) break;
    size_t a = o + 1, b = c;
    for (size_t n; a < b && (n = space_at(s, a)) > 0;) a += n;
    for (size_t n; b > a && (n = space_before(s, a, b)) > 0;) b -= n;
    out.append(s, i, o + 1 - i);
    out.append(s, a, b - a);
    out += close;
    i = c + 1;
  }
  out.append(s, i);
  s = std::move(out);
}

// The harness's wikitext_detokenizer, rule for rule (including its literal
// "/' [0-9]/" pattern, which matches a slash-quote-space-digit-slash run).
std::string wikitext_detokenize(std::string s) {
  replace_all(s, "s '", "s'");
  for (size_t i = 0; (i = s.find("/' ", i)) != std::string::npos;) {
    if (i + 4 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 3])) && s[i + 4] == '/') {
      s.replace(i, 5, "/'[0-9]/");
      i += 8;
    } else {
      i += 1;
    }
  }
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  for (const char* p : {" : ", " ; ", " . ", " ! ", " ? ", " , "})
    replace_all(s, p, std::string(p + 1));
  tidy_pairs(s, '(', ')');
  tidy_pairs(s, '[', ']');
  tidy_pairs(s, '{', '}');
  tidy_pairs(s, '"', '"');
  tidy_pairs(s, '\'', '\'');
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \xc2\xb0 ", "\xc2\xb0");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(text.substr(pos, nl - pos));
  lines.push_back(text.substr(pos));
  return lines;
}

// A top-level WikiText heading (" = Title = ", not " = = Section = = "), as
// the document-level WikiText builder recognises it.
bool wikitext_title(std::string line) {
  replace_all(line, "= = =", "===");
  replace_all(line, "= =", "==");
  line = trim(line);
  return line.size() >= 3 && line.rfind("= ", 0) == 0 &&
         line.compare(line.size() - 2, 2, " =") == 0;
}

std::vector<std::string> split_documents(const Config& c, const std::string& path) {
  std::string text = read_file(path, "data file");
  replace_all(text, "\r\n", "\n");
  std::vector<std::string> docs;
  auto add = [&](std::string d) {
    if (!trim(d).empty()) docs.push_back(std::move(d));
  };
  switch (c.split) {
    case Split::File:
      add(text);
      break;
    case Split::Paragraph: {
      std::string cur;
      for (const std::string& line : split_lines(text)) {
        if (trim(line).empty()) {
          add(std::move(cur));
          cur.clear();
        } else {
          cur += (cur.empty() ? "" : "\n") + line;
        }
      }
      add(std::move(cur));
      break;
    }
    case Split::Wikitext: {
      // Each article runs from its title line to the line before the next.
      std::string cur;
      bool first = true;
      for (const std::string& line : split_lines(text)) {
        if (wikitext_title(line)) {
          add(std::move(cur));
          cur.clear();
          first = true;
        }
        cur += (first ? "" : "\n") + line;
        first = false;
      }
      add(std::move(cur));
      break;
    }
    case Split::Separator: {
      size_t pos = 0;
      for (size_t hit; (hit = text.find(c.separator, pos)) != std::string::npos;
           pos = hit + c.separator.size())
        add(trim(std::string_view(text).substr(pos, hit - pos)));
      add(trim(std::string_view(text).substr(pos)));
      break;
    }
  }
  return docs;
}

}  // namespace

std::vector<std::string> list_tasks(const std::string& eval_dir) {
  std::error_code ec;
  if (!fs::is_directory(eval_dir, ec))
    fail_one_line("task directory '", eval_dir, "': no such directory");
  std::vector<std::string> names;
  for (fs::directory_iterator it(eval_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".toml" && it->is_regular_file())
      names.push_back(it->path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool task_runs_code(const std::string& eval_dir, const std::string& name) {
  const std::vector<std::string> known = list_tasks(eval_dir);
  if (std::find(known.begin(), known.end(), name) == known.end()) return false;
  return !read_config((fs::path(eval_dir) / (name + ".toml")).string()).execute.empty();
}

std::vector<std::string> all_tasks(const std::string& eval_dir) {
  std::vector<std::string> out;
  for (const std::string& name : list_tasks(eval_dir)) {
    const Config c = read_config((fs::path(eval_dir) / (name + ".toml")).string());
    if (c.comparable && c.execute.empty()) out.push_back(name);
  }
  return out;
}

TaskData load_task(const std::string& eval_dir, const std::string& name, int shots, uint64_t seed,
                   int64_t limit) {
  const std::vector<std::string> known = list_tasks(eval_dir);
  if (std::find(known.begin(), known.end(), name) == known.end())
    fail_one_line("unknown task '", name, "' (", eval_dir, " has: ", join(known, ", "), ")");
  const Config c = read_config((fs::path(eval_dir) / (name + ".toml")).string());

  TaskData task;
  task.name = name;
  task.description = c.summary;
  task.file = c.file;
  task.kind = c.kind;
  task.metrics = c.metrics;
  task.comparable = c.comparable;
  task.not_comparable_because = c.comparable_note;
  task.harness_task = c.harness_task;
  task.version = c.version;
  task.categories = c.categories;
  task.target_delimiter = c.target_delimiter;
  task.fewshot_delimiter = c.fewshot_delimiter;
  task.generation = c.generation;
  task.filters = c.filters;
  task.exact_match = c.exact_match;
  task.execute = c.execute;
  auto keep = [&](size_t n) { return limit > 0 ? std::min(n, size_t(limit)) : n; };

  if (c.kind == TaskKind::Perplexity) {
    for (const std::string& f : c.data)
      for (std::string& d : split_documents(c, f)) {
        // The harness counts the words and bytes of the page as stored, before
        // its detokenizer runs (wikitext's process_results).
        task.document_words.push_back(python_split_count(d));
        task.document_bytes.push_back(int64_t(d.size()));
        task.documents.push_back(c.detokenize_wikitext ? wikitext_detokenize(std::move(d))
                                                       : std::move(d));
      }
    if (task.documents.empty())
      fail_one_line(c.data_at, ": no documents (the text is empty or only whitespace)");
    task.documents.resize(keep(task.documents.size()));
    task.document_words.resize(task.documents.size());
    task.document_bytes.resize(task.documents.size());
    return task;  // no few-shot examples
  }

  std::vector<Item> items;
  for (const Row& r : read_rows(c, c.data, c.labels)) items.push_back(make_item(c, r));
  if (items.empty()) fail_one_line(c.data_at, ": no examples in the data");
  if (!c.categories.empty()) {  // every categorised group must exist (typos)
    std::set<std::string> groups;
    for (const Item& it : items) groups.insert(it.group);
    for (const auto& [g, category] : c.categories)
      if (!groups.count(g))
        fail_one_line(c.file, ": categories.", category, ": no group '", g, "' in the data");
  }
  const bool own_pool = c.fewshot_data.empty();
  std::vector<Item> pool_items;
  if (!own_pool)
    for (const Row& r : read_rows(c, c.fewshot_data, c.fewshot_labels))
      pool_items.push_back(make_item(c, r));
  const std::vector<Item>& pool = own_pool ? items : pool_items;

  std::map<std::string, std::vector<int>> pool_by_group;  // "" when ungrouped
  for (size_t i = 0; i < pool.size(); ++i) pool_by_group[pool[i].group].push_back(int(i));
  const std::vector<int> no_candidates;
  auto candidates = [&](const Item& it) -> const std::vector<int>& {
    const auto g = pool_by_group.find(it.group);
    return g == pool_by_group.end() ? no_candidates : g->second;
  };
  const size_t n = keep(items.size());

  // More shots than some example has candidates for: as many as all have.
  task.shots = shots < 0 ? c.shots : shots;
  for (size_t i = 0; i < n && task.shots > 0; ++i) {
    const size_t available = candidates(items[i]).size() - (own_pool ? 1 : 0);
    if (available == 0)
      fail_one_line(
          c.file, ": no few-shot examples for ", items[i].where,
          items[i].group.empty() ? std::string() : cat(" (group '", items[i].group, "')"));
    task.shots = std::min(task.shots, int(available));
  }

  std::vector<std::optional<std::pair<std::string, std::string>>> solved_cache(pool.size());
  task.examples.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    EvalExample ex;
    std::string prefix = it.description;
    ex.description = it.description;
    if (task.shots > 0) {
      const int self = own_pool ? int(i) : -1;
      const PhiloxStream rng(seed, kFewshotStream, uint32_t(i));
      for (int s : draw_shots(candidates(it), self, task.shots, c.first_n, rng)) {
        auto& shot = solved_cache[size_t(s)];
        if (!shot) shot = solved(c, pool[size_t(s)]);
        prefix += shot->first + c.target_delimiter + shot->second + c.fewshot_delimiter;
        ex.shots.push_back(*shot);
      }
    }
    ex.prefix_size = prefix.size();
    ex.gold = it.gold;
    ex.group = it.group;
    ex.where = it.where;
    if (c.kind == TaskKind::MultipleChoice) ex.choices = it.options;
    if (c.kind == TaskKind::Generate) {
      ex.requests.push_back({prefix + it.text, ""});
      ex.target = it.target;
      ex.prompt = it.text;
    } else if (c.kind == TaskKind::LastWord) {
      ex.requests.push_back({prefix + it.text, c.target_delimiter + it.target});
    } else if (c.contexts) {
      for (const std::string& ctx : it.options)
        ex.requests.push_back({prefix + ctx, c.target_delimiter + it.target});
    } else {
      const std::string context = prefix + it.text;
      for (const std::string& choice : it.options)
        ex.requests.push_back({context, c.target_delimiter + choice});
    }
    task.examples.push_back(std::move(ex));
  }
  return task;
}

void apply_chat_template(TaskData& task, const ChatOptions& chat) {
  if (!chat.apply) return;
  const ChatTemplate& t = chat.tmpl;
  for (EvalExample& ex : task.examples) {
    for (LlRequest& r : ex.requests) {
      const std::string question = r.context.substr(ex.prefix_size);
      std::vector<ContextPiece> pieces;
      auto add = [&](const std::string& text) {
        if (!text.empty()) pieces.push_back({text, false});
      };
      // The system message: the instruction, then the task's description.
      std::string system = chat.system_instruction;
      if (!ex.description.empty())
        system += (system.empty() ? "" : task.fewshot_delimiter) + ex.description;
      if (!system.empty()) {
        add(t.system_prefix);
        add(system);
        add(t.system_suffix);
      }
      if (chat.fewshot_as_multiturn) {
        for (const auto& [q, a] : ex.shots) {
          add(t.user_prefix);
          add(q);
          add(t.user_suffix);
          add(t.assistant_prefix);
          add(a);
          add(t.assistant_suffix);
          pieces.push_back({"", true});
        }
        add(t.user_prefix);
        add(question);
        add(t.user_suffix);
      } else {
        add(t.user_prefix);
        add(r.context.substr(ex.description.size()));  // the shots and the question
        add(t.user_suffix);
      }
      add(t.assistant_prefix);
      r.pieces = std::move(pieces);
      r.context.clear();
      for (const ContextPiece& p : r.pieces) r.context += p.eos ? "</s>" : p.text;
      // The answer starts the assistant's turn: no delimiter before it.
      if (r.continuation.starts_with(task.target_delimiter))
        r.continuation.erase(0, task.target_delimiter.size());
    }
    if (!ex.requests.empty()) ex.prefix_size = 0;
  }
}

}  // namespace strata
