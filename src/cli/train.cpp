// `strata train <recipe.toml> [--set section.key=value ...]`
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace strata::cli {
namespace {

const char* kUsage =
    "usage: strata train <recipe.toml> [--set section.key=value ...] [--dry-run\n"
    "                    [--plan-memory BYTES [--world N] [--node-devices N]\n"
    "                    [--max-pp N]]]\n"
    "       strata train --help-recipe\n\n"
    "Trains a model from a TOML recipe: pretraining from scratch, continual pretraining\n"
    "(model.init_from) or SFT (data.kind = \"sft\"). Progress goes to stderr; metrics to\n"
    "<run.dir>/metrics.jsonl; checkpoints to <run.dir>/checkpoints/. Re-running the same\n"
    "command resumes from the newest checkpoint (checkpoint.resume = \"auto\").\n\n"
    "options:\n"
    "  --set section.key=value  override a recipe key (repeatable; applied last)\n"
    "  --section.key VALUE      the same, as torchtitan writes it (--training.steps 100;\n"
    "                           a bare --section.key sets true)\n"
    "  --dry-run                check the recipe, its checkpoint and the model as a run would,\n"
    "                           print the resolved recipe as TOML and the memory estimate\n"
    "                           per process (weights, gradients, AdamW moments, activations)\n"
    "                           and exit; writes nothing\n"
    "  --plan-memory BYTES      with --dry-run: instead of this machine's memory, rank the\n"
    "                           layouts (tp, pp and its schedule, ZeRO, training.recompute,\n"
    "                           micro-batch) that fit devices of BYTES (e.g. 80GB) each, by a\n"
    "                           stated cost model\n"
    "  --world N                the number of devices for --plan-memory (default: the\n"
    "                           processes of this run)\n"
    "  --node-devices N         devices per node for --plan-memory (default 8): tensor\n"
    "                           parallelism across nodes costs more, pipeline stages do not\n"
    "  --max-pp N               the largest pipeline degree --plan-memory searches (default:\n"
    "                           any; 1 plans without pipeline parallelism)\n"
    "  --help-recipe            list every recipe key with its default\n"
    "  --help                   show this help\n";

// Planning ranks every parallel layout itself: the recipe's own (made for
// its cluster) is set aside so that one process can resolve it, and checked
// against the others afterwards.
RecipeLayout set_layout_aside(RecipeCommand& rc) {
  const Recipe as_written = Recipe::load(rc.recipe, rc.sets, train_recipe_schema());
  const ParallelSection p = read_train_config(as_written).parallel;
  RecipeLayout own;
  own.tp = p.tp;
  own.dp = p.dp;
  own.zero = p.zero;
  own.pp = p.pp;
  own.schedule = p.schedule;
  own.virtual_stages = p.virtual_stages;
  for (const char* k :
       {"parallelism.tp=1", "parallelism.dp=0", "parallelism.pp=1", "parallelism.virtual_stages=1",
        "parallelism.schedule=\"1f1b\"", "parallelism.stages=\"\""})
    rc.sets.push_back(k);
  return own;
}

}  // namespace

int cmd_train(int argc, char** argv, int first) {
  RecipeCommand rc;
  bool dry_run = false;
  PlanRequest plan;
  bool planning_option = false;  // --world, --node-devices or --max-pp
  auto count = [&](const std::string& flag, const std::string& v) {
    const int n = std::atoi(v.c_str());
    STRATA_USAGE_CHECK(n >= 1 && v.find_first_not_of("0123456789") == std::string::npos,
                       "strata train: ", flag, " expects a positive integer, got '", v, "'");
    return n;
  };
  if (!parse_recipe_command(
          "strata train", kUsage, train_recipe_schema(), argc, argv, first, rc,
          [&](const std::string& a, int& i) {
            if (a == "--dry-run") return dry_run = true;
            if (a != "--plan-memory" && a != "--world" && a != "--node-devices" && a != "--max-pp")
              return false;
            STRATA_USAGE_CHECK(i + 1 < argc, "strata train: ", a, " needs a value");
            const std::string v = argv[++i];
            if (a == "--world") plan.world = count(a, v);
            if (a == "--node-devices") plan.node_devices = count(a, v);
            if (a == "--max-pp") plan.max_pp = count(a, v);
            planning_option |= a != "--plan-memory";
            if (a == "--plan-memory") {
              plan.device_bytes = parse_bytes(v, "--plan-memory");
              STRATA_USAGE_CHECK(plan.device_bytes > 0, "strata train: --plan-memory must be > 0");
            }
            return true;
          }))
    return 0;
  STRATA_USAGE_CHECK(dry_run || (plan.device_bytes == 0 && !planning_option),
                     "strata train: --plan-memory, --world, --node-devices and --max-pp go with "
                     "--dry-run");
  STRATA_USAGE_CHECK(!planning_option || plan.device_bytes > 0,
                     "strata train: --world, --node-devices and --max-pp need --plan-memory");
  if (plan.device_bytes > 0) plan.own = set_layout_aside(rc);
  const Recipe recipe = Recipe::load(rc.recipe, rc.sets, train_recipe_schema());
  if (dry_run) {  // everything checked as a run would, nothing written
    std::string refusal;
    const std::string memory = train_dry_run(recipe, plan, &refusal);
    std::fputs(recipe.to_toml().c_str(), stdout);
    std::fputs(memory.c_str(), stdout);
    std::fflush(stdout);
    if (!refusal.empty()) fail_one_line(refusal);  // the table above says what fits instead
    return 0;
  }
  const TrainResult r = train(recipe);
  return r.interrupted ? 128 + r.stop_signal : 0;  // the shell's convention for a signal
}

}  // namespace strata::cli
