#include "eval/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/text.h"
#include "model/plan.h"

namespace strata {

const std::vector<std::string>& plan_search_kinds() {
  static const std::vector<std::string> k = {"skip", "ladder", "spd", "lp"};
  return k;
}

namespace {

LayerKind kind_named(const std::string& name) {
  for (const KindInfo* k : kind_table())
    if (name == k->name) return k->kind;
  fail(cat("plan search: no kind '", name, "'"));
}

// The plan text of per-layer kinds (spd blocks at degree tp).
std::string plan_text(const std::vector<LayerKind>& kinds, int tp) {
  LayerPlan p;
  p.kinds = kinds;
  // A kind that needs tp (spd) takes the degree as its first option.
  for (const KindInfo* k : kind_table())
    if (k->cost.needs_tp && !k->options.empty() &&
        std::find(kinds.begin(), kinds.end(), k->kind) != kinds.end())
      p.options.emplace_back(k->options.front().key, std::to_string(tp));
  return p.to_string();
}

bool plan_ok(const std::string& text, const LlamaConfig& cfg, int tp, bool generation) {
  try {
    const LayerPlan p = LayerPlan::parse(text, cfg.num_hidden_layers);
    p.check_model(cfg, tp);
    if (generation) p.check_generation();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The units a search may place: standard and the kinds asked for (one unit each).
std::vector<LayerKind> unit_kinds(const std::vector<std::string>& kinds, int tp) {
  std::vector<LayerKind> out = {LayerKind::Standard};
  for (const std::string& k : kinds)
    if (tp > 1 || !kind_info(kind_named(k)).cost.needs_tp) out.push_back(kind_named(k));
  return out;
}

int unit_layers(LayerKind k) { return std::max(1, kind_info(k).unit_size); }

// Whether a unit of kind k leaves a sum in flight (an asynchronous last sum).
bool leaves_pending(LayerKind k, int tp) {
  const KindCost& c = kind_info(k).cost;
  return tp > 1 && c.computes && c.reads_two_back && c.mlp_sum;
}

double rise(double nll, double standard) { return std::exp(nll - standard) - 1; }

// A point of the dynamic programme: time and NLL change so far, and how it got here.
struct Label {
  double seconds = 0, delta = 0;
  int parent = -1;
  LayerKind kind = LayerKind::Standard;
};

// Keeps the labels no other beats in both (fewer seconds, lower delta); at most `cap`.
std::vector<int> pareto(std::vector<int> ids, const std::vector<Label>& labels, size_t cap) {
  std::sort(ids.begin(), ids.end(), [&](int a, int b) {
    const Label &x = labels[size_t(a)], &y = labels[size_t(b)];
    return x.seconds != y.seconds ? x.seconds < y.seconds : x.delta < y.delta;
  });
  std::vector<int> keep;
  double best = std::numeric_limits<double>::infinity();
  for (int id : ids)
    if (labels[size_t(id)].delta < best - 1e-12) {
      keep.push_back(id);
      best = labels[size_t(id)].delta;
    }
  if (keep.size() <= cap) return keep;
  std::vector<int> thin;  // evenly along the front, both ends kept
  for (size_t k = 0; k < cap; ++k) thin.push_back(keep[k * (keep.size() - 1) / (cap - 1)]);
  return thin;
}

PlanPoint make_point(const std::string& text, const std::string& source, const LlamaConfig& cfg,
                     const CostInputs& cost, double standard_seconds, double predicted_nll) {
  PlanPoint p;
  p.plan = text;
  p.source = source;
  p.cost = plan_cost(LayerPlan::parse(text, cfg.num_hidden_layers), cost);
  p.speedup = standard_seconds / p.cost.seconds;
  p.predicted_nll = predicted_nll;
  return p;
}

}  // namespace

std::vector<PlanMove> plan_search_moves(int layers, int tp, const std::vector<std::string>& kinds) {
  std::vector<PlanMove> moves;
  for (LayerKind k : unit_kinds(kinds, tp)) {
    if (k == LayerKind::Standard) continue;
    const int n = unit_layers(k);
    for (int l = 0; l + n <= layers; ++l) {
      std::vector<LayerKind> plan(size_t(layers), LayerKind::Standard);
      for (int j = l; j < l + n; ++j) plan[size_t(j)] = k;
      moves.push_back({kind_info(k).name, l, plan_text(plan, tp), 0});
    }
  }
  return moves;
}

std::vector<PlanPoint> additive_front(const LlamaConfig& cfg, const CostInputs& cost,
                                      const std::vector<PlanMove>& moves, double standard_nll,
                                      const PlanSearchOptions& options,
                                      const std::vector<std::string>& kinds) {
  const int L = cfg.num_hidden_layers, tp = options.tp;
  std::map<std::pair<std::string, int>, double> delta;
  for (const PlanMove& m : moves) delta[{m.kind, m.layer}] = m.delta;
  const std::vector<LayerKind> units = unit_kinds(kinds, tp);
  const int none = int(kind_table().size());  // the state before layer 0
  // states[i][k]: labels after i layers with kind k last (none: i = 0).
  std::vector<std::vector<std::vector<int>>> states(
      size_t(L) + 1, std::vector<std::vector<int>>(size_t(none) + 1));
  std::vector<Label> labels = {Label{}};
  states[0][size_t(none)] = {0};
  constexpr size_t kCap = 4096;
  for (int i = 0; i < L; ++i)
    for (int prev = 0; prev <= none; ++prev) {
      std::vector<int>& here = states[size_t(i)][size_t(prev)];
      if (here.empty()) continue;
      here = pareto(here, labels, kCap);
      const bool pending = prev != none && leaves_pending(LayerKind(prev), tp);
      for (LayerKind u : units) {
        const KindInfo& info = kind_info(u);
        const int n = unit_layers(u);
        if (i + n > L) continue;
        if (info.reads_stream_below && prev != none && !kind_info(LayerKind(prev)).inner_stream)
          continue;
        double d = 0;
        if (u != LayerKind::Standard) {
          const auto it = delta.find({info.name, i});
          if (it == delta.end()) continue;  // a move that was not scored
          d = it->second;
        }
        const double sec = unit_step(cost, info.cost, n, pending).seconds;
        for (int id : here) {
          const Label& from = labels[size_t(id)];
          labels.push_back({from.seconds + sec, from.delta + d, id, u});
          states[size_t(i + n)][size_t(u)].push_back(int(labels.size()) - 1);
        }
      }
    }
  // The plans at L with the head's time, then the front over all last kinds.
  std::vector<int> ends;
  for (int last = 0; last < none; ++last)
    for (int id : states[size_t(L)][size_t(last)]) {
      Label& end = labels[size_t(id)];
      end.seconds += plan_tail(cost, leaves_pending(LayerKind(last), tp)).seconds;
      ends.push_back(id);
    }
  const double standard_seconds = plan_cost(LayerPlan::standard(L), cost).seconds;
  std::vector<PlanPoint> front;
  for (int id : pareto(ends, labels, kCap)) {
    std::vector<LayerKind> kinds_of(static_cast<size_t>(L), LayerKind::Standard);
    int at = L;
    for (int j = id; labels[size_t(j)].parent >= 0; j = labels[size_t(j)].parent) {
      const int n = unit_layers(labels[size_t(j)].kind);
      at -= n;
      for (int k = at; k < at + n; ++k) kinds_of[size_t(k)] = labels[size_t(j)].kind;
    }
    const std::string text = plan_text(kinds_of, tp);
    if (!plan_ok(text, cfg, tp, options.generation)) continue;
    front.push_back(make_point(text, "front", cfg, cost, standard_seconds,
                               standard_nll + labels[size_t(id)].delta));
  }
  std::sort(front.begin(), front.end(),
            [](const PlanPoint& a, const PlanPoint& b) { return a.cost.seconds < b.cost.seconds; });
  return front;
}

std::vector<std::string> all_search_plans(const LlamaConfig& cfg,
                                          const PlanSearchOptions& options) {
  const int L = cfg.num_hidden_layers;
  const std::vector<LayerKind> units = unit_kinds(options.kinds, options.tp);
  std::vector<std::string> out;
  std::vector<LayerKind> kinds;
  std::function<void()> walk = [&] {
    if (int(kinds.size()) == L) {
      const std::string text = plan_text(kinds, options.tp);
      if (plan_ok(text, cfg, options.tp, options.generation)) out.push_back(text);
      return;
    }
    for (LayerKind u : units) {
      const int n = unit_layers(u);
      if (int(kinds.size()) + n > L) continue;
      kinds.insert(kinds.end(), size_t(n), u);
      walk();
      kinds.resize(kinds.size() - size_t(n));
    }
  };
  walk();
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// Scores plans whole (once each) into r.checked.
struct Checker {
  const PlanQuality& quality;
  const PlanTaskScore& task;
  const LlamaConfig& cfg;
  const CostInputs& cost;
  PlanSearchResult& r;
  bool progress;
  std::map<std::string, int> index;

  int check(PlanPoint p) {
    const auto it = index.find(p.plan);
    if (it != index.end()) return it->second;
    p.nll = quality(p.plan);
    p.ppl = std::exp(p.nll);
    std::string acc;
    for (const PlanTaskBudget& t : r.tasks) {
      p.accuracy.push_back(task(p.plan, t.task));
      acc += cat(", ", t.task, " acc ", fixed(100 * p.accuracy.back(), 2), "%");
    }
    if (progress)
      std::fprintf(stderr,
                   "plan search: whole plan %zu: %s: ppl %.4f (%+.2f%%; sum of moves %+.2f%%)%s\n",
                   r.checked.size() + 1, p.plan.c_str(), p.ppl, 100 * rise(p.nll, r.standard_nll),
                   100 * rise(p.predicted_nll, r.standard_nll), acc.c_str());
    r.checked.push_back(p);
    return index[p.plan] = int(r.checked.size()) - 1;
  }
  bool fits(int i) const { return r.fits(r.checked[size_t(i)]); }
};

// Up to n of `points` evenly spread (the first and last kept).
std::vector<PlanPoint> spread(const std::vector<PlanPoint>& points, size_t n) {
  if (points.size() <= n) return points;
  std::vector<PlanPoint> out;
  for (size_t k = 0; k < n; ++k) out.push_back(points[k * (points.size() - 1) / (n - 1)]);
  return out;
}

}  // namespace

bool PlanSearchResult::fits(const PlanPoint& p) const {
  if (ppl_binds && rise(p.nll, standard_nll) > budget + 1e-12) return false;
  for (size_t t = 0; t < tasks.size(); ++t)
    if (p.accuracy.size() <= t ||
        p.accuracy[t] < standard_accuracy[t] - tasks[t].points / 100 - 1e-12)
      return false;
  return p.checked();
}

PlanSearchResult plan_search(const PlanQuality& quality, const LlamaConfig& cfg,
                             const CostInputs& cost, const PlanSearchOptions& options,
                             const PlanTaskScore& task) {
  const int L = cfg.num_hidden_layers;
  STRATA_CHECK(options.budget >= 0, "plan search: the budget must be at least 0");
  STRATA_CHECK(options.tasks.empty() || task, "plan search: a task budget needs a task scorer");
  PlanSearchResult r;
  r.layers = L;
  r.tp = options.tp;
  r.budget = options.budget;
  r.ppl_binds = options.ppl_binds || options.tasks.empty();
  r.tasks = options.tasks;
  const std::string standard = LayerPlan::standard(L).to_string();
  // 1. The moves, each alone.
  r.standard_nll = quality(standard);
  r.standard_ppl = std::exp(r.standard_nll);
  r.moves = plan_search_moves(L, options.tp, options.kinds);
  for (size_t m = 0; m < r.moves.size(); ++m) {
    PlanMove& mv = r.moves[m];
    mv.delta = quality(mv.plan) - r.standard_nll;
    if (options.progress)
      std::fprintf(stderr, "plan search: move %zu of %zu: %s at layer %d: ppl %+.2f%%\n", m + 1,
                   r.moves.size(), mv.kind.c_str(), mv.layer, 100 * (std::exp(mv.delta) - 1));
  }
  // 2. The additive front.
  r.additive_front = additive_front(cfg, cost, r.moves, r.standard_nll, options, options.kinds);
  r.standard_cost = plan_cost(LayerPlan::standard(L), cost);
  // 3. Whole plans: the standard one, the front within slack x budget, and
  // each technique's best plan within the budget.
  Checker c{quality, task, cfg, cost, r, options.progress, {}};
  PlanPoint std_point =
      make_point(standard, "standard", cfg, cost, r.standard_cost.seconds, r.standard_nll);
  r.standard_accuracy = r.checked[size_t(c.check(std_point))].accuracy;
  std::vector<PlanPoint> near;
  for (const PlanPoint& p : r.additive_front)
    if (p.plan != standard && rise(p.predicted_nll, r.standard_nll) <= options.slack * r.budget)
      near.push_back(p);
  for (const PlanPoint& p : spread(near, size_t(std::max(1, options.max_checks)))) c.check(p);
  for (const std::string& kind : options.kinds) {
    if (options.tp < 2 && kind_info(kind_named(kind)).cost.needs_tp) {
      r.best_single.push_back(-1);
      continue;
    }
    int best = -1, tries = 0;
    for (PlanPoint p : additive_front(cfg, cost, r.moves, r.standard_nll, options, {kind})) {
      if (p.plan == standard || rise(p.predicted_nll, r.standard_nll) > options.slack * r.budget)
        continue;
      p.source = kind;
      const int i = c.check(p);
      if (c.fits(i)) {
        best = i;
        break;
      }
      if (++tries == 6) break;
    }
    r.best_single.push_back(best);
  }
  // 4. The measured front and the chosen plan (plans sorted fastest first).
  std::vector<int> order(r.checked.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return r.checked[size_t(a)].cost.seconds < r.checked[size_t(b)].cost.seconds;
  });
  std::vector<int> where(order.size());
  std::vector<PlanPoint> sorted;
  for (size_t k = 0; k < order.size(); ++k) {
    where[size_t(order[k])] = int(k);
    sorted.push_back(r.checked[size_t(order[k])]);
  }
  r.checked = sorted;
  for (int& b : r.best_single)
    if (b >= 0) b = where[size_t(b)];
  double best_nll = std::numeric_limits<double>::infinity();
  for (int i = 0; i < int(r.checked.size()); ++i) {  // fastest first: each better than all faster
    const PlanPoint& p = r.checked[size_t(i)];
    if (p.nll >= best_nll - 1e-12) continue;
    // A plan as fast as the last one on the front (to rounding) and better replaces it.
    if (!r.front.empty() &&
        p.cost.seconds <= r.checked[size_t(r.front.back())].cost.seconds * (1 + 1e-9))
      r.front.pop_back();
    r.front.push_back(i);
    best_nll = p.nll;
  }
  // The fastest plan that fits; of plans as fast (to rounding), the best.
  for (int i = 0; i < int(r.checked.size()); ++i) {
    if (!c.fits(i)) continue;
    if (r.chosen < 0) {
      r.chosen = i;
      continue;
    }
    const PlanPoint &p = r.checked[size_t(i)], &b = r.chosen_point();
    if (p.cost.seconds > b.cost.seconds * (1 + 1e-9)) break;
    if (p.nll < b.nll) r.chosen = i;
  }
  // How far the effects added up.
  int n = 0;
  for (const PlanPoint& p : r.checked) {
    if (p.plan == standard) continue;
    const double diff = 100 * std::abs(std::exp(p.nll - p.predicted_nll) - 1);
    r.interaction_mean += diff;
    r.interaction_max = std::max(r.interaction_max, diff);
    ++n;
  }
  if (n) r.interaction_mean /= n;
  return r;
}

std::vector<int> plans_that_matter(const PlanSearchResult& r) {
  std::vector<int> which(r.front.begin(), r.front.end());
  which.push_back(r.chosen);
  for (int b : r.best_single)
    if (b >= 0) which.push_back(b);
  std::sort(which.begin(), which.end());
  which.erase(std::unique(which.begin(), which.end()), which.end());
  return which;
}

void choose_self_speculation(PlanSearchResult& r, const CostInputs& cost,
                             const DraftAcceptance& acceptance, int max_drafts, int batch,
                             int new_tokens, bool progress) {
  for (int i : plans_that_matter(r)) {
    PlanPoint& p = r.checked[size_t(i)];
    const LayerPlan plan = LayerPlan::parse(p.plan, r.layers);
    SpecChoice best;
    best.seconds = p.cost.seconds;  // plain decoding
    for (int e = 1; e < r.layers; ++e) {
      try {
        plan.check_exit(e, "exit");
      } catch (const Error&) {
        continue;
      }
      const double alpha = acceptance(p.plan, e);
      for (int d = 1; d <= max_drafts; ++d) {
        const SpecChoice c = spec_workload(plan, cost, e, d, alpha, batch, new_tokens);
        if (c.seconds < best.seconds) best = c;
      }
    }
    p.spec = best;
    p.spec_speedup = r.standard_cost.seconds / best.seconds;
    if (progress)
      std::fprintf(stderr, "plan search: self-speculation under %s: %s\n", p.plan.c_str(),
                   best.exit ? cat("exit ", best.exit, ", ", best.drafts, " drafts (acceptance ",
                                   fixed(best.alpha, 3), "): ", fixed(p.spec_speedup, 3), "x")
                                   .c_str()
                             : "none faster than plain decoding");
  }
  // The chosen plan: the best speed-up within the budget, either way of decoding.
  for (int i : plans_that_matter(r)) {
    const PlanPoint& p = r.checked[size_t(i)];
    if (r.fits(p) && p.best_speedup() > r.chosen_point().best_speedup() + 1e-12) r.chosen = i;
  }
}

void choose_measured(PlanSearchResult& r) {
  if (std::isnan(r.chosen_point().best_measured_speedup())) return;  // nothing timed
  int best = r.chosen;
  for (int i : plans_that_matter(r)) {
    const PlanPoint& p = r.checked[size_t(i)];
    if (r.fits(p) && p.best_measured_speedup() > r.checked[size_t(best)].best_measured_speedup())
      best = i;
  }
  r.chosen_by_measure = best != r.chosen;
  r.chosen = best;
}

}  // namespace strata
