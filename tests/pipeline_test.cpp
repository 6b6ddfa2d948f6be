// Pipeline parallelism's schedule side (parallel/pipeline.h): the stage
// split is the optimum (checked against every split on small cases); GPipe,
// 1F1B and interleaved 1F1B run every pass exactly once without deadlock,
// with the bubble of their closed forms, 1F1B's bounded activations, and the
// expected number of sends per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "model/config.h"
#include "model/plan.h"
#include "model/stages.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "testing.h"

namespace strata::pipeline {
namespace {

// The least maximum stage cost over every contiguous split (brute force).
double best_by_enumeration(const std::vector<double>& c, double emb, double head, int stages) {
  const int n = int(c.size());
  double best = 1e300;
  std::vector<int> first(size_t(stages) + 1, 0);
  first[size_t(stages)] = n;
  std::function<void(int)> go = [&](int k) {
    if (k == stages) {
      double worst = 0;
      for (int s = 0; s < stages; ++s) {
        double x = (s == 0 ? emb : 0) + (s == stages - 1 ? head : 0);
        for (int u = first[size_t(s)]; u < first[size_t(s) + 1]; ++u) x += c[size_t(u)];
        worst = std::max(worst, x);
      }
      best = std::min(best, worst);
      return;
    }
    for (int f = first[size_t(k) - 1] + 1; f <= n - (stages - k); ++f) {
      first[size_t(k)] = f;
      go(k + 1);
    }
  };
  go(1);
  return best;
}

TEST(PipelineStages, SplitsEvenlyAndCountsTheEmbeddingAndHead) {
  const StageSplit even = partition_stages(std::vector<double>(12, 1.0), 0, 0, 4);
  EXPECT_EQ(even.first, (std::vector<int>{0, 3, 6, 9, 12}));
  EXPECT_EQ(even.cost, (std::vector<double>{3, 3, 3, 3}));
  // A head as costly as two layers (a large vocabulary) leaves the last
  // stage fewer layers; the embedding (a lookup) nearly nothing.
  const StageSplit head = partition_stages(std::vector<double>(16, 1.0), 0.1, 2.0, 4);
  EXPECT_EQ(head.first, (std::vector<int>{0, 4, 8, 13, 16}));
  EXPECT_EQ(head.cost, (std::vector<double>{4.1, 4, 5, 5}));
  EXPECT_EQ(partition_stages({1, 2, 3}, 0, 0, 1).first, (std::vector<int>{0, 3}));
  EXPECT_EQ(partition_stages({1, 2, 3}, 0, 0, 3).first, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_ERROR(partition_stages({1, 1}, 0, 0, 3), "3 stages for 2 units", "never split");
  EXPECT_ERROR(partition_stages({1, -1}, 0, 0, 1), "a unit costs -1");
}

TEST(PipelineStages, TheSplitIsOptimal) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 9), stages = 1 + int(rng() % std::min(n, 4));
    std::vector<double> c(static_cast<size_t>(n));
    for (double& x : c) x = u(rng);
    const double emb = u(rng) / 3, head = u(rng);
    const StageSplit s = partition_stages(c, emb, head, stages);
    ASSERT_EQ(s.first.size(), size_t(stages) + 1);
    for (int k = 0; k < stages; ++k) EXPECT_LT(s.first[size_t(k)], s.first[size_t(k) + 1]);
    EXPECT_DOUBLE_EQ(*std::max_element(s.cost.begin(), s.cost.end()),
                     best_by_enumeration(c, emb, head, stages))
        << "trial " << trial;
  }
}

TEST(PipelineSchedules, EveryPassOnceWithTheClosedFormBubble) {
  for (Schedule sched : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    for (int p : {1, 2, 3, 4, 8})
      for (int v : {1, 2, 3})
        for (int m = 1; m <= 16; ++m) {
          if (sched != Schedule::Interleaved && v != 1) continue;
          if (sched == Schedule::Interleaved && m % p != 0) continue;
          SCOPED_TRACE(::testing::Message()
                       << schedule_name(sched) << " p=" << p << " v=" << v << " m=" << m);
          const auto plan = make_schedule(sched, p, m, v);
          // Equal stages; a backward twice a forward (the usual ratio).
          const int stages = p * v;
          const Timing t = simulate(plan, std::vector<double>(size_t(stages), 1.0 / v),
                                    std::vector<double>(size_t(stages), 2.0 / v));
          EXPECT_NEAR(t.bubble, bubble_formula(sched, p, m, v), 1e-12);
          EXPECT_NEAR(t.makespan, (m * v + p - 1) * 3.0 / v, 1e-9);
          for (int r = 0; r < p; ++r) {
            if (sched == Schedule::GPipe) {
              EXPECT_EQ(t.max_in_flight[size_t(r)], m);
            }
            if (sched == Schedule::OneFOneB) {
              EXPECT_EQ(t.max_in_flight[size_t(r)], std::min(p - r, m));
            }
            // Activations forward from every stage but the last, gradients
            // back from every stage but the first, when the next stage is
            // on another rank.
            const int sends = p == 1 ? 0 : m * (v - (r == p - 1)) + m * (v - (r == 0));
            EXPECT_EQ(t.sends[size_t(r)], sends);
          }
        }
}

// 1F1B holds p activations instead of m, in the same time; but its steady
// state waits on a round trip per step, so a send latency costs it more than
// GPipe (which pays it 2 (p - 1) times): why sends are posted early.
TEST(PipelineSchedules, OneFOneBBeatsGPipeOnMemoryNotOnTime) {
  const int p = 4, m = 8;
  const std::vector<double> f(p, 1.0), b(p, 2.0);
  EXPECT_DOUBLE_EQ(simulate(make_schedule(Schedule::GPipe, p, m), f, b).makespan,
                   simulate(make_schedule(Schedule::OneFOneB, p, m), f, b).makespan);
  const Timing g = simulate(make_schedule(Schedule::GPipe, p, m), f, b, 0.25);
  const Timing o = simulate(make_schedule(Schedule::OneFOneB, p, m), f, b, 0.25);
  EXPECT_DOUBLE_EQ(g.makespan, (m + p - 1) * 3.0 + 2 * (p - 1) * 0.25);
  EXPECT_GT(o.makespan, g.makespan);
  const Timing i = simulate(make_schedule(Schedule::Interleaved, p, m, 2),
                            std::vector<double>(2 * p, 0.5), std::vector<double>(2 * p, 1.0), 0.25);
  EXPECT_EQ(g.max_in_flight[0], 8);
  EXPECT_EQ(o.max_in_flight[0], 4);
  EXPECT_LT(i.bubble, o.bubble);      // interleaving shrinks the bubble...
  EXPECT_GT(i.sends[1], o.sends[1]);  // ...for twice the messages
}

TEST(PipelineSchedules, BadRequestsAreOneLineErrors) {
  EXPECT_ERROR(parse_schedule("zb"), "pipeline schedule 'zb': gpipe, 1f1b or interleaved");
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::OneFOneB);
  EXPECT_ERROR(make_schedule(Schedule::Interleaved, 4, 6, 2), "multiple of the pipeline ranks");
  EXPECT_ERROR(make_schedule(Schedule::OneFOneB, 2, 4, 2), "need the interleaved schedule");
  EXPECT_ERROR(make_schedule(Schedule::GPipe, 0, 4), "each at least 1");
  // A schedule that waits on itself: the first rank's backward before any
  // forward reached the last stage.
  std::vector<std::vector<Pass>> bad = make_schedule(Schedule::GPipe, 2, 1);
  std::swap(bad[0][0], bad[0][1]);
  EXPECT_ERROR(simulate(bad, {1, 1}, {1, 1}), "deadlocks");
  std::vector<std::vector<Pass>> twice = make_schedule(Schedule::GPipe, 1, 2);
  twice[0][1] = twice[0][0];
  EXPECT_ERROR(simulate(twice, {1}, {1}), "twice");
}

// A model's stages: units of its plan, costed by FLOPs (model/stages.h).
LlamaConfig small_model(int layers, int vocab) {
  LlamaConfig c;
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.num_hidden_layers = layers;
  c.vocab_size = vocab;
  c.max_position_embeddings = 512;
  c.finalize();
  return c;
}

TEST(PipelineModelStages, LayersByFlopsWithTheHeadOnTheLastStage) {
  // h 256, q 256, kv 128, ffn 688, seq 512: 2 (2*256*256 + 2*256*128) +
  // 6*256*688 + 2*256*512 = 393,216 + 1,056,768 + 262,144 = 1,712,128 per layer.
  const LlamaConfig small = small_model(12, 512);
  EXPECT_DOUBLE_EQ(layer_forward_flops(small, 512), 1712128.0);
  const auto even = plan_stages(small, LayerPlan::standard(12), 512, 4);
  EXPECT_EQ(even.first, (std::vector<int>{0, 3, 6, 9, 12}));  // a 512-token head costs little
  // A 128k vocabulary: the head (2 * 256 * 128000 = 65.5 M, about 38 layers)
  // gets a stage of its own nearly; the split stays optimal.
  const LlamaConfig big_vocab = small_model(12, 128000);
  const auto head = plan_stages(big_vocab, LayerPlan::standard(12), 512, 2);
  EXPECT_EQ(head.first, (std::vector<int>{0, 11, 12}));
  // Skipped layers cost nothing: the stage holding them takes more layers.
  const LayerPlan skips = LayerPlan::parse("standard*6,skip*6", 12);
  EXPECT_EQ(plan_stages(small, skips, 512, 2).first, (std::vector<int>{0, 3, 12}));
  // LP pairs are units: never split, so 3 pairs cannot make 4 stages.
  const LayerPlan lp = LayerPlan::parse("lp*6", 6);
  const LlamaConfig six = small_model(6, 512);
  EXPECT_EQ(lp.units().size(), 3u);
  EXPECT_EQ(plan_stages(six, lp, 512, 3).first, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_ERROR(plan_stages(six, lp, 512, 4), "4 stages for 3 units");
}

// Where the grid's groups sit (parallel/grid.h): 2 nodes of 4 ranks at tp 4
// keep each tp group on a node and a pipeline of pp 2 across both; 3 ranks
// to a node split the second tp group of 2; one node says nothing.
TEST(Placement, TensorParallelGroupsInsideANodePipelinesAcross) {
  const std::vector<std::string> two_by_four = {"a", "a", "a", "a", "b", "b", "b", "b"};
  Placement p = describe_placement(two_by_four, 4, 2);
  EXPECT_EQ(p.nodes, 2);
  EXPECT_EQ(p.most_ranks_on_a_node, 4);
  EXPECT_TRUE(p.split_tp_groups.empty());
  EXPECT_EQ(p.pipeline_nodes, 2);
  EXPECT_EQ(p.dp_nodes, 1);
  EXPECT_EQ(p.summary,
            "placement: 8 ranks on 2 nodes (at most 4 on one); tensor-parallel groups inside a "
            "node; a pipeline spans up to 2 nodes");
  // The docs' examples: tp 8 x pp 2 on two nodes of 8, tp 4 on 12 ranks, 6 to a node.
  std::vector<std::string> sixteen(8, "n1"), twelve(6, "n1");
  sixteen.resize(16, "n2");
  twelve.resize(12, "n2");
  EXPECT_EQ(describe_placement(sixteen, 8, 2).summary,
            "placement: 16 ranks on 2 nodes (at most 8 on one); tensor-parallel groups inside a "
            "node; a pipeline spans up to 2 nodes");
  const Placement q = describe_placement(twelve, 4, 1);
  EXPECT_EQ(q.summary,
            "placement: 12 ranks on 2 nodes (at most 6 on one); tensor-parallel groups 1 of 3 "
            "across nodes; a data-parallel group up to 2 nodes");
  EXPECT_EQ(q.warning.substr(0, 91),
            "placement: 1 of 3 tensor-parallel groups span nodes (the first, world ranks 4-7, is "
            "on n1, ");
  EXPECT_EQ(p.warning, "");
  // tp 2 x dp 4 on the same nodes: data parallelism crosses them.
  p = describe_placement(two_by_four, 2, 1);
  EXPECT_TRUE(p.split_tp_groups.empty());
  EXPECT_EQ(p.dp_nodes, 2);
  EXPECT_EQ(p.pipeline_nodes, 1);

  const std::vector<std::string> threes = {"n1", "n1", "n1", "n2", "n2", "n2"};
  p = describe_placement(threes, 2, 1);
  EXPECT_EQ(p.split_tp_groups, std::vector<int>{2});
  EXPECT_NE(p.summary.find("tensor-parallel groups 1 of 3 across nodes"), std::string::npos)
      << p.summary;
  EXPECT_EQ(p.warning,
            "placement: 1 of 3 tensor-parallel groups span nodes (the first, world ranks 2-3, is "
            "on n1, n2): their all-reduces of every layer cross the network; start a multiple of "
            "tp = 2 ranks on each node, in rank order (srun --ntasks-per-node, mpirun --map-by "
            "ppr:N:node)");

  p = describe_placement({"x", "x", "x", "x"}, 2, 2);
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.summary, "");
  EXPECT_EQ(p.warning, "");
  EXPECT_EQ(describe_placement({}, 1, 1).nodes, 1);  // one process: nothing gathered
}

}  // namespace
}  // namespace strata::pipeline
