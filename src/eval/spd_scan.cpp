// SPD's block-wise sensitivity scan (spd_scan.h).
#include "eval/spd_scan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <tuple>

#include "core/text.h"
#include "core/timer.h"
#include "model/kinds/kinds.h"

namespace strata {

SpdScanResult spd_scan(const std::function<PerplexityResult(const std::string& plan)>& perplexity,
                       int L, int g, bool progress) {
  SpdScanResult r;
  r.layers = L;
  r.degree = g;
  Timer timer;
  int done = 0;
  const int total = 2 * L + 1;
  auto score = [&](const std::vector<bool>& spd, const char* what, int n) {
    const std::string plan = spd_plan_text(L, spd, g);
    const double ppl = perplexity(plan).ppl();
    ++done;
    if (progress)
      std::fprintf(stderr, "spd scan: %s %d: ppl %.4f  (%d/%d, %.0f s)\n", what, n, ppl, done,
                   total, timer.seconds());
    return std::make_pair(plan, ppl);
  };
  // Sensitivity: blocks k..L-1 in SPD, k = L (none) down to 0 (all).
  r.ppl_from.assign(size_t(L) + 1, 0.0);
  r.sens.assign(size_t(L), 0.0);
  nlohmann::json sensitivity = nlohmann::json::array();
  for (int k = L; k >= 0; --k) {
    std::vector<bool> spd(size_t(L), false);
    for (int l = k; l < L; ++l) spd[size_t(l)] = true;
    const auto [plan, ppl] = score(spd, "blocks from", k);
    r.ppl_from[size_t(k)] = ppl;
    nlohmann::json row = {{"k", k}, {"spd_blocks", L - k}, {"plan", plan}, {"ppl", ppl}};
    if (k < L) {
      r.sens[size_t(k)] = (ppl - r.ppl_from[size_t(k) + 1]) / r.ppl_from[size_t(k) + 1];
      row["sensitivity"] = r.sens[size_t(k)];
    }
    sensitivity.push_back(row);
  }
  r.ranking.resize(size_t(L));
  std::iota(r.ranking.begin(), r.ranking.end(), 0);
  std::stable_sort(r.ranking.begin(), r.ranking.end(),
                   [&](int a, int b) { return r.sens[size_t(a)] < r.sens[size_t(b)]; });
  // Budget: the n least sensitive blocks in SPD (n = 0 and L are measured above).
  r.ppl_budget.assign(size_t(L) + 1, 0.0);
  r.ppl_budget[0] = r.ppl_from[size_t(L)];
  r.ppl_budget[size_t(L)] = r.ppl_from[0];
  nlohmann::json budget = nlohmann::json::array();
  std::vector<bool> spd(size_t(L), false);
  for (int n = 0; n <= L; ++n) {
    if (n > 0) spd[size_t(r.ranking[size_t(n - 1)])] = true;
    std::string plan = spd_plan_text(L, spd, g);
    if (n > 0 && n < L) std::tie(plan, r.ppl_budget[size_t(n)]) = score(spd, "budget", n);
    nlohmann::json blocks = nlohmann::json::array();
    for (int j = 0; j < n; ++j) blocks.push_back(r.ranking[size_t(j)]);
    budget.push_back(
        {{"n", n}, {"blocks", blocks}, {"plan", plan}, {"ppl", r.ppl_budget[size_t(n)]}});
  }
  r.json = {{"num_layers", L},
            {"degree", g},
            {"standard_ppl", r.standard_ppl()},
            {"sensitivity", sensitivity},
            {"ranking", r.ranking},
            {"budget", budget}};
  return r;
}

std::string spd_scan_table(const SpdScanResult& r, const std::string& text) {
  const int L = r.layers;
  const double base = r.standard_ppl();
  std::string o;
  char line[256];
  std::snprintf(line, sizeof line, "standard: ppl %.4f (%s); SPD degree %d\n", base, text.c_str(),
                r.degree);
  o += line;
  std::snprintf(line, sizeof line, "%-4s %-10s %-10s %s\n", "k", "spd_blocks", "ppl", "S_k");
  o += line;
  for (int k = L; k >= 0; --k) {
    std::snprintf(line, sizeof line, "%-4d %-10d %-10.4f", k, L - k, r.ppl_from[size_t(k)]);
    o += line;
    if (k < L) {
      std::snprintf(line, sizeof line, " %+.4f", r.sens[size_t(k)]);
      o += line;
    }
    o += "\n";
  }
  o += "ranking (least sensitive first):";
  for (int l : r.ranking) o += cat(" ", l);
  std::snprintf(line, sizeof line, "\n%-6s %-10s %-9s %s\n", "budget", "ppl", "vs std",
                "blocks in SPD");
  o += line;
  for (int n = 0; n <= L; ++n) {
    std::snprintf(line, sizeof line, "%-6d %-10.4f %+8.2f%% ", n, r.ppl_budget[size_t(n)],
                  100 * (r.ppl_budget[size_t(n)] / base - 1));
    o += line;
    for (int j = 0; j < n; ++j) o += cat(j ? "," : "", r.ranking[size_t(j)]);
    o += n == 0 ? "-\n" : "\n";
  }
  return o;
}

SvgChart spd_scan_chart(const SpdScanResult& r, const std::string& checkpoint) {
  const int L = r.layers;
  SvgChart chart;
  chart.title = cat("SPD at degree ", r.degree, ": perplexity (", checkpoint, ")");
  chart.x_label = "blocks in SPD";
  SvgSeries ranked, suffix;
  ranked.label = "least sensitive first";
  suffix.label = "blocks k..L-1 (the scan)";
  for (int n = 0; n <= L; ++n) {
    ranked.points.push_back({double(n), r.ppl_budget[size_t(n)]});
    suffix.points.push_back({double(n), r.ppl_from[size_t(L - n)]});
  }
  chart.series = {ranked, suffix};
  return chart;
}

}  // namespace strata
