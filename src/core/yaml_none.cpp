// A build without yaml-cpp (libyaml-cpp-dev): YAML files are refused.
#include "core/error.h"
#include "core/yaml.h"

namespace strata {

nlohmann::ordered_json read_yaml_file(const std::string& path) {
  fail(cat(path,
           ": this strata was built without YAML support (install libyaml-cpp-dev and "
           "rebuild)"));
}

nlohmann::ordered_json parse_yaml(const std::string&, const std::string& name) {
  return read_yaml_file(name);
}

bool yaml_available() { return false; }

}  // namespace strata
