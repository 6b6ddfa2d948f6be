#include "model/plan.h"

#include <sstream>

#include "core/error.h"

namespace strata {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Standard:
      return "standard";
  }
  return "?";
}

namespace {
LayerKind parse_kind(const std::string& s) {
  if (s == "standard") return LayerKind::Standard;
  fail(cat("layer plan: unknown layer kind '", s, "' (known: standard)"));
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
}  // namespace

LayerPlan LayerPlan::standard(int num_layers) {
  return LayerPlan{std::vector<LayerKind>(num_layers, LayerKind::Standard)};
}

LayerPlan LayerPlan::parse(const std::string& text, int num_layers) {
  LayerPlan plan;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    STRATA_CHECK(!item.empty(), "layer plan '", text, "': empty entry");
    int count = 1;
    const auto star = item.find('*');
    if (star != std::string::npos) {
      const std::string n = trim(item.substr(star + 1));
      STRATA_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos,
                   "layer plan '", text, "': bad repeat count '", n, "'");
      count = std::stoi(n);
      item = trim(item.substr(0, star));
    }
    const LayerKind k = parse_kind(item);
    plan.kinds.insert(plan.kinds.end(), count, k);
  }
  STRATA_CHECK(plan.num_layers() == num_layers, "layer plan '", text, "' has ", plan.num_layers(),
               " layers but the model has ", num_layers);
  return plan;
}

std::string LayerPlan::to_string() const {
  std::string out;
  for (size_t i = 0; i < kinds.size();) {
    size_t j = i;
    while (j < kinds.size() && kinds[j] == kinds[i]) ++j;
    if (!out.empty()) out += ",";
    out += layer_kind_name(kinds[i]);
    if (j - i > 1) out += "*" + std::to_string(j - i);
    i = j;
  }
  return out;
}

}  // namespace strata
