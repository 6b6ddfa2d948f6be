// `strata train <recipe.toml> [--set section.key=value ...]`
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "train/trainer.h"

namespace strata::cli {
namespace {

const char* kUsage =
    "usage: strata train <recipe.toml> [--set section.key=value ...] [--dry-run]\n"
    "       strata train --help-recipe\n\n"
    "Trains a model from a TOML recipe: pretraining from scratch, continual pretraining\n"
    "(model.init_from) or SFT (data.kind = \"sft\"). Progress goes to stderr; metrics to\n"
    "<run.dir>/metrics.jsonl; checkpoints to <run.dir>/checkpoints/. Re-running the same\n"
    "command resumes from the newest checkpoint (checkpoint.resume = \"auto\").\n\n"
    "options:\n"
    "  --set section.key=value  override a recipe key (repeatable; applied last)\n"
    "  --dry-run                resolve the recipe, print it as TOML and exit\n"
    "  --help-recipe            list every recipe key with its default\n"
    "  --help                   show this help\n";

const char* type_name(KeyType t) {
  switch (t) {
    case KeyType::Int:
      return "int";
    case KeyType::Float:
      return "float";
    case KeyType::Bool:
      return "bool";
    case KeyType::String:
      return "string";
    case KeyType::StringList:
      return "list";
  }
  return "?";
}

}  // namespace

int cmd_train(int argc, char** argv, int first) {
  std::string recipe_path;
  std::vector<std::string> sets;
  bool dry_run = false;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--help-recipe") {
      std::string section;
      for (const KeySpec& k : train_recipe_schema()) {
        const std::string s = k.path.substr(0, k.path.find('.'));
        if (s != section) std::printf("\n[%s]\n", (section = s).c_str());
        std::printf("  %-26s %-6s %-12s %s%s\n", k.path.substr(k.path.find('.') + 1).c_str(),
                    type_name(k.type), k.default_toml.empty() ? "-" : k.default_toml.c_str(),
                    k.help.c_str(), k.required ? " (required)" : "");
      }
      return 0;
    }
    if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--set") {
      STRATA_CHECK(i + 1 < argc, "strata train: --set needs section.key=value");
      sets.push_back(argv[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a.rfind("--", 0) == 0) {
      fail(cat("strata train: unknown option '", a, "' (see strata train --help)"));
    } else {
      STRATA_CHECK(recipe_path.empty(), "strata train: more than one recipe given ('", recipe_path,
                   "', '", a, "')");
      recipe_path = a;
    }
  }
  STRATA_CHECK(!recipe_path.empty(),
               "strata train: missing <recipe.toml> (see strata train --help)");
  const Recipe recipe = Recipe::load(recipe_path, sets, train_recipe_schema());
  if (dry_run) {
    std::fputs(recipe.to_toml().c_str(), stdout);
    return 0;
  }
  const TrainResult r = train(recipe);
  return r.interrupted ? 128 + r.stop_signal : 0;  // the shell's convention for a signal
}

}  // namespace strata::cli
