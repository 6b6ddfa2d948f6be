// Every plan kind of the table (model/kinds/kinds.def, one row each) holds
// what a kind must, through the example plan of its row:
//   - its row is complete and its example parses and uses it;
//   - the executor's streams and loss equal the kind's equations
//     (tests/plan_reference.h, which fails for a kind it has no rule for);
//   - generation with a KV cache equals the cache-free path, or is refused
//     in one line where the row says a cache cannot run it;
//   - `strata train --help-recipe` names it, its summary and its options.
// The gradient check of every kind is tests/model_grad_test.cpp (suite
// Kinds/ModelGrad) and the tensor-parallel check tests/mpi_model_test.cpp
// (TensorParallel.EveryKindMatchesSingleProcessModel); both take the kinds
// from the same table, so a new kind's row brings it into all of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "infer/generate.h"
#include "model/kinds/kinds.h"
#include "model/model.h"
#include "plan_reference.h"
#include "testing.h"
#include "train/trainer.h"

namespace strata {
namespace {

TEST(Kinds, RowsAreCompleteAndTheirExamplesUseThem) {
  ASSERT_FALSE(kind_table().empty());
  for (const KindInfo* k : kind_table()) {
    SCOPED_TRACE(k->name);
    EXPECT_EQ(&kind_info(k->kind), k);
    EXPECT_STREQ(layer_kind_name(k->kind), k->name);
    EXPECT_GT(std::string(k->summary).size(), 10u);
    const LayerPlan plan = LayerPlan::parse(k->example, 4);
    EXPECT_NE(std::find(plan.kinds.begin(), plan.kinds.end(), k->kind), plan.kinds.end())
        << "the example '" << k->example << "' has no " << k->name << " layer";
    EXPECT_EQ(LayerPlan::parse(plan.to_string(), 4).to_string(), plan.to_string());
    for (const PlanUnit& u : plan.units())
      EXPECT_TRUE(u.kind != k->kind || k->unit_size <= 0 || u.size == k->unit_size)
          << "a unit of " << u.size << " layers";
    for (const KindOption& o : k->options) {
      EXPECT_LE(o.lo, o.hi) << o.key;
      EXPECT_NE(o.help, nullptr) << o.key;
    }
    // Its code for both element types (a null entry would have failed kind_table()).
    EXPECT_NE(k->f32.forward, nullptr);
    EXPECT_NE(k->f64.backward, nullptr);
  }
}

TEST(Kinds, EveryKindMatchesItsReference) {
  for (const KindInfo* k : kind_table()) {
    SCOPED_TRACE(k->example);
    const LlamaConfig c = testing::plan_test_config(4, false, true);
    const LayerPlan plan = LayerPlan::parse(k->example, 4);
    Model<double> m(c, plan, ops::make_backend<double>());
    testing::expect_streams_match_reference(m, plan);  // the model's first pass: pass 0
  }
}

TEST(Kinds, GenerationFollowsTheRow) {
  for (const KindInfo* k : kind_table()) {
    SCOPED_TRACE(k->example);
    const LlamaConfig c = testing::plan_test_config(4, false, true);
    Model<float> m(c, LayerPlan::parse(k->example, 4), ops::make_backend<float>());
    m.init_weights(7);
    if (k->no_generation) {
      GenerateOptions o;
      o.max_new_tokens = 2;
      EXPECT_ERROR(generate(m, {1, 2}, o), "has ", k->name, " layers, ", k->no_generation);
      continue;
    }
    testing::expect_cache_matches_no_cache(m, 4);
  }
}

TEST(Kinds, HelpRecipeNamesEveryKindAndOption) {
  const std::string help = schema_help(train_recipe_schema());
  for (const KindInfo* k : kind_table()) {
    EXPECT_NE(help.find(std::string(k->name) + ": " + k->summary), std::string::npos) << k->name;
    for (const KindOption& o : k->options)
      EXPECT_NE(help.find(std::string("option ") + o.key), std::string::npos) << o.key;
  }
}

// A plan whose kind reads the stream inside the unit below is refused after a
// unit without one, in the row's words.
TEST(Kinds, StreamBelowRule) {
  for (const KindInfo* above : kind_table())
    for (const KindInfo* below : kind_table()) {
      if (!above->reads_stream_below || below->inner_stream) continue;
      const int n = below->unit_size > 0 ? below->unit_size : 2;
      const std::string text =
          std::string(below->name) + "*" + std::to_string(n) + "," + above->name;
      EXPECT_ERROR(LayerPlan::parse(text, n + 1), "is a ", above->name, " layer right after a ",
                   below->unit_noun);
    }
}

}  // namespace
}  // namespace strata
