// The schema side of recipes (recipe.h): type names, did-you-mean
// suggestions for unknown keys, the --help-recipe listing, and the model
// configuration a recipe key names.
#include "train/recipe_schema.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"

namespace strata {

const char* key_type_name(KeyType t) {
  switch (t) {
    case KeyType::Int:
      return "an integer";
    case KeyType::Float:
      return "a float";
    case KeyType::Bool:
      return "a boolean";
    case KeyType::String:
      return "a string";
    case KeyType::StringList:
      return "a list of strings";
  }
  return "?";
}

namespace {

// Edit distance with transpositions (optimal string alignment): "stpes" is one
// edit from "steps", as a typist would count it.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string key_part(const std::string& path) { return path.substr(path.find('.') + 1); }
std::string section_part(const std::string& path) { return path.substr(0, path.find('.')); }

// " (did you mean 'training.steps'?)" for a likely typo of a schema key, or "".
// Up to a quarter of the characters may be wrong; failing that, the same key
// name in another section is suggested (the key went into the wrong table).
std::string key_suggestion(const std::string& path, const std::vector<KeySpec>& schema) {
  const KeySpec* best = nullptr;
  size_t best_distance = std::max<size_t>(1, path.size() / 4) + 1;
  for (const KeySpec& spec : schema) {
    // The distance is at least the difference in length: a long key (a
    // pasted line, a hostile --set) is not compared cell by cell.
    const size_t longer = std::max(path.size(), spec.path.size());
    if (longer - std::min(path.size(), spec.path.size()) >= best_distance) continue;
    const size_t d = edit_distance(path, spec.path);
    if (d < best_distance) best = &spec, best_distance = d;
  }
  if (!best) {
    for (const KeySpec& spec : schema) {
      if (key_part(spec.path) == key_part(path)) {
        best = &spec;
        break;
      }
    }
  }
  return best ? cat(" (did you mean '", best->path, "'?)") : std::string();
}

std::string schema_help(const std::vector<KeySpec>& schema) {
  auto short_name = [](KeyType t) {
    const char* const names[] = {"int", "float", "bool", "string", "list"};
    return names[int(t)];
  };
  std::string out, section;
  for (const KeySpec& k : schema) {
    const std::string s = section_part(k.path);
    if (s != section) out += cat("\n[", section = s, "]\n");
    // A help of several lines: the first in the table, the rest below it.
    const size_t nl = k.help.find('\n');
    char line[128];
    std::snprintf(line, sizeof line, "  %-26s %-6s %-12s ", key_part(k.path).c_str(),
                  short_name(k.type), k.default_toml.empty() ? "-" : k.default_toml.c_str());
    out += cat(line, k.help.substr(0, nl), k.required ? " (required)" : "", "\n");
    if (nl != std::string::npos) out += k.help.substr(nl + 1);
  }
  return out;
}

LlamaConfig read_model_config(const Recipe& r, const std::string& key, const std::string& path) {
  std::ifstream f(path);
  if (!f) r.fail(key, cat("cannot open ", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    r.fail(key, cat(path, " is not valid JSON: ", e.what()));
  }
  return LlamaConfig::from_json(j, path);
}

}  // namespace strata
