// Whole-checkpoint checks for `strata inspect` (checkpoint_check.h).
#include "io/checkpoint_check.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "model/params.h"
#include "model/plan.h"

namespace strata {
namespace {

// The reader's messages start "checkpoint <file>: "; a problem list names
// the file once.
std::string without_file(const std::string& msg, const std::string& file) {
  const std::string head = "checkpoint " + file + ": ";
  return msg.rfind(head, 0) == 0 ? msg.substr(head.size()) : msg;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The number of values a shape claims, or -1 when it is negative or overflows.
int64_t claimed_values(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

// The layer indices named in /params ("model.layers.<i>.").
std::set<int64_t> layers_named(const TensorList& params) {
  std::set<int64_t> out;
  const std::string prefix = "model.layers.";
  for (const auto& [name, shape] : params) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string digits = name.substr(prefix.size(), dot - prefix.size());
    if (!digits.empty() && digits.size() < 10 &&
        digits.find_first_not_of("0123456789") == std::string::npos)
      out.insert(std::stoll(digits));
  }
  return out;
}

void check_tensors_against_config(const LlamaConfig& cfg, const TensorList& params,
                                  std::vector<std::string>& problems) {
  // Every layer has at least nine tensors: a config with more layers than
  // /params has tensors cannot match it (and its layout is not built).
  if (int64_t(cfg.num_hidden_layers) > int64_t(params.size())) {
    const std::set<int64_t> named = layers_named(params);
    problems.push_back(cat(
        "config: ", cfg.num_hidden_layers, " layers, but /params holds ", params.size(),
        " tensors",
        named.empty() ? std::string(" and no layer")
                      : cat(" for ", named.size(), named.size() == 1 ? " layer" : " layers"),
        ": no model can be loaded from it"));
    return;
  }
  const ParamLayout layout(cfg);
  const std::map<std::string, std::vector<int64_t>> have(params.begin(), params.end());
  int64_t missing = 0, mismatched = 0;
  std::string first_missing, first_mismatch;
  for (const ParamInfo& t : layout.tensors()) {
    const auto it = have.find(t.name);
    if (it == have.end()) {
      if (missing++ == 0) first_missing = t.name;
    } else if (it->second != t.full_shape) {
      if (mismatched++ == 0)
        first_mismatch = cat("'params/", t.name, "' has shape ", shape_text(it->second),
                             ", the config implies ", shape_text(t.full_shape));
    }
  }
  if (missing)
    problems.push_back(cat("config: ", missing, " of the ", layout.tensors().size(),
                           " tensors it implies are not in /params (the first: '", first_missing,
                           "'): no model can be loaded from it"));
  if (mismatched)
    problems.push_back(cat("tensor ", first_mismatch,
                           mismatched > 1 ? cat(" (and ", mismatched - 1, " more)") : ""));
}

}  // namespace

TensorVerdict verify_tensors(const CheckpointReader& reader) {
  TensorVerdict v;
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(reader.path(), ec);
  std::vector<float> buf;
  for (const char* group : {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
    if (std::string(group) != "params" && !reader.has_optimizer()) continue;
    for (const auto& [name, shape] : reader.list(group)) {
      ++v.tensors;
      // A shape is only a claim: more values than the file has bytes for
      // (two per bfloat16 value) is refused before a buffer is allocated.
      const int64_t n = claimed_values(shape);
      if (n < 0 || (!ec && uint64_t(n) > file_bytes / 2)) {
        v.problems.push_back(cat("tensor '", group, "/", name, "' claims shape ",
                                 shape_text(shape), ", more values than the file holds"));
        continue;
      }
      try {
        buf.resize(size_t(n));
        reader.read(group, {TensorRef{name, shape, buf.data()}});
        ++v.verified;
      } catch (const Error& e) {
        v.problems.push_back(without_file(e.what(), reader.path()));
      }
    }
  }
  return v;
}

std::vector<std::string> metadata_problems(const LlamaConfig& cfg, const std::string& plan,
                                           const nlohmann::json& state, const TensorList& params,
                                           bool has_optimizer, int64_t optimizer_step) {
  std::vector<std::string> problems;
  check_tensors_against_config(cfg, params, problems);
  try {
    (void)LayerPlan::parse(plan, cfg.num_hidden_layers);
  } catch (const Error& e) {
    problems.push_back(cat("plan: ", e.what()));
  }
  if (!state.is_object()) {
    problems.push_back("state: not a JSON object (a resume refuses it)");
  } else {
    for (const char* key : {"step", "tokens_seen"}) {
      const auto it = state.find(key);
      if (it != state.end() && (!it->is_number_integer() || it->get<int64_t>() < 0))
        problems.push_back(cat("state: '", key, "' must be a non-negative integer, got ",
                               it->dump(), " (a resume refuses it)"));
    }
  }
  if (has_optimizer && optimizer_step < 0)
    problems.push_back(cat("optimizer: step ", optimizer_step, " is negative"));
  for (std::string& p : problems) p = one_line(p);
  return problems;
}

}  // namespace strata
