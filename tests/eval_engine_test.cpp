// The scoring engine: loglikelihood against a hand computation, the harness's
// tokenisation rules, left truncation, acc vs acc_norm, batch-size invariance,
// exits, and rolling perplexity.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "eval/engine.h"
#include "eval/evaluate.h"
#include "model/model.h"
#include "testing.h"

namespace strata {
namespace {

const Tokenizer& tok512() {
  static const Tokenizer t =
      Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model");
  return t;
}

std::unique_ptr<Model<float>> tiny_model(int layers = 3, int max_pos = 48) {
  LlamaConfig c;
  c.vocab_size = 512;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = max_pos;
  c.initializer_range = 0.2;
  c.finalize();
  auto m = std::make_unique<Model<float>>(c, ops::make_backend<float>());
  m->init_weights(17);
  return m;
}

// Options for tasks of the shipped eval/ directory, quiet.
EvalOptions task_options(std::vector<std::string> tasks, int64_t limit) {
  EvalOptions o;
  o.tasks = std::move(tasks);
  o.limit = limit;
  o.eval_dir = std::string(STRATA_SOURCE_DIR) + "/eval";
  o.progress = false;
  return o;
}

// log P(targets at positions first..) computed the plain way: full logits of
// the whole sequence, log-softmax in double.
double reference_logprob(Model<float>& m, const std::vector<int32_t>& inputs,
                         const std::vector<int32_t>& targets, int first, int exit_layer = 0) {
  const int T = int(inputs.size()), V = m.config().vocab_size, C = m.config().hidden_size;
  std::vector<float> logits(size_t(T) * V);
  if (exit_layer == 0) {
    m.forward_logits(inputs.data(), 1, T, logits.data());
  } else {
    m.forward_hidden(inputs.data(), 1, T, exit_layer);
    std::vector<float> xn(size_t(T) * C);
    m.head_rows(m.hidden_state(exit_layer - 1), T, logits.data(), xn.data());
  }
  double lp = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    const float* l = logits.data() + size_t(first + k) * V;
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(l[v]));
    for (int v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
    lp += double(l[targets[k]]) - mx - std::log(z);
  }
  return lp;
}

TEST(Scorer, LoglikelihoodEqualsHandComputation) {
  auto m = tiny_model();
  Scorer s(*m, tok512(), 4, {});
  const LlRequest r{"Once upon a time there was", " a little dog"};
  std::vector<int32_t> ctx, cont;
  s.tokenize(r, ctx, cont);
  EXPECT_EQ(ctx, tok512().encode("Once upon a time there was"));
  std::vector<int32_t> whole = tok512().encode("Once upon a time there was a little dog");
  EXPECT_EQ(cont, std::vector<int32_t>(whole.begin() + int64_t(ctx.size()), whole.end()));
  std::vector<int32_t> inputs = {tok512().bos_id()};
  inputs.insert(inputs.end(), whole.begin(), whole.end() - 1);
  const double want = reference_logprob(*m, inputs, cont, int(ctx.size()));
  const auto got = s.loglikelihood({r});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0][0].logprob, want, 1e-5 * std::fabs(want));
  EXPECT_EQ(got[0][0].tokens, int(cont.size()));
}

TEST(Scorer, TrailingContextSpacesMoveToTheContinuation) {
  auto m = tiny_model();
  Scorer s(*m, tok512(), 2, {});
  std::vector<int32_t> c1, k1, c2, k2;
  s.tokenize({"The cat sat on the ", "mat"}, c1, k1);
  s.tokenize({"The cat sat on the", " mat"}, c2, k2);
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(k1, k2);
  const auto r = s.loglikelihood({{"The cat sat on the ", "mat"}, {"The cat sat on the", " mat"}});
  EXPECT_EQ(r[0][0].logprob, r[0][1].logprob);
}

TEST(Scorer, LongContextIsCutFromTheLeftKeepingBos) {
  auto m = tiny_model(2, 16);
  Scorer s(*m, tok512(), 2, {});
  const LlRequest r{"Once upon a time, in a land far away, there lived a very old king who",
                    " ruled"};
  std::vector<int32_t> ctx, cont;
  s.tokenize(r, ctx, cont);
  ASSERT_GT(ctx.size() + cont.size(), 16u);
  const std::vector<int32_t> kept(ctx.end() - int64_t(16 - cont.size()), ctx.end());
  std::vector<int32_t> inputs = {tok512().bos_id()};
  inputs.insert(inputs.end(), kept.begin(), kept.end());
  inputs.insert(inputs.end(), cont.begin(), cont.end() - 1);
  ASSERT_EQ(inputs.size(), 16u);
  const double want = reference_logprob(*m, inputs, cont, int(kept.size()));
  const LlRequest short_r{"Once upon a time", " there"};
  const auto res = s.loglikelihood({r, short_r})[0];
  EXPECT_NEAR(res[0].logprob, want, 1e-5 * std::fabs(want));
  // Truncation is reported per request (and counted per task).
  EXPECT_TRUE(res[0].truncated);
  EXPECT_FALSE(res[1].truncated);
}

// Scores do not depend on the batch size (nor on the other requests in a
// batch) beyond float rounding: the GEMMs' summation order can change with
// the number of rows, by about 1e-7 relative.
TEST(Scorer, BatchSizeInvariant) {
  auto m = tiny_model();
  std::vector<LlRequest> reqs;
  const char* ctxs[] = {"Once upon a time", "The sun", "She said that the little bird", "A",
                        "They went to the park and played with a ball until"};
  const char* conts[] = {" there was", " is hot", " could sing", " boy", " it got dark"};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) reqs.push_back({ctxs[i], conts[j]});
  std::vector<std::vector<std::vector<LlResult>>> runs;
  for (int bs : {1, 3, 8, 25}) runs.push_back(Scorer(*m, tok512(), bs, {}).loglikelihood(reqs));
  for (size_t b = 1; b < runs.size(); ++b)
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_NEAR(runs[b][0][i].logprob, runs[0][0][i].logprob,
                  1e-6 * std::fabs(runs[0][0][i].logprob))
          << "request " << i << " batch run " << b;
      EXPECT_EQ(runs[b][0][i].greedy, runs[0][0][i].greedy);
    }
}

// Several exits in one pass equal separate evaluations at each exit, and the
// last exit is the full model.
TEST(Scorer, PerExitEqualsSeparateRuns) {
  auto m = tiny_model(3);
  const std::vector<LlRequest> reqs = {{"Once upon a time", " there"}, {"The dog", " ran away"}};
  const auto all = Scorer(*m, tok512(), 2, {1, 2, 3}).loglikelihood(reqs);
  for (int e = 1; e <= 3; ++e) {
    const auto one = Scorer(*m, tok512(), 2, {e}).loglikelihood(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(all[e - 1][i].logprob, one[0][i].logprob);
  }
  const auto full = Scorer(*m, tok512(), 2, {}).loglikelihood(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(all[2][i].logprob, full[0][i].logprob);
  // Exit 1 is the first layer followed by the final norm and head.
  std::vector<int32_t> ctx, cont;
  Scorer(*m, tok512(), 1, {}).tokenize(reqs[1], ctx, cont);
  std::vector<int32_t> inputs = {tok512().bos_id()};
  inputs.insert(inputs.end(), ctx.begin(), ctx.end());
  inputs.insert(inputs.end(), cont.begin(), cont.end() - 1);
  EXPECT_NEAR(all[0][1].logprob, reference_logprob(*m, inputs, cont, int(ctx.size()), 1), 1e-4);
  EXPECT_NE(all[0][1].logprob, all[2][1].logprob);
  EXPECT_THROW(Scorer(*m, tok512(), 1, {4}), Error);
}

// acc takes the best summed logprob, acc_norm the best per byte of the choice.
TEST(Scorer, AccAndAccNormDisagreeWhenLengthsDo) {
  EvalExample ex;
  ex.requests = {{"Q:", " yes"}, {"Q:", " a much longer answer"}};
  ex.gold = 1;
  std::vector<LlResult> r(2);
  r[0].logprob = -3.0;   // 3 bytes ("yes"): -1.0 per byte
  r[1].logprob = -10.0;  // 20 bytes: -0.5 per byte
  const ChoicePick p = pick_choice(ex, r, 0);
  EXPECT_EQ(p.acc, 0);
  EXPECT_EQ(p.acc_norm, 1);
  r[1].logprob = -25.0;  // -1.25 per byte: now both pick choice 0
  EXPECT_EQ(pick_choice(ex, r, 0).acc_norm, 0);
}

// Task metrics are identical for any batch size.
// --log-samples: one JSONL line per example with the harness's fields; the
// per-sample metrics average to the task's, the logged loglikelihoods decide
// acc, and the rendered requests are the task's own. Two exits: a file each.
TEST(Evaluate, PerSampleLogsAgreeWithTheTaskMetrics) {
  auto m = tiny_model(2, 128);
  testing::TempDir dir;
  EvalOptions o = task_options({"copa", "lambada"}, 9);
  o.exits = {1, 2};
  o.log_samples_dir = dir / "samples";
  const auto results = evaluate_tasks(*m, tok512(), o);
  const TaskData copa = load_task(o.eval_dir, "copa", -1, o.seed, o.limit);
  for (size_t e = 0; e < 2; ++e)
    for (size_t t = 0; t < 2; ++t) {
      const TaskResult& tr = results[e][t];
      const std::string path =
          dir / ("samples/samples_" + tr.task + "_exit" + std::to_string(o.exits[e]) + ".jsonl");
      std::ifstream in(path);
      ASSERT_TRUE(in.good()) << path;
      std::string line;
      double acc = 0;
      int64_t n = 0;
      while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        for (const char* key : {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps",
                                "filter", "metrics", "doc_hash", "prompt_hash", "target_hash"})
          EXPECT_TRUE(j.contains(key)) << key << " in " << path;
        EXPECT_EQ(j["doc_id"].get<int64_t>(), n);
        EXPECT_EQ(j["prompt_hash"].get<std::string>().size(), 64u);
        acc += j["acc"].get<double>();
        if (tr.task == "copa") {
          const EvalExample& ex = copa.examples[size_t(n)];
          ASSERT_EQ(j["filtered_resps"].size(), ex.requests.size());
          EXPECT_EQ(j["arguments"]["gen_args_1"]["arg_0"].get<std::string>(),
                    ex.requests[1].context);
          EXPECT_EQ(j["arguments"]["gen_args_1"]["arg_1"].get<std::string>(),
                    ex.requests[1].continuation);
          EXPECT_EQ(j["target"].get<int>(), ex.gold);
          // acc is the argmax of the logged loglikelihoods.
          const auto& r = j["filtered_resps"];
          const int best = r[1][0].get<double>() > r[0][0].get<double>() ? 1 : 0;
          EXPECT_EQ(j["acc"].get<double>(), best == ex.gold ? 1.0 : 0.0);
        } else {
          EXPECT_EQ(j["acc"].get<double>(), j["filtered_resps"][0][1].get<bool>() ? 1.0 : 0.0);
        }
        ++n;
      }
      EXPECT_EQ(n, tr.n) << path;
      EXPECT_NEAR(acc / double(n), tr.metrics[0].value, 1e-12) << path;
    }
}

// --output-format lm-eval: the harness's results.json layout, checked like a
// schema: every task key in every table, "<metric>,none" numbers with their
// "_stderr,none" (a number or "N/A"), MMLU's group = the micro average with
// its subjects as mmlu_<subject> subtasks.
TEST(Evaluate, LmEvalResultsLayout) {
  auto m = tiny_model(2, 128);
  const EvalOptions o = task_options({"copa", "lambada", "mmlu", "tinystories"}, 4);
  const auto results = evaluate_tasks(*m, tok512(), o);
  const nlohmann::json cfg = {{"model", "strata"}, {"limit", o.limit}};
  const nlohmann::json j = lm_eval_results(results, {2}, cfg);
  for (const char* table : {"results", "groups", "group_subtasks", "configs", "versions", "n-shot",
                            "higher_is_better", "n-samples", "config"})
    ASSERT_TRUE(j.contains(table)) << table;
  for (const TaskResult& t : results[0]) {
    SCOPED_TRACE(t.task);
    for (const char* table : {"results", "configs", "versions", "n-shot", "higher_is_better"})
      EXPECT_TRUE(j[table].contains(t.task)) << table;
    EXPECT_EQ(j["n-samples"][t.task]["effective"].get<int64_t>(), t.n);
    EXPECT_TRUE(j["n-samples"][t.task]["original"].is_null());  // a --limit run
    for (const auto& [key, value] : j["results"][t.task].items()) {
      if (key == "alias") continue;
      const auto comma = key.find(',');
      ASSERT_NE(comma, std::string::npos) << key;
      EXPECT_EQ(key.substr(comma), ",none");
      if (key.find("_stderr,") == std::string::npos) {
        EXPECT_TRUE(value.is_number()) << key;
        const std::string se = key.substr(0, comma) + "_stderr,none";
        ASSERT_TRUE(j["results"][t.task].contains(se)) << se;
        const auto& s = j["results"][t.task][se];
        EXPECT_TRUE(s.is_number() || s == "N/A") << se;
      }
    }
  }
  const auto find = [&](const std::string& task, const std::string& metric) {
    for (const TaskResult& t : results[0])
      if (t.task == task)
        for (const Metric& mt : t.metrics)
          if (mt.name == metric) return mt.value;
    return -1.0;
  };
  EXPECT_EQ(j["results"]["copa"]["acc,none"].get<double>(), find("copa", "acc"));
  EXPECT_EQ(j["results"]["mmlu"]["acc,none"].get<double>(), find("mmlu", "acc"));
  EXPECT_EQ(j["results"]["mmlu"]["acc_macro,none"].get<double>(), find("mmlu", "acc_macro"));
  EXPECT_EQ(j["groups"]["mmlu"]["acc,none"], j["results"]["mmlu"]["acc,none"]);
  ASSERT_FALSE(j["group_subtasks"]["mmlu"].empty());
  for (const auto& sub : j["group_subtasks"]["mmlu"]) {
    EXPECT_EQ(sub.get<std::string>().rfind("mmlu_", 0), 0u);
    EXPECT_TRUE(j["results"].contains(sub.get<std::string>()));
  }
  EXPECT_EQ(j["configs"]["tinystories"]["output_type"], "loglikelihood_rolling");
  EXPECT_EQ(j["configs"]["lambada"]["output_type"], "loglikelihood");
  EXPECT_EQ(j["configs"]["copa"]["output_type"], "multiple_choice");
  EXPECT_EQ(j["higher_is_better"]["tinystories"]["word_perplexity"], false);
  EXPECT_EQ(j["higher_is_better"]["copa"]["acc"], true);
  EXPECT_EQ(j["n-shot"]["mmlu"], 5);
}

// MMLU's headline acc is the harness's: the mean over every question (its
// group weights subjects by size); acc_macro gives each subject once. Over
// two subjects of different sizes (100 and 35 questions) they differ.
TEST(Evaluate, MmluAccIsTheMicroAverage) {
  auto m = tiny_model(1, 1024);
  testing::TempDir dir;
  EvalOptions o = task_options({"mmlu"}, 135);
  o.shots = 0;
  o.batch_size = 32;
  o.log_samples_dir = dir.path();
  const TaskResult r = evaluate_tasks(*m, tok512(), o)[0][0];
  ASSERT_EQ(r.groups.size(), 2u);
  std::ifstream in(dir / "samples_mmlu.jsonl");
  std::string line;
  std::map<std::string, std::pair<double, int>> per;  // subject -> (correct, n)
  double correct = 0;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const double a = j["acc"].get<double>();
    per[j["doc"]["group"].get<std::string>()].first += a;
    per[j["doc"]["group"].get<std::string>()].second += 1;
    correct += a;
    ++n;
  }
  ASSERT_EQ(n, 135);
  double macro = 0;
  for (const auto& [g, cn] : per) macro += cn.first / cn.second;
  macro /= double(per.size());
  ASSERT_EQ(r.metrics[0].name, "acc");
  ASSERT_EQ(r.metrics[1].name, "acc_macro");
  EXPECT_NEAR(r.metrics[0].value, correct / n, 1e-12);
  EXPECT_NEAR(r.metrics[1].value, macro, 1e-12);
  EXPECT_NE(per.begin()->second.second, per.rbegin()->second.second);
}

// A model with a 16-token context cuts COPA's requests: the task counts
// them, the JSON and the per-sample logs say so.
TEST(Evaluate, TruncatedRequestsAreCountedPerTask) {
  auto m = tiny_model(1, 16);
  testing::TempDir dir;
  EvalOptions o = task_options({"copa"}, 6);
  o.log_samples_dir = dir.path();
  const TaskResult r = evaluate_tasks(*m, tok512(), o)[0][0];
  EXPECT_GT(r.truncated, 0);
  EXPECT_EQ(r.to_json()["truncated_requests"].get<int64_t>(), r.truncated);
  std::ifstream in(dir / "samples_copa.jsonl");
  std::string line;
  int flagged = 0;
  while (std::getline(in, line)) flagged += nlohmann::json::parse(line)["truncated"].get<bool>();
  EXPECT_GT(flagged, 0);
  // The same task with room for every request: none.
  auto big = tiny_model(1, 256);
  o.log_samples_dir.clear();
  EXPECT_EQ(evaluate_tasks(*big, tok512(), o)[0][0].truncated, 0);
}

TEST(Evaluate, TaskMetricsDoNotChangeWithBatchSize) {
  auto m = tiny_model(2, 128);
  std::vector<std::vector<TaskResult>> runs;
  for (int bs : {1, 5, 16}) {
    EvalOptions o;
    o.tasks = {"arc_easy", "boolq", "lambada"};
    o.limit = 12;
    o.batch_size = bs;
    o.eval_dir = std::string(STRATA_SOURCE_DIR) + "/eval";
    o.progress = false;
    runs.push_back(evaluate_tasks(*m, tok512(), o)[0]);
  }
  for (size_t b = 1; b < runs.size(); ++b)
    for (size_t t = 0; t < runs[0].size(); ++t)
      for (size_t k = 0; k < runs[0][t].metrics.size(); ++k) {
        const Metric &x = runs[0][t].metrics[k], &y = runs[b][t].metrics[k];
        if (x.name == "perplexity")
          EXPECT_NEAR(y.value, x.value, 1e-5 * x.value);
        else
          EXPECT_EQ(y.value, x.value) << runs[0][t].task << " " << x.name;
      }
}

TEST(Scorer, RollingScoresEveryTokenOnceWithTheRightContext) {
  auto m = tiny_model(2, 12);
  std::vector<int32_t> ids = {tok512().bos_id()};
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t(3 + (i * 37) % 500));
  // Reference: window W, stride S; token j scored by the first span [a, a+W)
  // with a + W > j, from inputs ids[a .. j).
  auto reference = [&](int W, int S) {
    double nll = 0;
    for (size_t j = 1; j < ids.size(); ++j) {
      size_t a = 0;
      while (a + size_t(W) <= j) a += size_t(S);
      const std::vector<int32_t> inputs(ids.begin() + int64_t(a), ids.begin() + int64_t(j));
      nll -= reference_logprob(*m, inputs, {ids[j]}, int(inputs.size()) - 1);
    }
    return nll;
  };
  for (auto [W, S] : {std::pair{13, 12}, std::pair{13, 5}, std::pair{6, 5}, std::pair{8, 1}})
    for (int bs : {1, 4}) {
      const auto r = Scorer(*m, tok512(), bs, {}).rolling(ids, W, S);
      EXPECT_EQ(r[0].tokens, int64_t(ids.size()) - 1) << W << "/" << S;
      const double want = reference(W, S);
      EXPECT_NEAR(r[0].nll, want, 1e-5 * want) << "window " << W << " stride " << S;
    }
  EXPECT_THROW(Scorer(*m, tok512(), 1, {}).rolling(ids, 14, 13), Error);  // window - 1 > context
  EXPECT_THROW(Scorer(*m, tok512(), 1, {}).rolling(ids, 13, 13), Error);  // stride > window - 1
}

}  // namespace
}  // namespace strata
