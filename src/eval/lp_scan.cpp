// Layer Parallelism's range scan (lp_scan.h).
#include "eval/lp_scan.h"

#include <cmath>
#include <cstdio>

#include "core/text.h"
#include "core/timer.h"

namespace strata {
namespace {

const LpTransform kTransforms[] = {
    {"lp", 2, 2}, {"par", 2, 2}, {"stretch", 2, 1}, {"prune", 1, 1}, {"shuffle", 2, 1}};

// The largest D whose best range stays within the tolerance (null: none).
nlohmann::json recommendation(const LpScanResult& r, const LpScanOptions& o) {
  nlohmann::json recommended = nullptr;
  for (int d : o.deltas) {
    const nlohmann::json& b = r.json["best"][std::to_string(d)];
    if (b["ppl"].get<double>() <= r.standard.ppl() * (1 + o.tolerance / 100)) {
      recommended = b;
      recommended["delta"] = d;
      recommended["plan"] = transform_plan(o.transform, r.layers, b["start"].get<int>(),
                                           b["end"].get<int>(), o.alpha);
    }
  }
  return recommended;
}

}  // namespace

const LpTransform* find_lp_transform(const std::string& name) {
  for (const LpTransform& t : kTransforms)
    if (name == t.name) return &t;
  return nullptr;
}

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

int effective_depth(const std::string& transform, int L, int d) {
  return transform == "prune"     ? L - d
         : transform == "stretch" ? L - d + 1
         : transform == "shuffle" ? L
                                  : L - d / 2;
}

LpScanResult lp_scan(const std::function<PerplexityResult(const std::string& plan)>& perplexity,
                     int L, const LpScanOptions& o) {
  const std::string& transform = o.transform;
  int total = 0;
  for (int d : o.deltas) total += L - d + 1;
  LpScanResult r;
  r.layers = L;
  Timer timer;
  r.standard = perplexity(transform_plan(transform, L, 0, 0, o.alpha));
  if (o.progress)
    std::fprintf(stderr, "lp scan: %lld tokens, standard ppl %.4f; %d ranges\n",
                 (long long)r.standard.tokens, r.standard.ppl(), total);
  nlohmann::json ranges = nlohmann::json::array(), best = nlohmann::json::object();
  r.grid.assign(o.deltas.size(), std::vector<double>(size_t(L) + 1, NAN));
  int done = 0;
  for (size_t k = 0; k < o.deltas.size(); ++k) {
    const int d = o.deltas[k];
    int best_e = -1;
    for (int e = d; e <= L; ++e) {
      const std::string plan = transform_plan(transform, L, e - d, e, o.alpha);
      const PerplexityResult p = perplexity(plan);
      r.grid[k][size_t(e)] = p.ppl();
      ranges.push_back({{"start", e - d},
                        {"end", e},
                        {"delta", d},
                        {"effective_depth", effective_depth(transform, L, d)},
                        {"plan", plan},
                        {"ppl", p.ppl()},
                        {"nll", p.mean_nll()}});
      if (best_e < 0 || p.ppl() < r.grid[k][size_t(best_e)]) best_e = e;
      ++done;
      if (o.progress)
        std::fprintf(stderr, "lp scan: %s [%d, %d) D=%d ppl %.4f  (%d/%d, %.0f s)\n",
                     transform.c_str(), e - d, e, d, p.ppl(), done, total, timer.seconds());
    }
    best[std::to_string(d)] = {{"end", best_e},
                               {"start", best_e - d},
                               {"ppl", r.grid[k][size_t(best_e)]},
                               {"effective_depth", effective_depth(transform, L, d)}};
  }
  r.json = {{"tokens", r.standard.tokens},
            {"num_layers", L},
            {"transform", transform},
            {"alpha", o.alpha},
            {"standard_ppl", r.standard.ppl()},
            {"ranges", ranges},
            {"best", best},
            {"tolerance_percent", o.tolerance}};
  r.json["recommended"] = recommendation(r, o);
  return r;
}

std::string lp_scan_table(const LpScanResult& r, const LpScanOptions& o, const std::string& text) {
  const int L = r.layers, first_end = find_lp_transform(o.transform)->min_delta;
  std::string out = strprintf("standard: ppl %.4f over %lld tokens (%s)\n", r.standard.ppl(),
                              (long long)r.standard.tokens, text.c_str());
  out += strprintf("%-6s %-6s %-9s %-10s", "delta", "depth", "best_end", "best_ppl");
  for (int e = first_end; e <= L; ++e) out += strprintf(" %9s", cat("e=", e).c_str());
  out += "\n";
  for (size_t k = 0; k < o.deltas.size(); ++k) {
    const auto& b = r.json["best"][std::to_string(o.deltas[k])];
    out += strprintf("%-6d %-6d %-9d %-10.4f", o.deltas[k],
                     effective_depth(o.transform, L, o.deltas[k]), b["end"].get<int>(),
                     b["ppl"].get<double>());
    for (int e = first_end; e <= L; ++e) {
      if (std::isnan(r.grid[k][size_t(e)]))
        out += strprintf(" %9s", "-");
      else
        out += strprintf(" %9.3f", r.grid[k][size_t(e)]);
    }
    out += "\n";
  }
  const nlohmann::json& rec = r.json["recommended"];
  if (rec.is_null())
    return out + strprintf("recommended: none (every range costs more than %g%% of perplexity)\n",
                           o.tolerance);
  const double ppl = rec["ppl"].get<double>();
  return out + strprintf(
                   "recommended: D = %d at [%d, %d), ppl %.4f (%+.2f%%), effective depth %d: "
                   "--plan \"%s\"\n",
                   rec["delta"].get<int>(), rec["start"].get<int>(), rec["end"].get<int>(), ppl,
                   100 * (ppl / r.standard.ppl() - 1), rec["effective_depth"].get<int>(),
                   rec["plan"].get<std::string>().c_str());
}

SvgChart lp_scan_chart(const LpScanResult& r, const LpScanOptions& o,
                       const std::string& checkpoint) {
  SvgChart chart;
  chart.title = cat(o.transform, " of [e - D, e): perplexity (", checkpoint, ")");
  chart.x_label = "end index e";
  for (size_t k = 0; k < o.deltas.size(); ++k) {
    SvgSeries s;
    s.label = cat("D = ", o.deltas[k]);
    for (int e = o.deltas[k]; e <= r.layers; ++e)
      s.points.push_back({double(e), r.grid[k][size_t(e)]});
    chart.series.push_back(s);
  }
  return chart;
}

}  // namespace strata
