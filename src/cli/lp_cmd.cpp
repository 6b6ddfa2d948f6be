// `strata lp scan`: Layer Parallelism's search for where to pair layers. For
// every even range length D and end index e, the perplexity of a text with
// layers [e - D, e) run as lp pairs (the rest standard), written as a table,
// JSON, and an SVG of the paper's Figure 6 (perplexity against the end index,
// one curve per D).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "core/svg_plot.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "io/model_surgery.h"
#include "ops/backend.h"

namespace strata::cli {

namespace {

// The graph transforms of the paper's study applied to [s, e):
//   lp      Layer-Parallel pairs (the deployed graph; D even)
//   par     PAR pairs (each MLP sees only its own attention; D even)
//   stretch the whole range in parallel (one PAR group of D layers)
//   prune   the range removed (skip)
//   shuffle the range's layers in a new random order every forward pass
struct Transform {
  const char* name;
  int min_delta, step;
};
const Transform kTransforms[] = {
    {"lp", 2, 2}, {"par", 2, 2}, {"stretch", 2, 1}, {"prune", 1, 1}, {"shuffle", 2, 1}};

// standard*s,<transform of [s, e)>,standard*(L-e) with its options.
std::string transform_plan(const std::string& t, int L, int s, int e, double alpha) {
  std::string p;
  auto add = [&](const char* kind, int n) {
    if (n <= 0) return;
    if (!p.empty()) p += ",";
    p += std::string(kind) + (n > 1 ? "*" + std::to_string(n) : "");
  };
  const int D = e - s;
  add("standard", s);
  add(t == "lp" ? "lp" : t == "prune" ? "skip" : t == "shuffle" ? "shuffle" : "par", D);
  add("standard", L - e);
  if (D > 0 && t == "lp" && alpha != 0.5) p += cat(";lp_alpha=", alpha);
  if (D > 2 && t == "stretch") p += cat(";par_group=", D);
  return p;
}

int lp_scan(int argc, char** argv, int first) {
  Args args("strata lp scan",
            "Perplexity of a text for every range [e - D, e) (every allowed D and end index e) "
            "of a standard checkpoint run as Layer-Parallel pairs, or under the other "
            "transforms of the paper's study (PAR pairs, a whole stretch in parallel, pruning), "
            "as a table, JSON and an SVG plot (the paper's Figure 6): where to pair layers with "
            "the least loss.");
  add_model_options(args);
  add_scan_options(args, "write the perplexity curves as SVG");
  args.option("transform", "T",
              "what is done to [e - D, e): lp (Layer-Parallel pairs), par (PAR pairs), stretch "
              "(the whole range in parallel, PAR), prune (removed), shuffle (a new random order "
              "every forward pass)",
              "lp")
      .option("deltas", "LIST",
              "comma-separated range lengths (default: every length the transform allows up to "
              "L: even for lp and par)",
              "")
      .option("alpha", "A", "mixing weight of the pairs' MLP norms (lp_alpha)", "0.5")
      .option("tolerance", "P",
              "recommend the largest D whose best range costs at most P percent of perplexity",
              "5");
  if (!args.parse(argc, argv, first)) return 0;
  const std::string transform = args.get("transform");
  const Transform* tr = nullptr;
  for (const Transform& t : kTransforms)
    if (transform == t.name) tr = &t;
  STRATA_CHECK(tr, "strata lp scan: unknown --transform '", transform,
               "' (lp, par, stretch, prune, shuffle)");
  const double alpha = args.get_double("alpha");
  STRATA_CHECK(alpha >= 0 && alpha <= 1, "strata lp scan: --alpha must be in [0, 1], got ", alpha);
  const double tolerance = args.get_double("tolerance");
  STRATA_CHECK(tolerance >= 0, "strata lp scan: --tolerance must be at least 0, got ", tolerance);
  ScanInput in = load_scan_input(args, "strata lp scan");
  const int L = in.layers;
  std::vector<int> deltas;
  if (args.get("deltas").empty()) {
    for (int d = tr->min_delta; d <= L; d += tr->step) deltas.push_back(d);
  } else {
    for (const std::string& d : split_commas(args.get("deltas"))) {
      int v = 0;
      STRATA_CHECK(parse_int(d, &v) && v >= tr->min_delta && v % tr->step == 0 && v <= L,
                   "strata lp scan: --deltas: '", d, "' is not ",
                   tr->step == 2 ? "an even length" : "a length", " in ", tr->min_delta, "..", L,
                   " (--transform ", transform, ")");
      deltas.push_back(v);
    }
  }
  STRATA_CHECK(!deltas.empty(), "strata lp scan: a model of ", L,
               " layer(s) has no range to pair (at least 2 layers)");
  const bool progress = !args.has("quiet") && in.lm.root();
  // Sequential layer steps left: a pair or a group counts once, a pruned layer not at all.
  auto depth = [&](int d) {
    return transform == "prune"     ? L - d
           : transform == "stretch" ? L - d + 1
           : transform == "shuffle" ? L
                                    : L - d / 2;
  };
  int total = 0;
  for (int d : deltas) total += L - d + 1;
  Timer timer;
  const PerplexityResult base = in.perplexity(transform_plan(transform, L, 0, 0, alpha));
  if (progress)
    std::fprintf(stderr, "lp scan: %lld tokens, standard ppl %.4f; %d ranges\n",
                 (long long)base.tokens, base.ppl(), total);
  nlohmann::json ranges = nlohmann::json::array(), best = nlohmann::json::object();
  std::vector<std::vector<double>> grid(deltas.size(), std::vector<double>(size_t(L) + 1, NAN));
  int done = 0;
  for (size_t k = 0; k < deltas.size(); ++k) {
    const int d = deltas[k];
    int best_e = -1;
    for (int e = d; e <= L; ++e) {
      const std::string plan = transform_plan(transform, L, e - d, e, alpha);
      const PerplexityResult r = in.perplexity(plan);
      grid[k][size_t(e)] = r.ppl();
      ranges.push_back({{"start", e - d},
                        {"end", e},
                        {"delta", d},
                        {"effective_depth", depth(d)},
                        {"plan", plan},
                        {"ppl", r.ppl()},
                        {"nll", r.mean_nll()}});
      if (best_e < 0 || r.ppl() < grid[k][size_t(best_e)]) best_e = e;
      ++done;
      if (progress)
        std::fprintf(stderr, "lp scan: %s [%d, %d) D=%d ppl %.4f  (%d/%d, %.0f s)\n",
                     transform.c_str(), e - d, e, d, r.ppl(), done, total, timer.seconds());
    }
    best[std::to_string(d)] = {{"end", best_e},
                               {"start", best_e - d},
                               {"ppl", grid[k][size_t(best_e)]},
                               {"effective_depth", depth(d)}};
  }
  in.restore();
  // The recommendation: the largest D whose best range stays within the tolerance.
  nlohmann::json recommended = nullptr;
  for (int d : deltas) {
    const nlohmann::json& b = best[std::to_string(d)];
    if (b["ppl"].get<double>() <= base.ppl() * (1 + tolerance / 100)) {
      recommended = b;
      recommended["delta"] = d;
      recommended["plan"] =
          transform_plan(transform, L, b["start"].get<int>(), b["end"].get<int>(), alpha);
    }
  }

  // The table: one row per D, one column per end index.
  std::printf("standard: ppl %.4f over %lld tokens (%s)\n", base.ppl(), (long long)base.tokens,
              args.get("text").c_str());
  std::printf("%-6s %-6s %-9s %-10s", "delta", "depth", "best_end", "best_ppl");
  for (int e = tr->min_delta; e <= L; ++e) std::printf(" %9s", cat("e=", e).c_str());
  std::printf("\n");
  for (size_t k = 0; k < deltas.size(); ++k) {
    const auto& b = best[std::to_string(deltas[k])];
    std::printf("%-6d %-6d %-9d %-10.4f", deltas[k], depth(deltas[k]), b["end"].get<int>(),
                b["ppl"].get<double>());
    for (int e = tr->min_delta; e <= L; ++e) {
      if (std::isnan(grid[k][size_t(e)]))
        std::printf(" %9s", "-");
      else
        std::printf(" %9.3f", grid[k][size_t(e)]);
    }
    std::printf("\n");
  }
  if (recommended.is_null()) {
    std::printf("recommended: none (every range costs more than %g%% of perplexity)\n", tolerance);
  } else {
    const double ppl = recommended["ppl"].get<double>();
    std::printf(
        "recommended: D = %d at [%d, %d), ppl %.4f (%+.2f%%), effective depth %d: --plan "
        "\"%s\"\n",
        recommended["delta"].get<int>(), recommended["start"].get<int>(),
        recommended["end"].get<int>(), ppl, 100 * (ppl / base.ppl() - 1),
        recommended["effective_depth"].get<int>(), recommended["plan"].get<std::string>().c_str());
  }
  nlohmann::json out = {{"tokens", base.tokens},
                        {"num_layers", L},
                        {"transform", transform},
                        {"alpha", alpha},
                        {"standard_ppl", base.ppl()},
                        {"ranges", ranges},
                        {"best", best},
                        {"tolerance_percent", tolerance},
                        {"recommended", recommended}};
  SvgChart chart;
  chart.title = cat(transform, " of [e - D, e): perplexity (", args.get("checkpoint"), ")");
  chart.x_label = "end index e";
  for (size_t k = 0; k < deltas.size(); ++k) {
    SvgSeries s;
    s.label = cat("D = ", deltas[k]);
    for (int e = deltas[k]; e <= L; ++e) s.points.push_back({double(e), grid[k][size_t(e)]});
    chart.series.push_back(s);
  }
  write_scan_outputs(args, std::move(out), std::move(chart), base.ppl(), in);
  return 0;
}

// The paper's "merge" (section 3, c): layers [s, e) replaced by one layer
// with their mean (io/model_surgery.h).
int lp_merge(int argc, char** argv, int first) {
  Args args("strata lp merge",
            "Writes a checkpoint in which layers [s, e) of a standard checkpoint are replaced by "
            "one layer with their averaged weights (every tensor, norms and biases included): "
            "the merge of Layer Parallelism's study. Tokenizer and step are kept.");
  args.positional("in.h5", "strata checkpoint (plan all standard)")
      .positional("out.h5", "checkpoint to write")
      .option("range", "S:E", "the layers to merge, 0-based, E exclusive (at least 2 layers)");
  if (!args.parse(argc, argv, first)) return 0;
  STRATA_USAGE_CHECK(args.has("range"), "strata lp merge: --range S:E is required");
  const std::string in = args.get("in.h5"), out = args.get("out.h5");
  check_not_input(in, out, "strata lp merge");
  const std::string range = args.get("range");
  const size_t colon = range.find(':');
  int s = 0, e = 0;
  STRATA_CHECK(colon != std::string::npos && parse_int(range.substr(0, colon), &s) &&
                   parse_int(range.substr(colon + 1), &e),
               "strata lp merge: --range '", range, "' is not S:E (e.g. 2:5)");
  const int L = merge_layers(in, out, s, e, "strata lp merge", "--range " + range);
  std::printf("wrote %s: %d layers, layers %d..%d of %s (%d layers) merged into layer %d\n",
              out.c_str(), L - (e - s) + 1, s, e - 1, in.c_str(), L, s);
  return 0;
}

}  // namespace

int cmd_lp(int argc, char** argv, int first) {
  return run_subcommand(
      "strata lp",
      "usage: strata lp <command> [options]\n\n"
      "Layer Parallelism tools (run a model with pairs: --plan \"standard*s,lp*D,...\"):\n"
      "  scan   perplexity of every pairable range [e - D, e): table, JSON, SVG\n"
      "  merge  layers [s, e) replaced by one with their averaged weights (a new checkpoint)\n",
      {{"scan", lp_scan}, {"merge", lp_merge}}, argc, argv, first);
}

}  // namespace strata::cli
