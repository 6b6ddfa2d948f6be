// `strata spd scan` as a library: SPD's block-wise sync sensitivity (the SPD
// paper's section 4.2.1). For k = L..0 the perplexity of a text with blocks
// k..L-1 in SPD at degree g (zero-shot), S_k = (PPL_k - PPL_{k+1}) / PPL_{k+1};
// the blocks ranked by S (least sensitive first); and the perplexity against
// the SPD budget: the n least sensitive blocks in SPD, n = 0..L.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/svg_plot.h"
#include "eval/results.h"

namespace strata {

struct SpdScanResult {
  int layers = 0, degree = 0;
  std::vector<double> ppl_from;    // [k]: blocks k..L-1 in SPD (k = L: the standard model)
  std::vector<double> sens;        // [k]: S_k
  std::vector<int> ranking;        // least sensitive first
  std::vector<double> ppl_budget;  // [n]: the n least sensitive blocks in SPD
  nlohmann::json json;             // sensitivity, ranking, budget rows with their plans
  double standard_ppl() const { return ppl_from[size_t(layers)]; }
};

// Runs the scan at `degree`: `perplexity(plan)` scores the text under a
// plan; with `progress`, a line on stderr per plan scored.
SpdScanResult spd_scan(const std::function<PerplexityResult(const std::string& plan)>& perplexity,
                       int layers, int degree, bool progress);

// The tables `strata spd scan` prints (`text` names the text scored).
std::string spd_scan_table(const SpdScanResult& r, const std::string& text);

// Perplexity against the number of SPD blocks: the ranked budget and the scan's suffixes.
SvgChart spd_scan_chart(const SpdScanResult& r, const std::string& checkpoint);

}  // namespace strata
