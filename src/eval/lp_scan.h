// `strata lp scan` as a library: Layer Parallelism's search for where to
// pair layers. For every range length D and end index e, the perplexity of a
// text with layers [e - D, e) transformed (the rest standard): the table, the
// JSON and the chart of the paper's Figure 6, and the recommended range.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/svg_plot.h"
#include "eval/results.h"

namespace strata {

// The graph transforms of the paper's study applied to [s, e):
//   lp      Layer-Parallel pairs (the deployed graph; D even)
//   par     PAR pairs (each MLP sees only its own attention; D even)
//   stretch the whole range in parallel (one PAR group of D layers)
//   prune   the range removed (skip)
//   shuffle the range's layers in a new random order every forward pass
struct LpTransform {
  const char* name;
  int min_delta, step;  // the smallest range and the step between lengths
};
// The transform named `name`, or nullptr.
const LpTransform* find_lp_transform(const std::string& name);

// standard*s,<transform of [s, e)>,standard*(L-e) with its options.
std::string transform_plan(const std::string& transform, int layers, int s, int e, double alpha);

// Sequential layer steps left after transforming D layers: a pair or a group
// counts once, a pruned layer not at all.
int effective_depth(const std::string& transform, int layers, int delta);

struct LpScanOptions {
  std::string transform = "lp";
  std::vector<int> deltas;  // range lengths (checked against the transform)
  double alpha = 0.5;       // lp_alpha of the pairs
  double tolerance = 5;     // percent of perplexity the recommended range may cost
  bool progress = false;    // a line on stderr per range
};

struct LpScanResult {
  int layers = 0;
  PerplexityResult standard;  // the model untransformed
  std::vector<std::vector<double>>
      grid;             // grid[k][e]: ppl of D = deltas[k] ending at e (NaN: none)
  nlohmann::json json;  // tokens, ranges, best per D, recommended, ...
};

// Runs the scan: `perplexity(plan)` scores the text under a plan.
LpScanResult lp_scan(const std::function<PerplexityResult(const std::string& plan)>& perplexity,
                     int layers, const LpScanOptions& options);

// The table `strata lp scan` prints: one row per D, one column per end index,
// and the recommendation. `text` names the text scored.
std::string lp_scan_table(const LpScanResult& r, const LpScanOptions& options,
                          const std::string& text);

// The perplexity curves against the end index, one per D.
SvgChart lp_scan_chart(const LpScanResult& r, const LpScanOptions& options,
                       const std::string& checkpoint);

}  // namespace strata
