// `strata plan search` as a library: the per-layer plan (standard, skip,
// ladder, spd at the tp degree, lp pairs) that is fastest for a deployment
// within a quality budget, and the Pareto front of speed against quality.
//
// 1. Quality of single moves, measured: the calibration text's mean token
//    NLL with one move applied to the standard model (layer l skipped, layer
//    l as a ladder layer, layer l as an SPD block, layers l, l+1 as an LP
//    pair): delta_move = NLL(move) - NLL(standard).
// 2. The additive front: over every plan the kinds allow, the predicted time
//    (infer/plan_cost.h) and the predicted NLL, standard + the sum of its
//    moves' deltas. A dynamic programme over the layers keeps, for each layer
//    and the kind of the unit below, the plans no other beats in both; it is
//    exact for the additive model, and only plans the kinds' checks accept
//    (LayerPlan::parse, check_model, check_generation) are kept.
// 3. Whole plans, measured: the additive front's plans within `slack` times
//    the budget (at most `max_checks`, spread along the front), and the best
//    plan of each single technique, are scored whole on the text; effects need
//    not add up, and how far they did is reported.
// 4. The chosen plan: the fastest measured plan within the budget; the front:
//    the measured plans no other beats in predicted time and measured NLL.
// A budget may also bound a task's accuracy (PlanTaskBudget): every plan
// scored whole is then scored on the task too, and the perplexity budget
// either binds as well or only sets the window of plans scored whole.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/svg_plot.h"
#include "infer/plan_cost.h"
#include "model/config.h"

namespace strata {

// A budget in a task's accuracy: a plan's `acc` on the task (eval/<task>.toml)
// may fall at most `points` percentage points below the standard plan's.
struct PlanTaskBudget {
  std::string task;
  double points = 0;
};
// A plan's accuracy (in [0, 1]) on a task.
using PlanTaskScore = std::function<double(const std::string& plan, const std::string& task)>;

struct PlanSearchOptions {
  int tp = 1;  // the deployment's degree (spd_degree of SPD blocks)
  // The moves the search may use: skip, ladder, spd, lp.
  std::vector<std::string> kinds = {"skip", "ladder", "spd", "lp"};
  double budget = 0.05;  // the perplexity may rise by this fraction
  // false: the perplexity budget only sets which plans are scored whole (a
  // task budget decides which fit).
  bool ppl_binds = true;
  std::vector<PlanTaskBudget> tasks;  // each must hold too
  double slack = 2;        // whole plans checked up to slack x budget (additive estimate)
  int max_checks = 24;     // whole plans scored at most (besides single techniques)
  bool generation = true;  // plans must run with a KV cache (decode workloads)
  bool progress = false;   // a line on stderr per plan scored
};

// The kinds a search may use, in order.
const std::vector<std::string>& plan_search_kinds();

struct PlanMove {
  std::string kind;  // skip, ladder, spd, lp
  int layer = 0;     // its first layer
  std::string plan;  // the standard plan with this move alone
  double delta = 0;  // NLL(plan) - NLL(standard)
};

struct PlanPoint {
  std::string plan;    // as --plan takes it
  std::string source;  // "front", "standard", or the technique it is the best plan of
  PlanCost cost;
  double speedup = 1;        // predicted: the standard plan's seconds over this plan's
  double predicted_nll = 0;  // standard + the moves' deltas
  double nll = std::numeric_limits<double>::quiet_NaN();  // measured whole
  double ppl = std::numeric_limits<double>::quiet_NaN();
  double measured_speedup = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> accuracy;  // per task budget, when scored whole
  // Self-speculative decoding of the workload under this plan, where asked
  // (choose_self_speculation): the best exit and drafts (exit 0: none pays)
  // and the predicted and measured speed-ups with it over the standard plan.
  SpecChoice spec;
  double spec_speedup = std::numeric_limits<double>::quiet_NaN();
  double measured_spec_speedup = std::numeric_limits<double>::quiet_NaN();
  bool checked() const { return !std::isnan(nll); }
  // The better of plain and self-speculative decoding, measured (NaN: not timed).
  double best_measured_speedup() const {
    return std::isnan(measured_spec_speedup) ? measured_speedup
                                             : std::max(measured_speedup, measured_spec_speedup);
  }
  // The better of plain and self-speculative decoding, predicted.
  double best_speedup() const {
    return std::isnan(spec_speedup) ? speedup : std::max(speedup, spec_speedup);
  }
};

struct PlanSearchResult {
  int layers = 0, tp = 1;
  double budget = 0, standard_nll = 0, standard_ppl = 0;
  bool ppl_binds = true;
  std::vector<PlanTaskBudget> tasks;
  std::vector<double> standard_accuracy;  // per task
  PlanCost standard_cost;
  std::vector<PlanMove> moves;
  std::vector<PlanPoint> additive_front;  // the predicted front (additive quality)
  std::vector<PlanPoint> checked;         // scored whole, fastest first
  std::vector<int> front;                 // indices of `checked`: the measured front
  int chosen = -1;                        // index of `checked` (0: standard, nothing fits)
  bool chosen_by_measure = false;         // choose_measured picked it
  std::vector<int> best_single;           // per technique, its best plan in `checked` (-1: none)
  double interaction_mean = 0, interaction_max = 0;  // |measured - additive| ppl, percent
  const PlanPoint& chosen_point() const { return checked[size_t(chosen)]; }
  // Whether a plan scored whole is within every budget.
  bool fits(const PlanPoint& p) const;
};

// The mean token NLL of the calibration text under a plan.
using PlanQuality = std::function<double(const std::string& plan)>;

// The moves' standard plans (what step 1 scores), for a model of `layers`
// layers at degree `tp`.
std::vector<PlanMove> plan_search_moves(int layers, int tp, const std::vector<std::string>& kinds);

// The additive front (step 2) from the moves' deltas, fastest first.
std::vector<PlanPoint> additive_front(const LlamaConfig& cfg, const CostInputs& cost,
                                      const std::vector<PlanMove>& moves, double standard_nll,
                                      const PlanSearchOptions& options,
                                      const std::vector<std::string>& kinds);

// Steps 1 to 4; `task` scores plans on options.tasks (needed when there are any).
PlanSearchResult plan_search(const PlanQuality& quality, const LlamaConfig& cfg,
                             const CostInputs& cost, const PlanSearchOptions& options,
                             const PlanTaskScore& task = {});

// The acceptance rate of one draft token from layers [0, exit) under a plan,
// measured (greedy: the share of drafts the full model agrees with).
using DraftAcceptance = std::function<double(const std::string& plan, int exit)>;

// The plans of `r` that matter (the front, each technique's best and the
// chosen one): for each, the self-speculative exit (every unit boundary) and
// drafts (1..max_drafts) that make the workload fastest, from the acceptance
// measured at each exit; then the chosen plan is the one within the budget
// with the best speed-up, plain or self-speculative. `batch` and
// `new_tokens`: the workload's.
void choose_self_speculation(PlanSearchResult& r, const CostInputs& cost,
                             const DraftAcceptance& acceptance, int max_drafts, int batch,
                             int new_tokens, bool progress);
// Once the plans that matter are timed (measured_speedup): the chosen plan
// is the fastest measured of them within the budget, where one is faster
// than the predicted choice measured (the cost model's error, not the plan's).
void choose_measured(PlanSearchResult& r);
// The indices of `checked` whose speed matters: the front, the techniques' bests, the chosen.
std::vector<int> plans_that_matter(const PlanSearchResult& r);

// The front, the chosen plan, the single techniques and the interaction check.
std::string plan_search_table(const PlanSearchResult& r);
nlohmann::json plan_search_json(const PlanSearchResult& r);
// Speed-up against perplexity rise: the additive front, the measured plans'
// front, and where measured, the front's measured speed-ups.
SvgChart plan_search_chart(const PlanSearchResult& r, const std::string& title);

// Every plan of the search space (all combinations of the kinds' units that
// the checks accept): for exhaustive checks of small models.
std::vector<std::string> all_search_plans(const LlamaConfig& cfg, const PlanSearchOptions& options);

}  // namespace strata
