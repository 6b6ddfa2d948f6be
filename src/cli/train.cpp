// `strata train <recipe.toml> [--set section.key=value ...]`
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.h"
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
    "  --dry-run                check the recipe, its checkpoint and the model as a run would,\n"
    "                           print the resolved recipe as TOML and the memory estimate\n"
    "                           per process (weights, gradients, AdamW moments, activations)\n"
    "                           and exit; writes nothing\n"
    "  --help-recipe            list every recipe key with its default\n"
    "  --help                   show this help\n";

}  // namespace

int cmd_train(int argc, char** argv, int first) {
  RecipeCommand rc;
  bool dry_run = false;
  if (!parse_recipe_command(
          "strata train", kUsage, train_recipe_schema(), argc, argv, first, rc,
          [&](const std::string& a, int&) { return a == "--dry-run" && (dry_run = true); }))
    return 0;
  const Recipe recipe = Recipe::load(rc.recipe, rc.sets, train_recipe_schema());
  if (dry_run) {  // everything checked as a run would, nothing written
    const std::string memory = train_dry_run(recipe);
    std::fputs(recipe.to_toml().c_str(), stdout);
    std::fputs(memory.c_str(), stdout);
    return 0;
  }
  const TrainResult r = train(recipe);
  return r.interrupted ? 128 + r.stop_signal : 0;  // the shell's convention for a signal
}

}  // namespace strata::cli
