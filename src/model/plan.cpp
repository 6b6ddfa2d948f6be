#include "model/plan.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "core/text.h"

namespace strata {

namespace {

// The plan's text trimmed of spaces and tabs.
std::string trim_blanks(const std::string& s) { return trim(s, " \t"); }

std::string known_kinds() {
  std::vector<std::string> names;
  for (const KindInfo* k : kind_table()) names.push_back(k->name);
  return join(names, ", ");
}

}  // namespace

LayerPlan LayerPlan::standard(int num_layers) {
  LayerPlan p;
  p.kinds.assign(size_t(num_layers), LayerKind::Standard);
  return p;
}

LayerPlan LayerPlan::parse(const std::string& text, int num_layers) {
  const std::string where = cat("layer plan '", text, "'");
  LayerPlan plan;
  const size_t semi = text.find(';');
  const std::string layers = text.substr(0, semi);
  std::stringstream ss(layers);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim_blanks(item);
    STRATA_CHECK(!item.empty(), where, ": empty entry");
    long count = 1;
    const auto star = item.find('*');
    if (star != std::string::npos) {
      const std::string n = trim_blanks(item.substr(star + 1));
      STRATA_CHECK(
          !n.empty() && n.size() <= 6 && n.find_first_not_of("0123456789") == std::string::npos,
          where, ": bad repeat count '", n, "' (a positive whole number)");
      count = std::stol(n);
      STRATA_CHECK(count >= 1, where, ": repeat count of '", item, "' must be at least 1");
      item = trim_blanks(item.substr(0, star));
    }
    const KindInfo* info = nullptr;
    for (const KindInfo* k : kind_table())
      if (item == k->name) info = k;
    STRATA_CHECK(info, where, ": unknown layer kind '", item, "' (known: ", known_kinds(), ")");
    STRATA_CHECK(plan.kinds.size() + size_t(count) <= 100000, where, ": too many layers");
    plan.kinds.insert(plan.kinds.end(), size_t(count), info->kind);
  }
  STRATA_CHECK(!layers.empty() || num_layers == 0, where, ": no layers");
  STRATA_CHECK(plan.num_layers() == num_layers, where, " has ", plan.num_layers(),
               " layers but the model has ", num_layers);
  if (semi != std::string::npos) {
    std::set<std::string> seen;
    for (size_t at = semi + 1;;) {
      const size_t next = text.find(';', at);
      item =
          trim_blanks(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
      at = next + 1;
      STRATA_CHECK(!item.empty(), where, ": empty option");
      const size_t eq = item.find('=');
      STRATA_CHECK(eq != std::string::npos, where, ": option '", item, "' is not key=value");
      const std::string key = trim_blanks(item.substr(0, eq)),
                        value = trim_blanks(item.substr(eq + 1));
      STRATA_CHECK(!key.empty() && !value.empty(), where, ": option '", item,
                   "' needs a key and a value");
      STRATA_CHECK(seen.insert(key).second, where, ": option '", key, "' given twice");
      const KindInfo* owner = nullptr;
      const KindOption* n = nullptr;
      for (const KindInfo* k : kind_table())
        for (const KindOption& o : k->options)
          if (key == o.key) owner = k, n = &o;
      STRATA_CHECK(owner, where, ": unknown option '", key, "'");
      bool used = false;
      for (LayerKind k : plan.kinds) used |= k == owner->kind;
      STRATA_CHECK(used, where, ": option '", key, "' belongs to ", owner->name,
                   " layers and the plan has none");
      {
        double v = 0;
        size_t used_chars = 0;
        try {
          v = std::stod(value, &used_chars);
        } catch (const std::exception&) {
          used_chars = 0;
        }
        STRATA_CHECK(used_chars == value.size() && v >= n->lo && v <= n->hi &&
                         (!n->whole || v == std::floor(v)),
                     where, ": option '", key, "' must be a ", n->whole ? "whole " : "",
                     "number in [", n->lo, ", ", n->hi, "], got '", value, "'");
      }
      plan.options.emplace_back(key, value);
      if (next == std::string::npos) break;
    }
  }
  // Units: a run of a kind with units of n layers must hold whole units.
  for (size_t l = 0; l < plan.kinds.size();) {
    size_t e = l;
    while (e < plan.kinds.size() && plan.kinds[e] == plan.kinds[l]) ++e;
    const KindInfo& info = kind_info(plan.kinds[l]);
    const int n = plan.unit_size(info.kind);
    STRATA_CHECK(n < 0 || (e - l) % size_t(n) == 0, where, ": the run of ", e - l, " ", info.name,
                 " layers from layer ", l, " is not a whole number of ", info.name, " units (", n,
                 " layers each)");
    l = e;
  }
  // A kind that reads the stream inside the unit below needs one there.
  for (size_t l = 1; l < plan.kinds.size(); ++l) {
    const KindInfo &k = kind_info(plan.kinds[l]), &below = kind_info(plan.kinds[l - 1]);
    STRATA_CHECK(!k.reads_stream_below || below.inner_stream, where, ": layer ", l, " is a ",
                 k.name, " layer right after a ", below.unit_noun, " (a ", k.name,
                 " layer reads the stream inside the unit below, which ", below.unit_article, " ",
                 below.unit_noun, " does not have)");
  }
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
  for (const auto& [k, v] : options) out += ";" + k + "=" + v;
  return out;
}

std::vector<PlanUnit> LayerPlan::units() const {
  std::vector<PlanUnit> u;
  for (int l = 0; l < num_layers();) {
    int size = unit_size(kinds[size_t(l)]);
    if (size < 0) {  // the whole run
      size = 0;
      while (l + size < num_layers() && kinds[size_t(l + size)] == kinds[size_t(l)]) ++size;
    }
    u.push_back(PlanUnit{kinds[size_t(l)], l, size});
    l += size;
  }
  return u;
}

bool LayerPlan::unit_boundary(int E) const {
  if (E < 0 || E > num_layers()) return false;
  for (const PlanUnit& u : units())
    if (E > u.first && E < u.end()) return false;
  return true;
}

void LayerPlan::check_exit(int E, const std::string& what) const {
  STRATA_CHECK(E >= 1 && E <= num_layers(), what, " ", E, " is outside 1..", num_layers());
  STRATA_CHECK(unit_boundary(E), what, " ", E, " falls inside a unit of plan '", to_string(),
               "' (exits are allowed only between units)");
}

bool LayerPlan::benchmark_only() const {
  for (LayerKind k : kinds)
    if (kind_info(k).benchmark_only) return true;
  return false;
}

void LayerPlan::check_not_benchmark_only(const std::string& what) const {
  for (size_t l = 0; l < kinds.size(); ++l)
    STRATA_CHECK(!kind_info(kinds[l]).benchmark_only, what, ": layer ", l, " of plan '",
                 to_string(), "' is '", kind_info(kinds[l]).name,
                 "', which only benchmarks may run (its outputs mean nothing: it skips the "
                 "all-reduces); use strata bench generate or strata bench model");
}

bool LayerPlan::plain() const {
  if (!options.empty()) return false;
  for (LayerKind k : kinds)
    if (k != LayerKind::Standard) return false;
  return true;
}

void LayerPlan::check_generation() const {
  for (LayerKind k : kinds) {
    const KindInfo& info = kind_info(k);
    STRATA_CHECK(!info.no_generation, "generation: plan '", to_string(), "' has ", info.name,
                 " layers, ", info.no_generation);
  }
}

void LayerPlan::check_model(const LlamaConfig& cfg, int tp) const {
  for (const KindInfo* k : kind_table())
    if (k->check && std::find(kinds.begin(), kinds.end(), k->kind) != kinds.end())
      k->check(*this, cfg, tp);
}

KindBuffers LayerPlan::buffers() const {
  KindBuffers b;
  for (LayerKind k : kinds) b |= kind_info(k).buffers;
  return b;
}

bool LayerPlan::spd_block(int layer) const {
  return layer >= 0 && layer < num_layers() && kind_info(kinds[size_t(layer)]).buffers.spd_block;
}

const std::string* LayerPlan::option(const std::string& key) const {
  for (const auto& [k, v] : options)
    if (k == key) return &v;
  return nullptr;
}

std::vector<TpShard> LayerPlan::tp_shards(int tp) const {
  std::vector<TpShard> s(kinds.size(), TpShard{0, tp});
  if (tp < 2 || tp % 2 != 0) return s;
  for (const PlanUnit& u : units())
    if (kind_info(u.kind).pair_on_tp_halves) {
      s[size_t(u.first)] = TpShard{0, tp / 2};
      s[size_t(u.first + 1)] = TpShard{tp / 2, tp / 2};
    }
  return s;
}

int LayerPlan::unit_size(LayerKind k) const {
  const KindInfo& info = kind_info(k);
  return info.unit_size != 0 ? info.unit_size : int(number(info.options.at(0).key, 2));
}

double LayerPlan::number(const std::string& key, double fallback) const {
  const std::string* v = option(key);
  return v ? std::stod(*v) : fallback;
}

}  // namespace strata
