// Reading a task file into a Config (task_file.h).
#include "eval/task_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "core/regex.h"
#include "core/text.h"
#include "core/toml_kind.h"

namespace strata::task_internal {
namespace {

namespace fs = std::filesystem;

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
        Regex::compile(f.pattern, cat(tf.at(e), ": filters: regex_pattern"));
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
          Regex::compile(re, at);
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

}  // namespace

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
      : bit == kGen ? std::vector<std::string>{"exact_match", "pass@1", "rouge2"}
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

}  // namespace strata::task_internal
