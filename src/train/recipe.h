// TOML recipes: schema-checked, composable, with the source of every value.
//
// A recipe is a TOML file of tables ([run], [model], [training], ...). Every
// key must be declared in a schema (a list of KeySpec); unknown keys, wrong
// types and bad values are errors that name the file, the line and the key:
//   recipes/x.toml:12: unknown key 'training.stpes' (did you mean 'training.steps'?)
//   recipes/x.toml:5: training.steps: expected an integer, got a string
//
// Composition: a top-level `base = "other.toml"` (a path relative to the file
// that names it) loads that recipe first; the child's keys override the
// base's, key by key; bases may chain (cycles are an error). `--set
// section.key=value` overrides come last; the value is read as a TOML value
// (`--set training.steps=100`, `--set run.name="x"`), and a value that is not
// valid TOML is taken as a bare string (`--set run.name=x`). A string key
// takes the text as written even when it parses as another type
// (`--set run.name=2024` is the string "2024").
//
// The resolved recipe (every schema key with its final value, defaults
// included) prints as TOML with to_toml(); Recipe::from_string(to_toml())
// gives back an equal recipe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata {

enum class KeyType { Int, Float, Bool, String, StringList };

struct KeySpec {
  std::string path;  // "section.key" (exactly one dot)
  KeyType type;
  std::string default_toml;  // default as a TOML literal ("100", "3e-4", "true", "\"cosine\"",
                             // "[]"), or "" when the key has no default (optional unless required)
  std::string help;          // one line, for `strata train --help-recipe`
  bool required = false;     // error when absent after composition
};

// Every key of a schema by section with its type, default and help (the
// `--help-recipe` listings).
std::string schema_help(const std::vector<KeySpec>& schema);

class Recipe {
 public:
  // Loads `path` with its bases, applies `sets` ("section.key=value"), checks
  // everything against `schema`. Throws strata::Error naming file:line:key.
  static Recipe load(const std::string& path, const std::vector<std::string>& sets,
                     const std::vector<KeySpec>& schema);
  // The same from TOML text; `name` stands in for the file name in errors. A
  // `base` key is resolved relative to `base_dir`.
  static Recipe from_string(const std::string& toml_text, const std::string& name,
                            const std::vector<KeySpec>& schema,
                            const std::vector<std::string>& sets = {},
                            const std::string& base_dir = ".");

  // The accessors that take a key throw strata::Error for one not in the schema (a
  // programming error in the caller, reported with a did-you-mean).
  // True when the key has a value (given, or a default exists).
  bool has(const std::string& path) const;
  // True when the key was given by a recipe file or --set (not a default).
  bool given(const std::string& path) const;
  // Typed getters. Throw strata::Error if the key is unknown to the schema, of
  // another type, or has no value. get_float accepts integer values.
  int64_t get_int(const std::string& path) const;
  double get_float(const std::string& path) const;
  bool get_bool(const std::string& path) const;
  std::string get_string(const std::string& path) const;
  std::vector<std::string> get_strings(const std::string& path) const;

  // Where the value came from: "recipes/x.toml:12", "--set", or "default"
  // ("unset" for a key without a value).
  std::string where(const std::string& path) const;
  // Throws strata::Error("<where>: <path>: <message>") for a value that is
  // well-typed but unacceptable (e.g. a negative step count). For an unset
  // key <where> is the recipe file.
  [[noreturn]] void fail(const std::string& path, const std::string& message) const;

  // The resolved recipe as TOML: one table per section in schema order, every
  // key with a value, a comment header naming the source files.
  std::string to_toml() const;
  // The files that were read, the named recipe first, then its bases.
  const std::vector<std::string>& files() const;

  struct Impl;  // defined in recipe.cpp

 private:
  std::shared_ptr<const Impl> impl_;  // immutable once loaded: copies are cheap
};

// The Hugging Face config.json at `path`, which recipe key `key` names
// (model.config, spd.config): an unreadable or malformed file is that key's
// one-line error.
LlamaConfig read_model_config(const Recipe& r, const std::string& key, const std::string& path);

}  // namespace strata
