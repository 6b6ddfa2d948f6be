// `strata spd <recipe.toml>`: the SPD paper's Algorithm 1 on a standard
// checkpoint (train/spd_pipeline.h): the options, the recipe, the run.
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "core/text.h"
#include "train/recipe.h"
#include "train/spd_config.h"
#include "train/spd_pipeline.h"

namespace strata::cli {

namespace {

const char* kUsage =
    "usage: strata spd <recipe.toml> [--set section.key=value ...] [--threads N] [--quiet]\n"
    "                  [--dry-run [--plan-memory BYTES]]\n"
    "       strata spd --help-recipe\n\n"
    "Runs the SPD paper's Algorithm 1 on the standard checkpoint the recipe names:\n"
    "  1. sensitivity S_k of every block at spd.degree on calibration windows\n"
    "  2. the spd.budget least sensitive blocks, classified by S: ISB (S <= tau1),\n"
    "     SB (tau1 < S <= tau2), ESB (S > tau2)\n"
    "  3. ISB: zero-shot; SB: block-to-block distillation; ESB: head grouping, then\n"
    "     distillation (each block alone, on the original model's block inputs)\n"
    "  4. <out_dir>/spd.h5 (the SPD checkpoint), report.md, report.json, sensitivity.svg,\n"
    "     budget.svg: perplexity and tasks against the budget for zero-shot, +B2B, +HG\n"
    "Results are kept in <out_dir> as they are made: a rerun resumes (per block).\n"
    "Under mpirun -np N the distillations are spread over the N processes.\n\n"
    "options:\n"
    "  --set section.key=value  override a recipe key (repeatable)\n"
    "  --threads N              compute threads per process (0: all cores)\n"
    "  --quiet                  no progress lines\n"
    "  --dry-run                check the recipe and the checkpoint's shape, print the memory\n"
    "                           each stage needs; run nothing, write nothing\n"
    "  --plan-memory BYTES      with --dry-run: check against a device of that size (e.g. 80GB)\n"
    "                           instead of this machine; spd.config stands in for a checkpoint\n"
    "                           that is not here\n"
    "  --help-recipe            list every recipe key with its default\n";

}  // namespace

int spd_pipeline(int argc, char** argv, int first) {
  RecipeCommand rc;
  SpdRunOptions o;
  int threads = 0;
  auto own = [&](const std::string& a, int& i) {
    if (a == "--quiet") return o.quiet = true;
    if (a == "--dry-run") return o.dry_run = true;
    if (a == "--plan-memory") {
      STRATA_USAGE_CHECK(i + 1 < argc, "strata spd: --plan-memory needs a value");
      o.device_bytes = parse_bytes(argv[++i], "--plan-memory");
      STRATA_USAGE_CHECK(o.device_bytes > 0, "strata spd: --plan-memory must be > 0");
      return true;
    }
    if (a != "--threads") return false;
    STRATA_CHECK(i + 1 < argc, "strata spd: --threads needs a value");
    const std::string v = argv[++i];
    STRATA_CHECK(parse_int(v, &threads), "strata spd: --threads: expected an integer, got '", v,
                 "'");
    return true;
  };
  if (!parse_recipe_command("strata spd", kUsage, spd_recipe_schema(), argc, argv, first, rc, own))
    return 0;
  STRATA_USAGE_CHECK(o.dry_run || o.device_bytes == 0,
                     "strata spd: --plan-memory goes with --dry-run");
  const Recipe r = Recipe::load(rc.recipe, rc.sets, spd_recipe_schema());
  const SpdConfig config = read_spd_config(r);
  apply_threads(threads);
  o.recipe = rc.recipe;
  run_spd_pipeline(config, o);
  return 0;
}

}  // namespace strata::cli
