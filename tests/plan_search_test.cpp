// The plan search (eval/plan_search.h) and its cost model (infer/plan_cost.h):
// the cost of plans against times worked out by hand, the link's parser, the
// dynamic programme's front against every plan of a small space, and the
// whole search on stories260K against the exhaustive optimum.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "eval/evaluate.h"
#include "eval/plan_search.h"
#include "infer/plan_cost.h"
#include "io/model_io.h"
#include "testing.h"
#include "train/plan_recovery.h"
#include "train/recipe.h"
#include "train/spd_config.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace strata {
namespace {

// One phase: attention 1 ms, MLP 2 ms, the head 0.5 ms; a sum of 10 rows of
// 100 fp32 values (4,000 bytes) takes 1 ms on a 4 MB/s link at tp 2.
CostInputs hand_inputs(double overlap = 1, int tp = 2) {
  CostInputs in;
  in.tp = tp;
  in.hidden = 100;
  in.link = {0, 4e6};
  in.overlap = overlap;
  in.phases = {{"decode", 1e-3, 2e-3, 0.5e-3, 10, 1}};
  return in;
}

double ms(const std::string& plan, const CostInputs& in, int layers = 2) {
  return plan_cost(LayerPlan::parse(plan, layers), in).seconds * 1e3;
}

TEST(PlanCost, PlansCostWhatTheirUnitsDoByHand) {
  const CostInputs in = hand_inputs();
  // standard: 2 x (1 + 2) compute, 4 blocking sums, the head.
  EXPECT_NEAR(ms("standard*2", in), 6 + 4 + 0.5, 1e-9);
  EXPECT_NEAR(ms("skip,standard", in), 3 + 2 + 0.5, 1e-9);
  // spd: the attention's sum dropped; lp: one sum per module pair.
  EXPECT_NEAR(ms("spd*2;spd_degree=2", in), 6 + 2 + 0.5, 1e-9);
  EXPECT_NEAR(ms("lp*2", in), 6 + 2 + 0.5, 1e-9);
  // ladder: each sum behind the next module (1 ms behind 1-2 ms of compute),
  // except the last, which the head waits for.
  EXPECT_NEAR(ms("ladder*2", in), 6 + 1 + 0.5, 1e-9);
  // A standard layer's sums block; a ladder layer's last one is waited for by
  // the standard layer above it and by a skipped layer.
  EXPECT_NEAR(ms("standard,ladder", in), 5 + 3 + 1 + 0.5, 1e-9);
  EXPECT_NEAR(ms("ladder,standard", in), 3 + 1 + 5 + 0.5, 1e-9);
  EXPECT_NEAR(ms("ladder,skip", in), 3 + 1 + 0.5, 1e-9);
  // Half the compute hides: the sum before layer 1's attention shows 0.5 ms.
  EXPECT_NEAR(ms("ladder*2", hand_inputs(0.5)), 6 + 0.5 + 1 + 0.5, 1e-9);
  // One rank: nothing to sum.
  EXPECT_NEAR(ms("standard*2", hand_inputs(1, 1)), 6.5, 1e-9);
  EXPECT_NEAR(ms("ladder*2", hand_inputs(1, 1)), 6.5, 1e-9);
  const PlanCost c = plan_cost(LayerPlan::parse("standard*2", 2), in);
  EXPECT_EQ(c.sums, 4);
  EXPECT_NEAR(c.compute * 1e3, 6, 1e-9);
  EXPECT_NEAR(c.exposed * 1e3, 4, 1e-9);
  EXPECT_NEAR(c.fixed * 1e3, 0.5, 1e-9);
}

TEST(PlanCost, PhasesAddWeightedByTheirPasses) {
  CostInputs in = hand_inputs();
  in.phases.push_back({"prefill", 10e-3, 20e-3, 1e-3, 40, 2});  // a sum of 40 rows: 4 ms
  // decode 10.5 ms + 2 x (60 + 4 x 4 + 1) ms
  EXPECT_NEAR(ms("standard*2", in), 10.5 + 2 * 77, 1e-9);
}

TEST(PlanCost, LinkSumsAndGathers) {
  const LinkModel m{1e-5, 1e6};
  EXPECT_NEAR(m.allreduce(1000, 2), 1e-5 + 1e-3, 1e-12);
  EXPECT_NEAR(m.allreduce(1000, 4), 1e-5 + 1.5e-3, 1e-12);
  EXPECT_NEAR(m.allgather(1000, 4), 1e-5 + 0.75e-3, 1e-12);
  EXPECT_EQ(m.allreduce(1000, 1), 0);
}

TEST(PlanCost, ParsesLinks) {
  LinkModel m = parse_link("10Gbit,20us", "--link");
  EXPECT_DOUBLE_EQ(m.bandwidth, 1.25e9);
  EXPECT_DOUBLE_EQ(m.latency, 20e-6);
  m = parse_link("25GB/s,5us", "--link");
  EXPECT_DOUBLE_EQ(m.bandwidth, 25e9);
  m = parse_link("400mbps,0.1ms", "--link");
  EXPECT_DOUBLE_EQ(m.bandwidth, 5e7);
  EXPECT_DOUBLE_EQ(m.latency, 1e-4);
  EXPECT_DOUBLE_EQ(parse_link("1gbit,0", "--link").latency, 0);
  for (const char* bad : {"10Gbit", "10Gb,20us", "0Gbit,1us", "10Gbit,20", "10Gbit,-1us",
                          "fast,20us", "10Gbit,20us,1"}) {
    try {
      parse_link(bad, "--link");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--link: '" + std::string(bad) + "' is not"),
                std::string::npos)
          << e.what();
    }
  }
}

LlamaConfig small_config(int layers) {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.finalize();
  return c;
}

// Sum of the moves' deltas over a plan's units.
double additive_delta(const std::string& text, int layers, const std::vector<PlanMove>& moves) {
  std::map<std::pair<std::string, int>, double> d;
  for (const PlanMove& m : moves) d[{m.kind, m.layer}] = m.delta;
  double sum = 0;
  for (const PlanUnit& u : LayerPlan::parse(text, layers).units())
    if (u.kind != LayerKind::Standard) sum += d.at({layer_kind_name(u.kind), u.first});
  return sum;
}

TEST(PlanSearch, TheDynamicProgrammeFindsTheFrontOfEveryPlan) {
  const int L = 5;
  const LlamaConfig cfg = small_config(L);
  CostInputs in = hand_inputs(0.6);
  in.phases.push_back({"prefill", 9e-3, 13e-3, 2e-3, 37, 1});
  PlanSearchOptions o;
  o.tp = 2;
  std::vector<PlanMove> moves = plan_search_moves(L, 2, o.kinds);
  ASSERT_EQ(moves.size(), size_t(3 * L + L - 1));
  uint64_t state = 12345;  // deterministic pseudo-random deltas, some negative
  for (PlanMove& m : moves) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    m.delta = double(state >> 40) / double(1 << 24) * 0.3 - 0.02;
  }
  const std::vector<PlanPoint> front = additive_front(cfg, in, moves, 1.0, o, o.kinds);
  // Every plan of the space, its time and additive NLL; the front by brute force.
  const std::vector<std::string> all = all_search_plans(cfg, o);
  EXPECT_GT(all.size(), size_t(1000));
  std::vector<std::pair<double, double>> points;
  for (const std::string& p : all)
    points.push_back({plan_cost(LayerPlan::parse(p, L), in).seconds, additive_delta(p, L, moves)});
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, double>> brute;
  for (const auto& pt : points)
    if (brute.empty() || pt.second < brute.back().second - 1e-12) brute.push_back(pt);
  ASSERT_EQ(front.size(), brute.size());
  for (size_t i = 0; i < brute.size(); ++i) {
    EXPECT_NEAR(front[i].cost.seconds, brute[i].first, 1e-12) << front[i].plan;
    EXPECT_NEAR(front[i].predicted_nll - 1.0, brute[i].second, 1e-12) << front[i].plan;
    EXPECT_NEAR(additive_delta(front[i].plan, L, moves), brute[i].second, 1e-12);
  }
}

TEST(PlanSearch, EveryPlanOfTheSpacePassesTheKindsChecks) {
  PlanSearchOptions o;
  o.tp = 2;
  const LlamaConfig cfg = small_config(3);
  for (const std::string& p : all_search_plans(cfg, o)) {
    const LayerPlan plan = LayerPlan::parse(p, 3);
    plan.check_model(cfg, 2);
    plan.check_generation();
    EXPECT_EQ(plan.to_string(), p);
  }
  // No ladder layer above an SPD block (it has no stream inside to read).
  for (const std::string& p : all_search_plans(cfg, o))
    EXPECT_EQ(p.find("spd,ladder"), std::string::npos) << p;
  o.tp = 1;  // no SPD block without a degree to drop
  for (const std::string& p : all_search_plans(cfg, o)) EXPECT_EQ(p.find("spd"), std::string::npos);
}

// A task budget: plans fit by their accuracy on the task (scored for every
// plan scored whole), with or without the perplexity budget binding too.
TEST(PlanSearch, TaskBudgetsBoundTheTasksAccuracy) {
  const int L = 6;
  const LlamaConfig cfg = small_config(L);
  CostInputs in = hand_inputs(0.6);
  // Per unit kind: NLL added and accuracy lost (skips cost little perplexity
  // here but much accuracy, so the two budgets choose differently).
  const std::map<LayerKind, std::pair<double, double>> effect = {{LayerKind::Skip, {0.004, 0.03}},
                                                                 {LayerKind::Ladder, {0.01, 0.002}},
                                                                 {LayerKind::Spd, {0.012, 0.001}},
                                                                 {LayerKind::Lp, {0.03, 0.004}}};
  auto sum = [&](const std::string& plan, bool acc) {
    double v = 0;
    for (const PlanUnit& u : LayerPlan::parse(plan, L).units())
      if (effect.count(u.kind)) v += acc ? effect.at(u.kind).second : effect.at(u.kind).first;
    return v;
  };
  std::set<std::string> task_asked;
  const PlanQuality quality = [&](const std::string& p) { return 1.0 + sum(p, false); };
  const PlanTaskScore task = [&](const std::string& p, const std::string& name) {
    EXPECT_EQ(name, "demo");
    task_asked.insert(p);
    return 0.6 - sum(p, true);
  };
  PlanSearchOptions o;
  o.tp = 2;
  o.budget = 0.25;
  o.ppl_binds = false;
  o.tasks = {{"demo", 2.0}};
  const PlanSearchResult r = plan_search(quality, cfg, in, o, task);
  ASSERT_EQ(r.standard_accuracy, std::vector<double>{0.6});
  EXPECT_EQ(task_asked.size(), r.checked.size());  // every plan scored whole, no other
  const PlanPoint& c = r.chosen_point();
  EXPECT_GE(c.accuracy.at(0), 0.58 - 1e-12);
  EXPECT_NE(c.plan, LayerPlan::standard(L).to_string());
  EXPECT_EQ(c.plan.find("skip"), std::string::npos) << c.plan;  // a skip alone costs 3 points
  for (const PlanPoint& p : r.checked)
    if (r.fits(p)) EXPECT_GE(p.cost.seconds, c.cost.seconds - 1e-15) << p.plan;
  // The perplexity budget binding too: a tighter perplexity budget, a slower plan.
  o.ppl_binds = true;
  o.budget = 0.02;
  const PlanSearchResult both = plan_search(quality, cfg, in, o, task);
  EXPECT_LE(std::exp(both.chosen_point().nll - both.standard_nll) - 1, 0.02 + 1e-12);
  EXPECT_GE(both.chosen_point().accuracy.at(0), 0.58 - 1e-12);
  EXPECT_GT(both.chosen_point().cost.seconds, c.cost.seconds);
  // Without a task budget, perplexity alone: the cheap skips are taken.
  o.tasks.clear();
  const PlanSearchResult ppl = plan_search(quality, cfg, in, o);
  EXPECT_NE(ppl.chosen_point().plan.find("skip"), std::string::npos) << ppl.chosen_point().plan;
  EXPECT_TRUE(ppl.chosen_point().accuracy.empty());
}

// Timed plans: the fastest measured within the budget is chosen, not the
// fastest predicted; nothing changes where none was timed.
TEST(PlanSearch, TheChoiceFollowsTheMeasuredSpeedUps) {
  PlanSearchResult r;
  r.budget = 0.05;
  r.standard_nll = 1.0;
  auto point = [](const std::string& plan, double nll, double predicted, double measured) {
    PlanPoint p;
    p.plan = plan;
    p.nll = nll;
    p.speedup = predicted;
    p.measured_speedup = measured;
    return p;
  };
  // Fastest predicted first; "c" does not fit the budget.
  r.checked = {point("c", 1.2, 2.0, 2.1), point("a", 1.04, 1.6, 1.45), point("b", 1.03, 1.5, 1.55),
               point("standard", 1.0, 1.0, 1.0)};
  r.front = {0, 1, 2, 3};
  r.chosen = 1;
  PlanSearchResult untimed = r;
  for (PlanPoint& p : untimed.checked) p.measured_speedup = std::nan("");
  choose_measured(untimed);
  EXPECT_EQ(untimed.chosen, 1);
  EXPECT_FALSE(untimed.chosen_by_measure);
  choose_measured(r);
  EXPECT_EQ(r.chosen_point().plan, "b");
  EXPECT_TRUE(r.chosen_by_measure);
  // Self-speculation counts where it was measured faster.
  r.chosen = 1;
  r.checked[1].measured_spec_speedup = 1.7;
  choose_measured(r);
  EXPECT_EQ(r.chosen_point().plan, "a");
  EXPECT_FALSE(r.chosen_by_measure);
}

// The whole search on stories260K (5 layers) at tp 2 returns the plan an
// exhaustive search of every plan scored whole returns: the fastest within
// the budget.
TEST(PlanSearch, ReturnsTheExhaustiveOptimumOnStories260K) {
  const std::string src = STRATA_SOURCE_DIR;
  CheckpointInfo info;
  auto model = load_model(src + "/checkpoints/stories260K.h5", &info);
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, "stories260K.h5");
  std::ifstream f(src + "/data/corpora/tinystories/tinystories_sample.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str().substr(0, 1000);
  const int L = model->config().num_hidden_layers;
  std::map<std::string, double> scored;
  std::set<std::string> asked;  // by the search
  PlanQuality quality = [&](const std::string& plan) {
    asked.insert(plan);
    auto it = scored.find(plan);
    if (it != scored.end()) return it->second;
    model->set_plan(LayerPlan::parse(plan, L));
    return scored[plan] = text_perplexity(*model, tok, text, "sample", 0, 0, 8, {L}, false, true)
                              .back()
                              .mean_nll();
  };
  CostInputs in = hand_inputs(0.8);
  in.hidden = model->config().hidden_size;
  PlanSearchOptions o;
  o.tp = 2;
  for (double budget : {0.10, 0.30}) {
    o.budget = budget;
    asked.clear();
    const PlanSearchResult r = plan_search(quality, model->config(), in, o);
    const size_t searched = asked.size();
    // Exhaustive: every plan scored whole, the fastest within the budget.
    std::string best;
    double best_s = 1e300;
    for (const std::string& p : all_search_plans(model->config(), o)) {
      const double s = plan_cost(LayerPlan::parse(p, L), in).seconds;
      if (std::exp(quality(p) - r.standard_nll) - 1 <= budget + 1e-12 && s < best_s - 1e-15) {
        best = p;
        best_s = s;
      }
    }
    // The same time (another plan of equal time may be chosen) within the budget.
    EXPECT_NEAR(r.chosen_point().cost.seconds, best_s, 1e-15)
        << "budget " << budget << ": chose " << r.chosen_point().plan << ", optimum " << best;
    EXPECT_LE(std::exp(r.chosen_point().nll - r.standard_nll) - 1, budget + 1e-12);
    EXPECT_LT(searched, scored.size() / 4) << "the search scored most of the space";
    EXPECT_NE(r.chosen_point().plan, LayerPlan::standard(L).to_string());
  }
}

TEST(PlanRecovery, RetrainsOnlyWhatThePlanChanged) {
  const LayerPlan plan = LayerPlan::parse("standard,ladder*2,lp*2,spd,skip,ladder;spd_degree=2", 8);
  EXPECT_EQ(recovery_trainable(plan), (std::vector<std::string>{"layers:1-4", "layers:7-7"}));
  EXPECT_TRUE(recovery_trainable(LayerPlan::parse("standard,spd,skip,standard", 4)).empty());
  testing::TempDir dir;
  RecoveryInputs in;
  in.plan = plan;
  in.checkpoint = dir.path() + "/model.h5";
  in.calibration = dir.path() + "/text.txt";
  in.base_recipe = std::string(STRATA_SOURCE_DIR) + "/recipes/debug.toml";
  in.dir = dir.path();
  in.strata = "/bin/strata";
  in.steps = 40;
  const RecoveryFiles f = write_recovery(in);
  ASSERT_TRUE(f.spd && f.train);
  // Both recipes read as their commands read them.
  const Recipe spd = Recipe::load(dir.path() + "/spd.toml", {}, spd_recipe_schema());
  const SpdConfig sc = read_spd_config(spd);
  EXPECT_EQ(sc.blocks, std::vector<int>{5});
  EXPECT_EQ(sc.degree, 2);
  EXPECT_EQ(sc.out_dir, dir.path() + "/spd");
  const Recipe train = Recipe::load(dir.path() + "/train.toml", {}, train_recipe_schema());
  const TrainConfig tc = read_train_config(train);
  EXPECT_EQ(tc.model.init_from, dir.path() + "/spd/spd.h5");  // after the SPD stage
  EXPECT_EQ(tc.model.plan, plan.to_string());
  EXPECT_EQ(tc.training.trainable, (std::vector<std::string>{"layers:1-4", "layers:7-7"}));
  // The script: before, SPD, training, after, in that order.
  std::ifstream sh(f.script);
  std::stringstream text;
  text << sh.rdbuf();
  const std::string s = text.str();
  const size_t before = s.find("before.json"), spd_at = s.find("\"$strata\" spd "),
               train_at = s.find("\"$strata\" train "),
               after = s.find("train/checkpoints/step_00000040.h5");
  ASSERT_NE(after, std::string::npos) << s;
  EXPECT_LT(before, spd_at);
  EXPECT_LT(spd_at, train_at);
  EXPECT_LT(train_at, after);
}

}  // namespace
}  // namespace strata
