// `strata spd scan`: SPD's block-wise sync sensitivity (the SPD paper's
// section 4.2.1). For k = L..0 the perplexity of a text with blocks k..L-1 in
// SPD at degree g (zero-shot), S_k = (PPL_k - PPL_{k+1}) / PPL_{k+1}; the
// blocks ranked by S (least sensitive first); and the perplexity against the
// SPD budget: the n least sensitive blocks in SPD, n = 0..L. Table, JSON, SVG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/file.h"
#include "core/svg_plot.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "train/spd.h"

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
  const int L = in.layers;
  const bool progress = !args.has("quiet") && in.lm.root();
  Timer timer;
  int done = 0;
  const int total = 2 * L + 1;
  auto score = [&](const std::vector<bool>& spd, const char* what, int n) {
    const std::string plan = spd::plan_text(L, spd, g);
    const double ppl = in.perplexity(plan).ppl();
    ++done;
    if (progress)
      std::fprintf(stderr, "spd scan: %s %d: ppl %.4f  (%d/%d, %.0f s)\n", what, n, ppl, done,
                   total, timer.seconds());
    return std::make_pair(plan, ppl);
  };

  // Sensitivity: blocks k..L-1 in SPD, k = L (none) down to 0 (all).
  std::vector<double> ppl_from(size_t(L) + 1), sens(size_t(L), 0.0);
  nlohmann::json sensitivity = nlohmann::json::array();
  for (int k = L; k >= 0; --k) {
    std::vector<bool> spd(size_t(L), false);
    for (int l = k; l < L; ++l) spd[size_t(l)] = true;
    const auto [plan, ppl] = score(spd, "blocks from", k);
    ppl_from[size_t(k)] = ppl;
    nlohmann::json row = {{"k", k}, {"spd_blocks", L - k}, {"plan", plan}, {"ppl", ppl}};
    if (k < L) {
      sens[size_t(k)] = (ppl - ppl_from[size_t(k) + 1]) / ppl_from[size_t(k) + 1];
      row["sensitivity"] = sens[size_t(k)];
    }
    sensitivity.push_back(row);
  }
  std::vector<int> ranking(static_cast<size_t>(L));
  std::iota(ranking.begin(), ranking.end(), 0);
  std::stable_sort(ranking.begin(), ranking.end(),
                   [&](int a, int b) { return sens[size_t(a)] < sens[size_t(b)]; });
  // Budget: the n least sensitive blocks in SPD (n = 0 and L are measured above).
  std::vector<double> ppl_budget(size_t(L) + 1);
  ppl_budget[0] = ppl_from[size_t(L)];
  ppl_budget[size_t(L)] = ppl_from[0];
  nlohmann::json budget = nlohmann::json::array();
  std::vector<bool> spd(size_t(L), false);
  for (int n = 0; n <= L; ++n) {
    if (n > 0) spd[size_t(ranking[size_t(n - 1)])] = true;
    std::string plan = spd::plan_text(L, spd, g);
    if (n > 0 && n < L) std::tie(plan, ppl_budget[size_t(n)]) = score(spd, "budget", n);
    nlohmann::json blocks = nlohmann::json::array();
    for (int j = 0; j < n; ++j) blocks.push_back(ranking[size_t(j)]);
    budget.push_back(
        {{"n", n}, {"blocks", blocks}, {"plan", plan}, {"ppl", ppl_budget[size_t(n)]}});
  }
  in.restore();

  const double base = ppl_from[size_t(L)];
  std::printf("standard: ppl %.4f (%s); SPD degree %d\n", base, args.get("text").c_str(), g);
  std::printf("%-4s %-10s %-10s %s\n", "k", "spd_blocks", "ppl", "S_k");
  for (int k = L; k >= 0; --k) {
    std::printf("%-4d %-10d %-10.4f", k, L - k, ppl_from[size_t(k)]);
    if (k < L) std::printf(" %+.4f", sens[size_t(k)]);
    std::printf("\n");
  }
  std::printf("ranking (least sensitive first):");
  for (int l : ranking) std::printf(" %d", l);
  std::printf("\n%-6s %-10s %-9s %s\n", "budget", "ppl", "vs std", "blocks in SPD");
  for (int n = 0; n <= L; ++n) {
    std::printf("%-6d %-10.4f %+8.2f%% ", n, ppl_budget[size_t(n)],
                100 * (ppl_budget[size_t(n)] / base - 1));
    for (int j = 0; j < n; ++j) std::printf("%s%d", j ? "," : "", ranking[size_t(j)]);
    std::printf("%s\n", n == 0 ? "-" : "");
  }
  nlohmann::json out = {{"num_layers", L},      {"degree", g},
                        {"standard_ppl", base}, {"sensitivity", sensitivity},
                        {"ranking", ranking},   {"budget", budget}};
  SvgChart chart;
  chart.title = cat("SPD at degree ", g, ": perplexity (", args.get("checkpoint"), ")");
  chart.x_label = "blocks in SPD";
  SvgSeries ranked, suffix;
  ranked.label = "least sensitive first";
  suffix.label = "blocks k..L-1 (the scan)";
  for (int n = 0; n <= L; ++n) {
    ranked.points.push_back({double(n), ppl_budget[size_t(n)]});
    suffix.points.push_back({double(n), ppl_from[size_t(L - n)]});
  }
  chart.series = {ranked, suffix};
  write_scan_outputs(args, std::move(out), std::move(chart), base, in);
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
