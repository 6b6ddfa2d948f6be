// YAML files as JSON values, for lm-evaluation-harness task files: mappings
// (keys in file order), sequences and scalars typed as PyYAML's full_load
// types plain ones (null, true/false/yes/no/on/off, integers, floats; a quoted
// scalar is always a string). A scalar tagged `!function` becomes
// {"!function": "module.name"} (the harness's Python callables, which strata
// cannot run, so its task loader can name them). yaml-cpp reads the file; a
// build without it refuses in one line.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace strata {

// Throws strata::Error "<path>:<line>:<column>: <what>" on a syntax error,
// "<path>: ..." when the file cannot be read.
nlohmann::ordered_json read_yaml_file(const std::string& path);
// The same for text in memory; `name` names it in errors.
nlohmann::ordered_json parse_yaml(const std::string& text, const std::string& name);
// True when this build reads YAML.
bool yaml_available();

}  // namespace strata
