// A small JSON Schema (draft-07) validator for tests: the keywords strata's
// schemas use ($ref to #/definitions, type, enum, required, properties,
// patternProperties, additionalProperties, items, minimum). Unknown keywords
// are an error, so a schema cannot silently ask for more than is checked.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::testing {

class JsonSchema {
 public:
  explicit JsonSchema(nlohmann::json schema) : root_(std::move(schema)) {}

  // Every violation, as "<path>: <what>"; empty when `doc` is valid.
  std::vector<std::string> validate(const nlohmann::json& doc) const {
    std::vector<std::string> errors;
    check(root_, doc, "$", errors);
    return errors;
  }

 private:
  static bool has_type(const nlohmann::json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    throw std::runtime_error("schema: unknown type '" + t + "'");
  }

  void check(const nlohmann::json& s, const nlohmann::json& v, const std::string& at,
             std::vector<std::string>& errors) const {
    static const std::vector<std::string> kKnown = {"$schema",
                                                    "title",
                                                    "description",
                                                    "$ref",
                                                    "type",
                                                    "enum",
                                                    "required",
                                                    "properties",
                                                    "patternProperties",
                                                    "additionalProperties",
                                                    "items",
                                                    "minimum",
                                                    "definitions"};
    for (const auto& [k, _] : s.items())
      if (std::find(kKnown.begin(), kKnown.end(), k) == kKnown.end())
        throw std::runtime_error("schema: unsupported keyword '" + k + "'");
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"];
      const std::string prefix = "#/definitions/";
      if (ref.rfind(prefix, 0) != 0) throw std::runtime_error("schema: unsupported $ref " + ref);
      check(root_["definitions"][ref.substr(prefix.size())], v, at, errors);
    }
    if (s.contains("type")) {
      const auto types = s["type"].is_array() ? s["type"] : nlohmann::json::array({s["type"]});
      bool ok = false;
      for (const auto& t : types) ok = ok || has_type(v, t.get<std::string>());
      if (!ok) errors.push_back(at + ": expected type " + s["type"].dump() + ", got " + v.dump());
    }
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
      errors.push_back(at + ": " + v.dump() + " is not one of " + s["enum"].dump());
    if (s.contains("minimum") && v.is_number() && v.get<double>() < s["minimum"].get<double>())
      errors.push_back(at + ": " + v.dump() + " is below " + s["minimum"].dump());
    if (v.is_array() && s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        check(s["items"], v[i], at + "[" + std::to_string(i) + "]", errors);
    if (!v.is_object()) return;
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>()))
          errors.push_back(at + ": missing required '" + r.get<std::string>() + "'");
    for (const auto& [key, value] : v.items()) {
      const std::string here = at + "." + key;
      bool matched = false;
      if (s.contains("properties") && s["properties"].contains(key)) {
        matched = true;
        check(s["properties"][key], value, here, errors);
      }
      if (s.contains("patternProperties"))
        for (const auto& [pattern, sub] : s["patternProperties"].items())
          if (std::regex_search(key, std::regex(pattern))) {
            matched = true;
            check(sub, value, here, errors);
          }
      if (!matched && s.contains("additionalProperties")) {
        const auto& add = s["additionalProperties"];
        if (add.is_boolean()) {
          if (!add.get<bool>()) errors.push_back(here + ": property not allowed");
        } else {
          check(add, value, here, errors);
        }
      }
    }
  }

  nlohmann::json root_;
};

}  // namespace strata::testing
