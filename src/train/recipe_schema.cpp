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
