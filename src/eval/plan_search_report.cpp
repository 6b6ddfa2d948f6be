// What `strata plan search` prints and writes: the table, the JSON and the
// chart of a search (eval/plan_search.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/text.h"
#include "eval/plan_search.h"

namespace strata {

namespace {

std::string pad_right(const std::string& s, size_t w) {
  return strprintf("%-*s", int(w), s.c_str());
}
std::string pad_left(const std::string& s, size_t w) { return strprintf("%*s", int(w), s.c_str()); }

double rise_percent(double nll, double standard) { return 100 * (std::exp(nll - standard) - 1); }

std::string percent(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.2f%%", v);
  return b;
}

nlohmann::json number_or_null(double v) {
  return std::isnan(v) ? nlohmann::json() : nlohmann::json(v);
}

nlohmann::json point_json(const PlanPoint& p, double standard_nll) {
  nlohmann::json j = {{"plan", p.plan},
                      {"source", p.source},
                      {"predicted_seconds", p.cost.seconds},
                      {"predicted_compute_seconds", p.cost.compute},
                      {"predicted_exposed_seconds", p.cost.exposed},
                      {"sums", p.cost.sums},
                      {"predicted_speedup", p.speedup},
                      {"additive_ppl", std::exp(p.predicted_nll)},
                      {"additive_ppl_rise_percent", rise_percent(p.predicted_nll, standard_nll)},
                      {"nll", number_or_null(p.nll)},
                      {"ppl", number_or_null(p.ppl)},
                      {"measured_speedup", number_or_null(p.measured_speedup)}};
  if (p.checked()) j["ppl_rise_percent"] = rise_percent(p.nll, standard_nll);
  if (!p.accuracy.empty()) j["accuracy"] = p.accuracy;
  if (!std::isnan(p.spec_speedup))
    j["self_speculative"] = {{"exit", p.spec.exit},
                             {"drafts", p.spec.drafts},
                             {"acceptance", p.spec.alpha},
                             {"tokens_per_round", p.spec.tokens},
                             {"predicted_seconds", p.spec.seconds},
                             {"predicted_speedup", p.spec_speedup},
                             {"measured_speedup", number_or_null(p.measured_spec_speedup)}};
  return j;
}

// " E=3 d=4 1.45x (1.40x)": self-speculation's exit, drafts and speed-ups.
std::string spec_cell(const PlanPoint& p) {
  if (std::isnan(p.spec_speedup)) return "";
  if (p.spec.exit == 0) return "  none pays";
  return cat("  E=", p.spec.exit, " d=", p.spec.drafts, " ", fixed(p.spec_speedup, 3), "x",
             std::isnan(p.measured_spec_speedup)
                 ? std::string()
                 : cat(" (", fixed(p.measured_spec_speedup, 2), "x)"));
}

// The task budgets' accuracies, in percent (one column each).
std::string accuracy_cells(const PlanPoint& p) {
  std::string out;
  for (double a : p.accuracy) out += " " + pad_left(fixed(100 * a, 2), 8);
  return out;
}

std::string row(const PlanPoint& p, double standard_nll, size_t width) {
  const std::string measured =
      std::isnan(p.measured_speedup) ? "-" : cat(fixed(p.measured_speedup, 2), "x");
  return cat(pad_right(p.plan, width), " ", pad_left(fixed(p.ppl, 4), 10), " ",
             pad_left(percent(rise_percent(p.nll, standard_nll)), 9), " ",
             pad_left(percent(rise_percent(p.predicted_nll, standard_nll)), 9), accuracy_cells(p),
             " ", pad_left(cat(fixed(p.speedup, 3), "x"), 9), " ", pad_left(measured, 9),
             spec_cell(p), "\n");
}

// "ppl +5.00%", "piqa acc -2.0 points", joined: the budgets the chosen plan keeps.
std::string budget_text(const PlanSearchResult& r) {
  std::vector<std::string> parts;
  if (r.ppl_binds) parts.push_back(cat("budget +", fixed(100 * r.budget, 2), "%"));
  for (const PlanTaskBudget& t : r.tasks)
    parts.push_back(cat(t.task, " acc -", t.points, " points"));
  return join(parts, ", ");
}

// Over the timed plans: mean and largest |predicted - measured| / measured speed-up (0 plans: none
// timed).
struct PredictionError {
  int plans = 0;
  double mean = 0, max = 0;
};
PredictionError prediction_error(const PlanSearchResult& r) {
  PredictionError e;
  for (const PlanPoint& p : r.checked)
    for (auto [pred, meas] : {std::pair{p.speedup, p.measured_speedup},
                              std::pair{p.spec_speedup, p.measured_spec_speedup}}) {
      if (std::isnan(meas) || std::isnan(pred)) continue;
      const double err = std::abs(pred - meas) / meas;
      e.mean += err;
      e.max = std::max(e.max, err);
      ++e.plans;
    }
  if (e.plans) e.mean /= e.plans;
  return e;
}

}  // namespace

std::string plan_search_table(const PlanSearchResult& r) {
  auto task_heads = [](const PlanSearchResult& res) {
    std::string h;
    for (const PlanTaskBudget& t : res.tasks) h += " " + pad_left(t.task.substr(0, 8), 8);
    return h;
  };
  std::string out = cat("standard: ppl ", fixed(r.standard_ppl, 4), "; predicted ",
                        fixed(r.standard_cost.seconds * 1e3, 3), " ms per workload at tp ", r.tp,
                        " (compute ", fixed(r.standard_cost.compute * 1e3, 3), ", exposed sums ",
                        fixed(r.standard_cost.exposed * 1e3, 3), ")\n");
  // The moves: one row per layer, one column per kind.
  std::map<int, std::map<std::string, double>> grid;
  std::vector<std::string> kinds;
  for (const PlanMove& m : r.moves) {
    grid[m.layer][m.kind] = m.delta;
    if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) kinds.push_back(m.kind);
  }
  out += "\nppl change of each move alone (lp: the pair from this layer)\nlayer";
  for (const std::string& k : kinds) out += " " + pad_left(k, 9);
  out += "\n";
  for (const auto& [layer, row_of] : grid) {
    out += pad_right(std::to_string(layer), 5);
    for (const std::string& k : kinds) {
      const auto it = row_of.find(k);
      out +=
          " " + pad_left(it == row_of.end() ? "-" : percent(100 * (std::exp(it->second) - 1)), 9);
    }
    out += "\n";
  }
  size_t width = 4;
  for (const PlanPoint& p : r.checked) width = std::max(width, p.plan.size());
  const std::string head = cat(
      pad_right("plan", width), " ", pad_left("ppl", 10), " ", pad_left("rise", 9), " ",
      pad_left("additive", 9), task_heads(r), " ", pad_left("speed-up", 9), " ",
      pad_left("measured", 9),
      std::isnan(r.chosen_point().spec_speedup) ? std::string() : "  self-speculative (measured)",
      "\n");
  out +=
      cat("\nfront: plans scored whole that no other beats in predicted time and ppl "
          "(rise: measured; additive: the sum of the moves alone; speed-up: predicted)\n",
          head);
  for (int i : r.front) out += row(r.checked[size_t(i)], r.standard_nll, width);
  out += "\nbest plan of each technique alone within the budget\n" + head;
  for (int b : r.best_single)
    if (b >= 0) out += row(r.checked[size_t(b)], r.standard_nll, width);
  out += cat("\n", r.checked.size(),
             " plans scored whole; whole plan against the sum of its "
             "moves: mean |difference| ",
             fixed(r.interaction_mean, 2), "% of ppl, max ", fixed(r.interaction_max, 2), "%\n");
  const PredictionError pe = prediction_error(r);
  if (pe.plans)
    out += cat("timed: ", pe.plans, " speed-ups; |predicted - measured| / measured: mean ",
               fixed(100 * pe.mean, 1), "%, max ", fixed(100 * pe.max, 1), "%\n");
  const PlanPoint& c = r.chosen_point();
  for (size_t t = 0; t < r.tasks.size(); ++t)
    out += cat(r.tasks[t].task, ": standard acc ", fixed(100 * r.standard_accuracy[t], 2),
               "%; a plan fits when its acc is at least ",
               fixed(100 * r.standard_accuracy[t] - r.tasks[t].points, 2), "%\n");
  std::string acc;
  for (size_t t = 0; t < r.tasks.size() && t < c.accuracy.size(); ++t)
    acc += cat(", ", r.tasks[t].task, " acc ", fixed(100 * c.accuracy[t], 2), "%");
  out += cat("chosen: --plan \"", c.plan, "\": ppl ", fixed(c.ppl, 4), " (",
             percent(rise_percent(c.nll, r.standard_nll)), acc, "; ", budget_text(r),
             "), predicted speed-up ", fixed(c.speedup, 3), "x",
             std::isnan(c.measured_speedup) ? std::string()
                                            : cat(", measured ", fixed(c.measured_speedup, 3), "x"),
             r.chosen_by_measure ? " (chosen by the measured speed-up)" : "", "\n");
  if (!std::isnan(c.spec_speedup))
    out +=
        c.spec.exit == 0
            ? std::string("  self-speculative decoding: no exit is faster than plain decoding\n")
            : cat("  with self-speculative decoding: --exit-layer ", c.spec.exit,
                  " --self-speculative --speculations ", c.spec.drafts, " (acceptance ",
                  fixed(c.spec.alpha, 3), "): predicted speed-up ", fixed(c.spec_speedup, 3), "x",
                  std::isnan(c.measured_spec_speedup)
                      ? std::string()
                      : cat(", measured ", fixed(c.measured_spec_speedup, 3), "x"),
                  "\n");
  return out;
}

nlohmann::json plan_search_json(const PlanSearchResult& r) {
  nlohmann::json moves = nlohmann::json::array(), checked = nlohmann::json::array(),
                 additive = nlohmann::json::array(), front = nlohmann::json::array(),
                 single = nlohmann::json::object(), tasks = nlohmann::json::array();
  const PredictionError pe = prediction_error(r);
  for (size_t t = 0; t < r.tasks.size(); ++t)
    tasks.push_back({{"task", r.tasks[t].task},
                     {"max_drop_points", r.tasks[t].points},
                     {"standard_accuracy", r.standard_accuracy[t]}});
  for (const PlanMove& m : r.moves)
    moves.push_back({{"kind", m.kind},
                     {"layer", m.layer},
                     {"plan", m.plan},
                     {"delta_nll", m.delta},
                     {"ppl_rise_percent", 100 * (std::exp(m.delta) - 1)}});
  for (const PlanPoint& p : r.checked) checked.push_back(point_json(p, r.standard_nll));
  for (const PlanPoint& p : r.additive_front) additive.push_back(point_json(p, r.standard_nll));
  for (int i : r.front) front.push_back(point_json(r.checked[size_t(i)], r.standard_nll));
  for (int b : r.best_single)
    if (b >= 0)
      single[r.checked[size_t(b)].source] = point_json(r.checked[size_t(b)], r.standard_nll);
  nlohmann::json chosen = point_json(r.chosen_point(), r.standard_nll);
  return {{"layers", r.layers},
          {"tp", r.tp},
          {"budget_percent", 100 * r.budget},
          {"budget_binds", r.ppl_binds},
          {"task_budgets", tasks},
          {"standard",
           {{"ppl", r.standard_ppl},
            {"nll", r.standard_nll},
            {"predicted_seconds", r.standard_cost.seconds}}},
          {"moves", moves},
          {"additive_front", additive},
          {"checked", checked},
          {"front", front},
          {"single_technique", single},
          {"interaction",
           {{"mean_abs_percent", r.interaction_mean}, {"max_abs_percent", r.interaction_max}}},
          {"prediction_error",
           {{"timed", pe.plans}, {"mean_percent", 100 * pe.mean}, {"max_percent", 100 * pe.max}}},
          {"chosen", chosen},
          {"chosen_by", r.chosen_by_measure ? "measured" : "predicted"}};
}

SvgChart plan_search_chart(const PlanSearchResult& r, const std::string& title) {
  SvgChart c;
  c.title = title;
  c.x_label = "perplexity rise on the calibration text (%)";
  c.y_label = "speed-up over the standard plan";
  SvgSeries additive{"additive front (sum of moves; predicted speed-up)", {}, true};
  const double limit = 100 * std::max(0.2, 4 * r.budget);  // the region around the budget
  for (const PlanPoint& p : r.additive_front) {
    const double x = rise_percent(p.predicted_nll, r.standard_nll);
    if (x <= limit) additive.points.push_back({x, p.speedup});
  }
  SvgSeries front{"plans scored whole: front (predicted speed-up)", {}, false};
  SvgSeries measured{"front: measured speed-up", {}, false};
  for (int i : r.front) {
    const PlanPoint& p = r.checked[size_t(i)];
    const double x = rise_percent(p.nll, r.standard_nll);
    front.points.push_back({x, p.speedup});
    if (!std::isnan(p.measured_speedup)) measured.points.push_back({x, p.measured_speedup});
  }
  for (auto* s : {&additive, &front, &measured}) std::sort(s->points.begin(), s->points.end());
  c.series = {additive, front};
  if (!measured.points.empty()) c.series.push_back(measured);
  c.hlines.push_back({"standard", 1.0});
  return c;
}

}  // namespace strata
