// Recipes: TOML files checked against a schema, composed through `base`,
// overridden by --set.
//
// Loading runs in four steps, each of which may throw a one-line strata::Error:
//   1. the schema is checked and its defaults parsed (a bad schema is a
//      programming error, reported as such);
//   2. the named file is parsed and every entry checked; its base chain is
//      applied first, then the file's own keys on top, key by key;
//   3. --set overrides are applied in the order given;
//   4. defaults fill the keys nobody set, then required keys are checked.
// Every value remembers where it came from, for error messages and where().
#include "train/recipe.h"

#include <toml++/toml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>
#include <variant>

#include "core/error.h"
#include "core/text.h"
#include "core/toml_kind.h"
#include "train/recipe_schema.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// A bare TOML key: what the schema's section and key names must be, so that
// to_toml() can print them unquoted.
bool is_bare_key(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!std::isalnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

// Parses `text` as one TOML value (held in a table under the key "v"), or
// returns nothing when it is not exactly one valid value.
std::optional<toml::table> parse_value(const std::string& text) {
  const std::string doc = "v = " + text;
  try {
    toml::table t = toml::parse(std::string_view(doc));
    if (t.size() == 1 && t.contains("v")) return t;
  } catch (const toml::parse_error&) {
  }
  return std::nullopt;
}

// Parses a whole recipe; syntax errors become "file:line:col: <description>".
toml::table parse_document(const std::string& text, const std::string& name) {
  try {
    return toml::parse(std::string_view(text), std::string_view(name));
  } catch (const toml::parse_error& e) {
    fail_one_line(name, ":", e.source().begin.line, ":", e.source().begin.column, ": ",
                  e.description());
  }
}

// Reads a whole file; returns "" on success, else why it could not be read.
std::string read_text(const std::string& path, std::string& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return "no such file";
  if (fs::is_directory(st)) return "it is a directory";
  // A device (base = "/dev/zero") would be read without end; a pipe is fine
  // (strata train <(...)).
  if (fs::is_character_file(st) || fs::is_block_file(st)) return "it is a device, not a file";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open it";
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return "read error";
  return "";
}

// The file's identity for cycle detection: the same file reached through
// different relative paths must compare equal.
std::string file_identity(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  return p.string();
}

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// The shortest decimal that reads back as exactly `x`: std::to_chars
// guarantees the round trip without the 17-digit noise of %.17g (0.1 prints
// as "0.1", 3e-4 as "3e-04"). A float must look like one or it would read back
// as an integer: "100" becomes "100.0". "inf" and "nan" are TOML floats too.
std::string format_float(double x) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Comments may not hold control characters (TOML); file names and --set
// arguments go into the to_toml() header as comments.
std::string comment_text(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

struct Recipe::Impl {
  using Data = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;
  struct Value {
    Data data;
    std::string where;   // "file:line", "--set" or "default"
    bool given = false;  // from a file or --set
  };
  // A recipe text to apply: the named file, a base, or from_string's text.
  struct Source {
    std::string name;  // as shown in messages: the path as given, or from_string's name
    std::string text;
    fs::path dir;    // where its `base` is resolved
    std::string id;  // file_identity(), for cycle detection
  };
  // One entry of a parsed file with its position. toml::table iterates in key
  // order; sorting entries by position reports a file's first problem first.
  struct Entry {
    enum Kind { TopLevel, InSection, EmptySection } kind;
    toml::source_position pos;
    std::string section, key;
    const toml::node* node;
  };

  std::vector<KeySpec> schema;
  std::unordered_map<std::string, size_t> index;  // path -> position in schema
  std::vector<std::optional<Data>> defaults;      // by schema position
  std::vector<std::optional<Value>> values;       // by schema position
  std::vector<std::string> files;                 // the named recipe first, then its bases
  std::vector<std::string> sets;                  // --set arguments, in order

  static std::shared_ptr<const Impl> build(const std::vector<KeySpec>& schema, const Source& source,
                                           const std::vector<std::string>& sets);
  explicit Impl(const std::vector<KeySpec>& schema);

  void apply_file(const Source& src, std::vector<const Source*>& chain);
  void apply_base(const Source& child, const std::string& base, uint32_t line,
                  std::vector<const Source*>& chain);
  void apply_set(const std::string& set);
  void finish();

  size_t position(const std::string& path, const char* caller) const;
  const Value& value(const std::string& path, KeyType type, const char* caller) const;
  std::string section_toml(const std::string& section) const;
};

namespace {

[[noreturn]] void type_error(const std::string& context, const KeySpec& spec,
                             const std::string& got) {
  fail_one_line(context, ": ", spec.path, ": expected ", key_type_name(spec.type), ", got ", got);
}

// Reads a TOML value as the schema type; `context` ("file:line", "--set '...'")
// prefixes the error.
Recipe::Impl::Data convert(const toml::node& node, const KeySpec& spec,
                           const std::string& context) {
  switch (spec.type) {
    case KeyType::Int:
      if (auto v = node.value_exact<int64_t>()) return *v;
      break;
    case KeyType::Float:  // an integer is a fine float: `lr = 1` means 1.0
      if (auto v = node.value_exact<double>()) return *v;
      if (auto v = node.value_exact<int64_t>()) return static_cast<double>(*v);
      break;
    case KeyType::Bool:
      if (auto v = node.value_exact<bool>()) return *v;
      break;
    case KeyType::String:
      if (auto v = node.value_exact<std::string>()) return *v;
      break;
    case KeyType::StringList:
      if (const toml::array* a = node.as_array()) {
        std::vector<std::string> list;
        for (const toml::node& item : *a) {
          auto s = item.value_exact<std::string>();
          if (!s) type_error(context, spec, cat("an array containing ", toml_kind(item)));
          list.push_back(*s);
        }
        return list;
      }
      break;
  }
  type_error(context, spec, toml_kind(node));
}

std::string format_value(const Recipe::Impl::Data& data) {
  struct Formatter {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return format_float(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return quote(v); }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> quoted;
      for (const std::string& s : v) quoted.push_back(quote(s));
      return "[" + join(quoted, ", ") + "]";
    }
  };
  return std::visit(Formatter{}, data);
}

// Every entry of a parsed recipe, in file order.
std::vector<Recipe::Impl::Entry> entries_of(const toml::table& doc) {
  using Entry = Recipe::Impl::Entry;
  std::vector<Entry> entries;
  for (auto&& [name, node] : doc) {
    const std::string top(name.str());
    const toml::table* section = node.as_table();
    if (!section) {
      entries.push_back({Entry::TopLevel, name.source().begin, "", top, &node});
    } else if (section->empty()) {
      entries.push_back({Entry::EmptySection, name.source().begin, top, "", &node});
    } else {
      for (auto&& [key, value] : *section) {
        entries.push_back(
            {Entry::InSection, key.source().begin, top, std::string(key.str()), &value});
      }
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.column < b.pos.column;
  });
  return entries;
}

const Recipe::Impl& loaded(const std::shared_ptr<const Recipe::Impl>& impl) {
  if (!impl) fail_one_line("Recipe: used before Recipe::load or Recipe::from_string");
  return *impl;
}

}  // namespace

// Checks the schema itself: its mistakes are the programmer's, so the messages
// say "recipe schema".
Recipe::Impl::Impl(const std::vector<KeySpec>& keys)
    : schema(keys), defaults(keys.size()), values(keys.size()) {
  for (size_t i = 0; i < schema.size(); ++i) {
    const KeySpec& spec = schema[i];
    const size_t dot = spec.path.find('.');
    if (dot == std::string::npos || !is_bare_key(spec.path.substr(0, dot)) ||
        !is_bare_key(spec.path.substr(dot + 1))) {
      fail_one_line("recipe schema: key '", spec.path,
                    "' must be section.key (two bare TOML keys joined by one dot)");
    }
    if (!index.emplace(spec.path, i).second) {
      fail_one_line("recipe schema: key '", spec.path, "' is declared twice");
    }
    if (spec.default_toml.empty()) continue;
    const std::optional<toml::table> parsed = parse_value(spec.default_toml);
    if (!parsed) {
      fail_one_line("recipe schema: the default of '", spec.path,
                    "' is not a TOML value: ", spec.default_toml);
    }
    defaults[i] = convert(*parsed->get("v"), spec, "recipe schema default");
  }
}

std::shared_ptr<const Recipe::Impl> Recipe::Impl::build(const std::vector<KeySpec>& schema,
                                                        const Source& source,
                                                        const std::vector<std::string>& sets) {
  auto impl = std::make_shared<Impl>(schema);
  std::vector<const Source*> chain;
  impl->apply_file(source, chain);
  for (const std::string& set : sets) impl->apply_set(set);
  impl->finish();
  return impl;
}

// Applies one recipe text: its base chain first, then its own keys over it.
// The file's own entries are checked before its base is read, so that a
// mistake in the named file is reported before any in its bases.
void Recipe::Impl::apply_file(const Source& src, std::vector<const Source*>& chain) {
  files.push_back(src.name);
  const toml::table doc = parse_document(src.text, src.name);
  std::vector<std::pair<size_t, Value>> own;
  std::optional<std::pair<std::string, uint32_t>> base;  // path, line
  for (const Entry& e : entries_of(doc)) {
    const std::string at = cat(src.name, ":", e.pos.line);
    const std::string path = e.section + "." + e.key;
    switch (e.kind) {
      case Entry::TopLevel:
        if (e.node->is_array_of_tables()) {
          fail_one_line(at, ": [[", e.key,
                        "]]: arrays of tables are not allowed (a recipe is [section] "
                        "tables of key = value)");
        }
        if (e.key != "base") {
          fail_one_line(at, ": '", e.key,
                        "' is outside any [section] (the only top-level key allowed is 'base')");
        }
        if (!e.node->is_string()) {
          fail_one_line(at, ": base: expected a string (the path of the base recipe), got ",
                        toml_kind(*e.node));
        }
        base.emplace(*e.node->value<std::string>(), e.pos.line);
        break;
      case Entry::EmptySection:
        if (std::none_of(schema.begin(), schema.end(),
                         [&](const KeySpec& k) { return section_part(k.path) == e.section; })) {
          fail_one_line(at, ": unknown section [", e.section, "]");
        }
        break;
      case Entry::InSection: {
        // [a.b] headers, dotted keys (x.y = 1) and inline tables all nest a
        // third level, which the schema cannot name.
        if (e.node->is_table()) {
          fail_one_line(
              at, ": ", path,
              ": nested tables are not allowed (a recipe is [section] tables of key = value)");
        }
        const auto it = index.find(path);
        if (it == index.end())
          fail_one_line(at, ": unknown key '", path, "'", key_suggestion(path, schema));
        own.emplace_back(it->second, Value{convert(*e.node, schema[it->second], at), at, true});
        break;
      }
    }
  }
  if (base) {
    chain.push_back(&src);
    apply_base(src, base->first, base->second, chain);
    chain.pop_back();
  }
  for (auto& [i, v] : own) values[i] = std::move(v);
}

// Loads the base that `child` names at `line`. The base path is relative to the
// child's directory and is shown lexically normalised ("recipes/../x.toml" as
// "x.toml"), still relative to where the user started.
void Recipe::Impl::apply_base(const Source& child, const std::string& base, uint32_t line,
                              std::vector<const Source*>& chain) {
  const std::string at = cat(child.name, ":", line);
  const fs::path given(base);
  Source src;
  src.name = (given.is_absolute() ? given : child.dir / given).lexically_normal().string();
  src.id = file_identity(src.name);
  src.dir = fs::path(src.name).parent_path();
  for (const Source* s : chain) {
    if (s->id != src.id) continue;
    std::vector<std::string> names;
    for (const Source* c : chain) names.push_back(c->name);
    names.push_back(src.name);
    fail_one_line(at, ": base recipes form a cycle: ", join(names, " -> "));
  }
  if (const std::string why = read_text(src.name, src.text); !why.empty()) {
    fail_one_line(at, ": cannot read base recipe '", src.name, "': ", why);
  }
  apply_file(src, chain);
}

// One "section.key=value" override. The value is TOML when it parses as one
// value, else the bare text. A string key takes the text as written even when
// it happens to parse as another type (`--set run.name=2024`), since a string
// is the only thing it can mean there.
void Recipe::Impl::apply_set(const std::string& set) {
  const std::string context = cat("--set '", set, "'");
  const size_t eq = set.find('=');
  if (eq == std::string::npos) fail_one_line(context, ": expected section.key=value");
  std::string path = set.substr(0, eq);
  path.erase(0, path.find_first_not_of(" \t"));
  path.erase(path.find_last_not_of(" \t") + 1);
  const auto it = index.find(path);
  if (it == index.end())
    fail_one_line(context, ": unknown key '", path, "'", key_suggestion(path, schema));
  const KeySpec& spec = schema[it->second];

  const std::string text = set.substr(eq + 1);
  std::optional<toml::table> parsed = parse_value(text);
  if (!parsed && spec.type == KeyType::Int) {  // digits that are no int64: say so
    std::string digits = text;
    digits.erase(0, digits.find_first_not_of(" \t"));
    digits.erase(digits.find_last_not_of(" \t") + 1);
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.erase(0, 1);
    if (!digits.empty() && digits.find_first_not_of("0123456789_") == std::string::npos)
      fail_one_line(context, ": ", path, ": ", text,
                    " is out of range for an integer (at most 9223372036854775807)");
  }
  if (!parsed || (spec.type == KeyType::String && !parsed->get("v")->is_string())) {
    // A bare string must still be valid UTF-8, or to_toml() would write a
    // recipe that cannot be read back; a quoted copy parses only if it is.
    if (!parse_value(quote(text))) fail_one_line(context, ": the value is not valid UTF-8");
    parsed.emplace();
    parsed->insert("v", text);
  }
  values[it->second] = Value{convert(*parsed->get("v"), spec, context), "--set", true};
  sets.push_back(set);
}

void Recipe::Impl::finish() {
  std::vector<std::string> missing;
  for (size_t i = 0; i < schema.size(); ++i) {
    if (!values[i] && defaults[i]) values[i] = Value{*defaults[i], "default", false};
    if (!values[i] && schema[i].required) missing.push_back("'" + schema[i].path + "'");
  }
  if (!missing.empty()) {
    const std::string first = missing.front().substr(1, missing.front().size() - 2);
    fail_one_line(files.front(), ": missing required key", missing.size() > 1 ? "s " : " ",
                  join(missing, ", "), " (set in the recipe or with --set ", first, "=...)");
  }
}

size_t Recipe::Impl::position(const std::string& path, const char* caller) const {
  const auto it = index.find(path);
  if (it == index.end()) {
    fail_one_line("Recipe::", caller, "('", path, "'): not a key of the recipe schema",
                  key_suggestion(path, schema));
  }
  return it->second;
}

// The value of a key for a typed getter; a caller asking for the wrong type or
// an unset key is a programming error in the caller.
const Recipe::Impl::Value& Recipe::Impl::value(const std::string& path, KeyType type,
                                               const char* caller) const {
  const size_t i = position(path, caller);
  const KeyType declared = schema[i].type;
  if (declared != type && !(type == KeyType::Float && declared == KeyType::Int)) {
    fail_one_line("Recipe::", caller, "('", path, "'): the schema declares ",
                  key_type_name(declared), ", not ", key_type_name(type));
  }
  if (!values[i]) {
    fail_one_line("Recipe::", caller, "('", path, "'): the key has no value (not set in ",
                  files.front(), " and no default)");
  }
  return *values[i];
}

// "[section]" and its keys with values, in schema order; "" when none has one.
std::string Recipe::Impl::section_toml(const std::string& section) const {
  std::string body;
  for (size_t i = 0; i < schema.size(); ++i) {
    if (section_part(schema[i].path) != section || !values[i]) continue;
    body += key_part(schema[i].path) + " = " + format_value(values[i]->data);
    if (values[i]->given) body += "  # " + comment_text(values[i]->where);
    body += "\n";
  }
  return body.empty() ? body : "[" + section + "]\n" + body;
}

Recipe Recipe::load(const std::string& path, const std::vector<std::string>& sets,
                    const std::vector<KeySpec>& schema) {
  Impl::Source src;
  src.name = path;
  if (const std::string why = read_text(path, src.text); !why.empty()) {
    fail_one_line("cannot read recipe '", path, "': ", why);
  }
  src.dir = fs::path(path).parent_path();
  src.id = file_identity(path);
  Recipe recipe;
  recipe.impl_ = Impl::build(schema, src, sets);
  return recipe;
}

Recipe Recipe::from_string(const std::string& toml_text, const std::string& name,
                           const std::vector<KeySpec>& schema, const std::vector<std::string>& sets,
                           const std::string& base_dir) {
  Impl::Source src;
  src.name = name;
  src.text = toml_text;
  src.dir = base_dir;
  src.id = "<text> " + name;  // no file: never equal to a file's identity
  Recipe recipe;
  recipe.impl_ = Impl::build(schema, src, sets);
  return recipe;
}

bool Recipe::has(const std::string& path) const {
  const Impl& r = loaded(impl_);
  return r.values[r.position(path, "has")].has_value();
}

bool Recipe::given(const std::string& path) const {
  const Impl& r = loaded(impl_);
  const auto& v = r.values[r.position(path, "given")];
  return v && v->given;
}

int64_t Recipe::get_int(const std::string& path) const {
  return std::get<int64_t>(loaded(impl_).value(path, KeyType::Int, "get_int").data);
}

double Recipe::get_float(const std::string& path) const {
  const Impl::Data& d = loaded(impl_).value(path, KeyType::Float, "get_float").data;
  if (const int64_t* i = std::get_if<int64_t>(&d)) return static_cast<double>(*i);
  return std::get<double>(d);
}

bool Recipe::get_bool(const std::string& path) const {
  return std::get<bool>(loaded(impl_).value(path, KeyType::Bool, "get_bool").data);
}

std::string Recipe::get_string(const std::string& path) const {
  return std::get<std::string>(loaded(impl_).value(path, KeyType::String, "get_string").data);
}

std::vector<std::string> Recipe::get_strings(const std::string& path) const {
  return std::get<std::vector<std::string>>(
      loaded(impl_).value(path, KeyType::StringList, "get_strings").data);
}

std::string Recipe::where(const std::string& path) const {
  const Impl& r = loaded(impl_);
  const auto& v = r.values[r.position(path, "where")];
  return v ? v->where : "unset";
}

void Recipe::fail(const std::string& path, const std::string& message) const {
  const Impl& r = loaded(impl_);
  const auto& v = r.values[r.position(path, "fail")];
  // An unset or defaulted key has no line to point at; the recipe file is the
  // best place, and the message says the value is the default.
  if (!v || v->where == "default")
    fail_one_line(r.files.front(), ": ", path, v ? " (default)" : "", ": ", message);
  fail_one_line(v->where, ": ", path, ": ", message);
}

std::string Recipe::to_toml() const {
  const Impl& r = loaded(impl_);
  std::string out = "# strata recipe, resolved: every key with a value, defaults included\n";
  out += "# from: " + comment_text(join(r.files, ", ")) + "\n";
  for (const std::string& set : r.sets) out += "# --set " + comment_text(set) + "\n";
  std::vector<std::string> sections;
  for (const KeySpec& spec : r.schema) {
    const std::string section = section_part(spec.path);
    if (std::find(sections.begin(), sections.end(), section) != sections.end()) continue;
    sections.push_back(section);
    if (std::string text = r.section_toml(section); !text.empty()) out += "\n" + text;
  }
  return out;
}

const std::vector<std::string>& Recipe::files() const { return loaded(impl_).files; }

}  // namespace strata
