// Fuzz target: training recipes (TOML), as `strata train <recipe.toml> [--set ...]
// [--dry-run]` reads them.
//
// Input: the recipe text, then optionally up to 8 `--set section.key=value`
// arguments, one per part (fuzz_util.h). The recipe is written to a file and
// loaded with Recipe::load against the training schema (src/cli/train.cpp),
// printed with to_toml() (--dry-run) and read back: the documented round trip
// (recipe.h) must give the same value for every key. Then the values that
// parse further are parsed as train's setup does: the layer plan (model.plan),
// the trainable/freeze patterns and the learning-rate schedule.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "fuzz_util.h"
#include "model/plan.h"
#include "train/recipe.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace {

using namespace strata;

// Every key's value as text, doubles bit-exact (NaNs of any sign alike).
std::string values_text(const Recipe& r) {
  std::string out;
  for (const KeySpec& k : train_recipe_schema()) {
    out += k.path + (r.has(k.path) ? "=" : " unset\n");
    if (!r.has(k.path)) continue;
    switch (k.type) {
      case KeyType::Int:
        out += std::to_string(r.get_int(k.path));
        break;
      case KeyType::Float: {
        const double v = r.get_float(k.path);
        uint64_t bits = 0;
        std::memcpy(&bits, &v, sizeof bits);
        out += std::isnan(v) ? std::string("nan") : std::to_string(bits);
        break;
      }
      case KeyType::Bool:
        out += r.get_bool(k.path) ? "true" : "false";
        break;
      case KeyType::String:
        out += "\"" + r.get_string(k.path) + "\"";
        break;
      case KeyType::StringList:
        for (const std::string& s : r.get_strings(k.path)) out += "\"" + s + "\",";
        break;
    }
    out += "\n";
  }
  return out;
}

// What train's setup (src/train/run_setup.cpp) parses out of the values,
// with its errors attributed to the key through Recipe::fail as there.
void parse_values(const Recipe& r) {
  const int64_t layers =
      r.has("model.num_hidden_layers") ? r.get_int("model.num_hidden_layers") : 2;
  if (!r.get_string("model.plan").empty() && layers >= 1 && layers <= 1024) {
    try {
      LayerPlan::parse(r.get_string("model.plan"), int(layers));
    } catch (const Error& e) {
      r.fail("model.plan", e.what());
    }
  }
  const std::vector<std::string> names = {"model.embed_tokens.weight",
                                          "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight",
                                          "model.layers.1.input_layernorm.weight",
                                          "model.layers.1.mlp.down_proj.weight",
                                          "model.norm.weight",
                                          "lm_head.weight"};
  resolve_trainable(names, r.get_strings("training.trainable"), r.get_strings("training.freeze"),
                    r.files().front());
  LrSchedule s;
  s.kind = r.get_string("lr_scheduler.kind");
  s.lr = r.get_float("optimizer.lr");
  s.min_lr = r.get_float("lr_scheduler.min_lr");
  s.warmup_steps = r.get_int("lr_scheduler.warmup_steps");
  const int64_t steps = r.get_int("training.steps");
  s.decay_steps =
      r.get_int("lr_scheduler.decay_steps") > 0 ? r.get_int("lr_scheduler.decay_steps") : steps;
  if (steps < 1 || s.decay_steps < 0 || s.warmup_steps < 0) return;  // refused before, in setup
  try {
    s.validate();
  } catch (const Error& e) {
    r.fail("lr_scheduler.kind", e.what());
  }
  for (int64_t step : {int64_t(0), s.warmup_steps, s.decay_steps, steps - 1}) (void)s.at(step);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::fuzz;
  const std::vector<std::string> parts = split_parts(data, size, 9);
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path = scratch.write("recipe.toml", parts[0]);
  const std::vector<std::string> sets(parts.begin() + 1, parts.end());
  return guarded([&] {
    const Recipe r = Recipe::load(path, sets, train_recipe_schema());
    const std::string resolved = r.to_toml();
    // The round trip recipe.h promises: an error here is not an expected
    // refusal but a finding.
    std::string again_text;
    try {
      const Recipe again = Recipe::from_string(resolved, "resolved.toml", train_recipe_schema());
      again_text = values_text(again);
    } catch (const Error& e) {
      finding(std::string("to_toml() output does not load back: ") + e.what() + "\n" + resolved);
    }
    check(again_text == values_text(r), "to_toml() round trip changed a value:\n" + resolved);
    parse_values(r);
  });
}
