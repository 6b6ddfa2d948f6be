// `strata lp`: Layer Parallelism's tools. lp scan: for every range length D
// and end index e, the perplexity of a text with layers [e - D, e) run as lp
// pairs (or another transform of the study; the rest standard), written as a
// table, JSON, and an SVG of the paper's Figure 6 (eval/lp_scan.h). lp merge:
// layers [s, e) averaged into one (io/model_surgery.h).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/text.h"
#include "eval/lp_scan.h"
#include "io/model_surgery.h"

namespace strata::cli {

namespace {

// --deltas: every length the transform allows up to L by default.
std::vector<int> read_deltas(const Args& args, const LpTransform& tr, int L) {
  std::vector<int> deltas;
  if (args.get("deltas").empty()) {
    for (int d = tr.min_delta; d <= L; d += tr.step) deltas.push_back(d);
    return deltas;
  }
  for (const std::string& d : split_commas(args.get("deltas"))) {
    int v = 0;
    STRATA_CHECK(parse_int(d, &v) && v >= tr.min_delta && v % tr.step == 0 && v <= L,
                 "strata lp scan: --deltas: '", d, "' is not ",
                 tr.step == 2 ? "an even length" : "a length", " in ", tr.min_delta, "..", L,
                 " (--transform ", tr.name, ")");
    deltas.push_back(v);
  }
  return deltas;
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
  LpScanOptions o;
  o.transform = args.get("transform");
  const LpTransform* tr = find_lp_transform(o.transform);
  STRATA_CHECK(tr, "strata lp scan: unknown --transform '", o.transform,
               "' (lp, par, stretch, prune, shuffle)");
  o.alpha = args.get_double("alpha");
  STRATA_CHECK(o.alpha >= 0 && o.alpha <= 1, "strata lp scan: --alpha must be in [0, 1], got ",
               o.alpha);
  o.tolerance = args.get_double("tolerance");
  STRATA_CHECK(o.tolerance >= 0, "strata lp scan: --tolerance must be at least 0, got ",
               o.tolerance);
  ScanInput in = load_scan_input(args, "strata lp scan");
  o.deltas = read_deltas(args, *tr, in.layers);
  STRATA_CHECK(!o.deltas.empty(), "strata lp scan: a model of ", in.layers,
               " layer(s) has no range to pair (at least 2 layers)");
  o.progress = !args.has("quiet") && in.lm.root();
  const LpScanResult r =
      strata::lp_scan([&](const std::string& plan) { return in.perplexity(plan); }, in.layers, o);
  in.restore();
  std::fputs(lp_scan_table(r, o, args.get("text")).c_str(), stdout);
  write_scan_outputs(args, r.json, lp_scan_chart(r, o, args.get("checkpoint")), r.standard.ppl(),
                     in);
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
      .checkpoint_option("in.h5")
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
