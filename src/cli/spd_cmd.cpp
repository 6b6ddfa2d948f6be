// `strata spd`: `strata spd <recipe.toml>` (cli/spd_pipeline.cpp) or `strata
// spd scan`, SPD's block-wise sync sensitivity (eval/spd_scan.h): table,
// JSON, SVG.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/text.h"
#include "model/plan.h"
#include "eval/spd_scan.h"

namespace strata::cli {

namespace {

int spd_scan(int argc, char** argv, int first) {
  Args args("strata spd scan",
            "SPD's block-wise sync sensitivity of a standard checkpoint at degree g: the "
            "perplexity of a text with blocks k..L-1 in SPD (zero-shot) for k = L..0, the "
            "sensitivity S_k = (PPL_k - PPL_{k+1}) / PPL_{k+1}, the blocks ranked by it, and the "
            "perplexity with the n least sensitive blocks in SPD for every budget n, as a table, "
            "JSON and an SVG plot.");
  add_model_options(args);
  add_scan_options(args, "write perplexity against the number of SPD blocks as SVG");
  args.option("degree", "G", "tensor-parallel degree whose sync points are dropped", "2");
  if (!args.parse(argc, argv, first)) return 0;
  const int g = args.get_int("degree");
  STRATA_CHECK(g >= 2,
               "strata spd scan: --degree must be at least 2 (degree 1 has no sync "
               "point to drop), got ",
               g);
  ScanInput in = load_scan_input(args, "strata spd scan");
  try {  // a degree the model cannot take fails now, not after the first pass
    in.lm.model->set_plan(LayerPlan::parse(cat("spd*", in.layers, ";spd_degree=", g), in.layers));
  } catch (const Error& e) {
    fail(cat("strata spd scan: --degree ", g, ": ", e.what()));
  }
  in.restore();
  const SpdScanResult r =
      strata::spd_scan([&](const std::string& plan) { return in.perplexity(plan); }, in.layers, g,
                       !args.has("quiet") && in.lm.root());
  in.restore();
  std::fputs(spd_scan_table(r, args.get("text")).c_str(), stdout);
  write_scan_outputs(args, r.json, spd_scan_chart(r, args.get("checkpoint")), r.standard_ppl(), in);
  return 0;
}

}  // namespace

int cmd_spd(int argc, char** argv, int first) {
  if (first < argc) {  // strata spd <recipe.toml> | --help-recipe
    const std::string a = argv[first];
    if (a == "--help-recipe" || (a.size() > 5 && a.compare(a.size() - 5, 5, ".toml") == 0))
      return spd_pipeline(argc, argv, first);
  }
  return run_subcommand(
      "strata spd",
      "usage: strata spd <recipe.toml> [--set section.key=value ...]\n"
      "       strata spd <command> [options]\n\n"
      "strata spd <recipe.toml> runs Algorithm 1 (sensitivity, zero-shot / block-to-block\n"
      "distillation / head grouping by class, SPD checkpoint, report); see strata spd\n"
      "recipe.toml --help and strata spd --help-recipe.\n\n"
      "SPD (Sync-Point Drop) tools (run a model with SPD blocks: --plan "
      "\"standard*s,spd*n;spd_degree=g\"):\n"
      "  scan   block-wise sync sensitivity and perplexity against the SPD budget\n",
      {{"scan", spd_scan}}, argc, argv, first);
}

}  // namespace strata::cli
