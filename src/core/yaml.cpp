#include "core/yaml.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <regex>

#include "core/error.h"
#include "core/file.h"

namespace strata {
namespace {

using json = nlohmann::ordered_json;

// A plain scalar as PyYAML (YAML 1.1) types it.
json plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  static const char* yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const char* no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* y : yes)
    if (s == y) return true;
  for (const char* n : no)
    if (s == n) return false;
  static const std::regex integer(R"([-+]?(0|[1-9][0-9_]*))");
  static const std::regex real(R"([-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?)");
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  if (std::regex_match(s, integer)) return std::strtoll(digits.c_str(), nullptr, 10);
  if (std::regex_match(s, real) && s != "." && s != "+." && s != "-.")
    return std::strtod(digits.c_str(), nullptr);
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return HUGE_VAL;
  if (s == "-.inf" || s == "-.Inf") return -HUGE_VAL;
  return s;
}

json convert(const YAML::Node& n, const std::string& name) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& tag = n.Tag();
      if (tag == "!function") return json{{"!function", n.Scalar()}};
      if (tag == "!") return n.Scalar();  // quoted
      if (tag == "?" || tag.empty() || tag == "tag:yaml.org,2002:str" || tag == "!!str")
        return tag == "?" || tag.empty() ? plain_scalar(n.Scalar()) : json(n.Scalar());
      fail(cat(name, ":", n.Mark().line + 1, ":", n.Mark().column + 1, ": unsupported tag '", tag,
               "'"));
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(convert(e, name));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        const json key = convert(kv.first, name);
        o[key.is_string() ? key.get<std::string>() : key.dump()] = convert(kv.second, name);
      }
      return o;
    }
  }
  return nullptr;
}

}  // namespace

json parse_yaml(const std::string& text, const std::string& name) {
  try {
    return convert(YAML::Load(text), name);
  } catch (const YAML::Exception& e) {
    fail(cat(name, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
}

json read_yaml_file(const std::string& path) { return parse_yaml(read_file(path, "YAML"), path); }

bool yaml_available() { return true; }

}  // namespace strata
