// What recipe.cpp asks of the schema (recipe_schema.cpp). Internal to
// src/train/; the public side is recipe.h.
#pragma once

#include <string>
#include <vector>

#include "train/recipe.h"

namespace strata {

// "an integer", "a list of strings", ...: the type a value must have.
const char* key_type_name(KeyType t);
// "steps" and "training" of "training.steps".
std::string key_part(const std::string& path);
std::string section_part(const std::string& path);
// " (did you mean 'training.steps'?)" for a likely typo of a schema key, or "".
// Up to a quarter of the characters may be wrong; failing that, the same key
// name in another section is suggested (the key went into the wrong table).
std::string key_suggestion(const std::string& path, const std::vector<KeySpec>& schema);

}  // namespace strata
