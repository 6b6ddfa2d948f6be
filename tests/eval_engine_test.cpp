// The scoring engine: loglikelihood against a hand computation, the harness's
// tokenisation rules, left truncation, acc vs acc_norm, batch-size invariance,
// exits, and rolling perplexity; generate_until tasks (stop strings, filters,
// exact_match, HumanEval through the sandbox); chat-template rendering.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "eval/engine.h"
#include "eval/evaluate.h"
#include "infer/generate.h"
#include "json_schema.h"
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
  // All trailing whitespace, as Python's rstrip(): newlines too.
  std::vector<int32_t> c3, k3, c4, k4;
  s.tokenize({"Question: why?\nAnswer:\n", "Because"}, c3, k3);
  s.tokenize({"Question: why?\nAnswer:", "\nBecause"}, c4, k4);
  EXPECT_EQ(c3, c4);
  EXPECT_EQ(k3, k4);
  const auto r = s.loglikelihood({{"The cat sat on the ", "mat"}, {"The cat sat on the", " mat"}});
  EXPECT_EQ(r[0][0].logprob, r[0][1].logprob);
}

// The harness's rule: of BOS + context + continuation the last max_len + 1
// tokens are kept, the last being only a target; BOS falls off with the
// oldest context.
TEST(Scorer, LongContextIsCutFromTheLeftAsTheHarnessDoes) {
  auto m = tiny_model(2, 16);
  Scorer s(*m, tok512(), 2, {});
  const LlRequest r{"Once upon a time, in a land far away, there lived a very old king who",
                    " ruled"};
  std::vector<int32_t> ctx, cont;
  s.tokenize(r, ctx, cont);
  ASSERT_GT(ctx.size() + cont.size(), 16u);
  std::vector<int32_t> full = {tok512().bos_id()};
  full.insert(full.end(), ctx.begin(), ctx.end());
  full.insert(full.end(), cont.begin(), cont.end());
  const std::vector<int32_t> inputs(full.end() - 17, full.end() - 1);
  ASSERT_NE(inputs[0], tok512().bos_id());
  const double want = reference_logprob(*m, inputs, cont, int(inputs.size() - cont.size()));
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

// acc takes the best summed logprob, acc_norm the best per character of the
// choice (the choice text, without the target delimiter).
TEST(Scorer, AccAndAccNormDisagreeWhenLengthsDo) {
  EvalExample ex;
  ex.requests = {{"Q:", " yes"}, {"Q:", " a much longer answer"}};
  ex.choices = {"yes", "a much longer answer"};
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

// The harness's acc_norm divides by len(choice) in Python: code points, not
// bytes; bytes are acc_bytes. A non-ASCII choice tells them apart.
TEST(Scorer, AccNormCountsCharactersAccBytesCountsBytes) {
  EvalExample ex;
  ex.choices = {"\xc3\xa9t\xc3\xa9 \xc3\xa0", "abcdef"};  // "été à": 5 characters, 8 bytes
  ex.requests = {{"Q:", " " + ex.choices[0]}, {"Q:", " " + ex.choices[1]}};
  std::vector<LlResult> r(2);
  r[0].logprob = -6.0;  // -1.2 per character, -0.75 per byte
  r[1].logprob = -6.5;  // 6 characters and bytes: -1.083
  const ChoicePick p = pick_choice(ex, r, 0);
  EXPECT_EQ(p.acc, 0);
  EXPECT_EQ(p.acc_norm, 1);
  EXPECT_EQ(p.acc_bytes, 0);
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
    // Keyed by the harness's task names (lambada -> lambada_openai).
    const std::string name = t.harness_task.empty() ? t.task : t.harness_task;
    for (const char* table : {"results", "configs", "versions", "n-shot", "higher_is_better"})
      EXPECT_TRUE(j[table].contains(name)) << table;
    EXPECT_EQ(j["n-samples"][name]["effective"].get<int64_t>(), t.n);
    // A --limit run: the task's full size beside the examples scored.
    EXPECT_GT(j["n-samples"][name]["original"].get<int64_t>(), t.n);
    for (const auto& [key, value] : j["results"][name].items()) {
      if (key == "alias") continue;
      const auto comma = key.find(',');
      ASSERT_NE(comma, std::string::npos) << key;
      EXPECT_EQ(key.substr(comma), ",none");
      if (key.find("_stderr,") == std::string::npos) {
        EXPECT_TRUE(value.is_number()) << key;
        const std::string se = key.substr(0, comma) + "_stderr,none";
        ASSERT_TRUE(j["results"][name].contains(se)) << se;
        const auto& s = j["results"][name][se];
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
  EXPECT_EQ(j["configs"]["lambada_openai"]["output_type"], "loglikelihood");
  EXPECT_EQ(j["configs"]["copa"]["output_type"], "multiple_choice");
  EXPECT_EQ(j["higher_is_better"]["tinystories"]["word_perplexity"], false);
  EXPECT_EQ(j["higher_is_better"]["copa"]["acc"], true);
  EXPECT_EQ(j["n-shot"]["mmlu"], 5);
}

// The same layout against the JSON schema shipped with the tasks
// (eval/lm-eval-results.schema.json), for every kind of task, MMLU's
// categories nested as the harness nests them; a document that breaks the
// layout fails the schema (so the check can fail).
TEST(Evaluate, LmEvalResultsMatchTheSchema) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/eval/lm-eval-results.schema.json");
  const testing::JsonSchema schema(nlohmann::json::parse(in));
  auto m = tiny_model(2, 128);
  EvalOptions o = task_options({"copa", "lambada", "mmlu", "tinystories", "boolq"}, 30);
  const auto results = evaluate_tasks(*m, tok512(), o);
  const nlohmann::json j = lm_eval_results(results, {2}, {{"model", "strata"}, {"limit", 30}});
  const auto errors = schema.validate(j);
  EXPECT_TRUE(errors.empty()) << errors.front();
  // mmlu -> mmlu_<category> -> mmlu_<subject>, the categories size-weighted.
  ASSERT_TRUE(j["group_subtasks"].contains("mmlu_stem"));
  size_t subjects = 0;
  for (const auto& cat : j["group_subtasks"]["mmlu"]) {
    EXPECT_TRUE(j["groups"].contains(cat.get<std::string>())) << cat;
    for (const auto& sub : j["group_subtasks"][cat.get<std::string>()]) {
      EXPECT_TRUE(j["results"].contains(sub.get<std::string>())) << sub;
      ++subjects;
    }
  }
  EXPECT_EQ(subjects, 1u);  // --limit 30: all in abstract_algebra
  EXPECT_EQ(j["configs"]["boolq"]["metadata"]["comparable"], false);
  EXPECT_NE(j["configs"]["boolq"]["metadata"]["not_comparable_because"], nullptr);
  // Broken copies fail.
  nlohmann::json bad = j;
  bad["results"]["copa"]["acc,none"] = "high";
  EXPECT_FALSE(schema.validate(bad).empty());
  bad = j;
  bad.erase("versions");
  EXPECT_FALSE(schema.validate(bad).empty());
  bad = j;
  bad["configs"]["copa"]["output_type"] = "ranking";
  EXPECT_FALSE(schema.validate(bad).empty());
  bad = j;
  bad["results"]["copa"]["acc"] = 0.5;  // a metric key without its filter
  EXPECT_FALSE(schema.validate(bad).empty());
}

// MMLU categories: each is the size-weighted mean of its subjects (the mean
// over its questions) with the harness's pooled standard error.
TEST(Evaluate, MmluCategoriesAreSizeWeighted) {
  auto m = tiny_model(2, 64);
  EvalOptions o = task_options({"mmlu"}, 0);
  o.shots = 0;
  o.limit = 400;  // abstract_algebra (100), anatomy (135), astronomy (152), business_ethics (13)
  const auto r = evaluate_tasks(*m, tok512(), o)[0][0];
  ASSERT_EQ(r.categories.size(), 2u);
  const Metric& stem = r.categories.at("stem")[0];
  std::vector<double> ses, sizes;
  double sum = 0, n = 0;
  for (const char* g : {"abstract_algebra", "anatomy", "astronomy"}) {
    const Metric& gm = r.groups.at(g)[0];
    const double size = g == std::string("abstract_algebra") ? 100
                        : g == std::string("anatomy")        ? 135
                                                             : 152;
    sum += gm.value * size;
    n += size;
    ses.push_back(gm.stderr_);
    sizes.push_back(size);
  }
  EXPECT_NEAR(stem.value, sum / n, 1e-12);
  double pooled = 0;
  for (size_t i = 0; i < 3; ++i) pooled += (sizes[i] - 1) * ses[i] * ses[i] * sizes[i];
  EXPECT_NEAR(stem.stderr_, std::sqrt(pooled / (n - 3) / n), 1e-12);
  EXPECT_NEAR(r.categories.at("other")[0].value, r.groups.at("business_ethics")[0].value, 1e-12);
  EXPECT_EQ(r.group_category.at("anatomy"), "stem");
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

// A continuation longer than the whole context (the harness asserts on it)
// is counted; its example is left out of the metrics unless asked for, then
// scored on its last tokens.
TEST(Evaluate, LongContinuationsAreCountedAndLeftOutUnlessAsked) {
  auto m = tiny_model(1, 16);
  EvalOptions o = task_options({"copa"}, 8);
  const TaskResult left_out = evaluate_tasks(*m, tok512(), o)[0][0];
  ASSERT_GT(left_out.long_continuations, 0);
  ASSERT_LT(left_out.long_continuations, 8);
  EXPECT_EQ(left_out.n, 8 - left_out.long_continuations);
  EXPECT_FALSE(left_out.long_scored);
  o.score_long_continuations = true;
  const TaskResult scored = evaluate_tasks(*m, tok512(), o)[0][0];
  EXPECT_EQ(scored.n, 8);
  EXPECT_EQ(scored.long_continuations, left_out.long_continuations);
  EXPECT_TRUE(scored.to_json()["long_continuations_scored"].get<bool>());
  EXPECT_EQ(scored.to_json()["long_continuations"].get<int64_t>(), scored.long_continuations);
  auto big = tiny_model(1, 256);
  EXPECT_EQ(evaluate_tasks(*big, tok512(), o)[0][0].long_continuations, 0);
}

// Two choices with the same text tie exactly: counted, acc takes the first.
TEST(Evaluate, ExactTiesAreCounted) {
  testing::TempDir dir;
  std::ofstream(dir / "rows.jsonl") << "{\"q\": \"Once upon\", \"g\": 1}\n"
                                    << "{\"q\": \"There was\", \"g\": 0}\n";
  std::ofstream(dir / "tie.yaml")
      << "task: tie\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
      << dir / "rows.jsonl"
      << "\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: q\n"
         "doc_to_target: g\ndoc_to_choice: [\"a time\", \"a time\"]\n";
  auto m = tiny_model(1, 64);
  EvalOptions o = task_options({"tie"}, 0);
  o.harness = std::make_shared<const HarnessTasks>(index_harness_tasks({dir.path()}, ""));
  const TaskResult r = evaluate_tasks(*m, tok512(), o)[0][0];
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.ties, 2);
  EXPECT_EQ(r.to_json()["exact_ties"].get<int64_t>(), 2);
  // acc takes the first of the tied choices: right for gold 0, wrong for 1.
  const double acc = r.metrics[0].name == "acc" ? r.metrics[0].value : r.metrics[1].value;
  EXPECT_EQ(acc, 0.5);
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

// lm-evaluation-harness's get_rolling_token_windows and
// make_disjoint_window (lm_eval/utils.py), ported as the oracle: (context,
// continuation) token pairs that together score every token once.
std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> harness_rolling_windows(
    const std::vector<int32_t>& tokens, int32_t prefix, int max_seq_len, int context_len) {
  using V = std::vector<int32_t>;
  auto slice = [&](int64_t a, int64_t b) {  // tokens[a:b] with Python's clamping
    const int64_t n = int64_t(tokens.size());
    a = a < 0 ? std::max<int64_t>(0, n + a) : std::min(a, n);
    b = b < 0 ? std::max<int64_t>(0, n + b) : std::min(b, n);
    return a < b ? V(tokens.begin() + a, tokens.begin() + b) : V();
  };
  std::vector<std::pair<V, V>> out;
  if (tokens.empty()) return out;
  const int64_t pred_len = max_seq_len - context_len + 1;
  const int64_t n = int64_t(tokens.size());
  const int64_t first = std::min<int64_t>(max_seq_len, n);
  V ctx = {prefix};
  const V head = slice(0, first - 1);
  ctx.insert(ctx.end(), head.begin(), head.end());
  out.push_back({ctx, slice(0, first)});
  int64_t predicted = first;
  while (predicted < n) {
    const int64_t window_pred_len = std::min(n - predicted, pred_len);
    const int64_t window_end = predicted + window_pred_len;
    out.push_back({slice(window_end - max_seq_len - 1, window_end - 1),
                   slice(window_end - window_pred_len, window_end)});
    predicted += window_pred_len;
  }
  for (auto& [a, b] : out)  // make_disjoint_window
    a.resize(a.size() - (b.size() - 1));
  return out;
}

// Rolling perplexity with non-overlapping windows (stride = window - 1) is
// the harness's loglikelihood_rolling: every token scored once, the last
// window extended to the left to a full context.
TEST(Scorer, RollingMatchesTheHarnessWindows) {
  auto m = tiny_model(2, 12);
  std::vector<int32_t> ids = {tok512().bos_id()};
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t(3 + (i * 37) % 500));
  const std::vector<int32_t> doc(ids.begin() + 1, ids.end());
  for (int L : {12, 7, 5}) {
    double want = 0;
    int64_t scored = 0;
    const auto windows = harness_rolling_windows(doc, ids[0], L, 1);
    for (const auto& [ctx, cont] : windows) {
      std::vector<int32_t> full = ctx;
      full.insert(full.end(), cont.begin(), cont.end());
      ASSERT_LE(full.size(), size_t(L) + 1);
      const std::vector<int32_t> inputs(full.begin(), full.end() - 1);
      want -= reference_logprob(*m, inputs, cont, int(inputs.size() - cont.size()));
      scored += int64_t(cont.size());
    }
    ASSERT_EQ(scored, int64_t(doc.size()));
    // The last window has a full context: (40 - 12) % 12 = 4 tokens after
    // 8 more of context, not 4 tokens after 1.
    if (L == 12) {
      EXPECT_EQ(windows.back().first.size() + windows.back().second.size(), 13u);
    }
    for (int bs : {1, 4}) {
      const auto r = Scorer(*m, tok512(), bs, {}).rolling(ids, L + 1, L);
      EXPECT_EQ(r[0].tokens, int64_t(doc.size()));
      EXPECT_NEAR(r[0].nll, want, 1e-5 * want) << "context " << L << " batch " << bs;
    }
  }
}

// Overlapping windows (stride < window - 1, a strata extension): token j is
// scored by the first span [a, a+W) (a a multiple of S) with a + W > j, from
// inputs ids[a .. j); the span that reaches the end starts at n - W.
TEST(Scorer, RollingScoresEveryTokenOnceWithTheRightContext) {
  auto m = tiny_model(2, 12);
  std::vector<int32_t> ids = {tok512().bos_id()};
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t(3 + (i * 37) % 500));
  const int64_t n = int64_t(ids.size());
  auto reference = [&](int W, int S, bool full_last = true) {
    double nll = 0;
    for (int64_t j = 1; j < n; ++j) {
      int64_t a = 0;
      while (a + W <= j) a += S;
      if (full_last && a + W >= n) a = std::max<int64_t>(0, n - W);
      const std::vector<int32_t> inputs(ids.begin() + a, ids.begin() + j);
      nll -= reference_logprob(*m, inputs, {ids[size_t(j)]}, int(inputs.size()) - 1);
    }
    return nll;
  };
  for (auto [W, S] : {std::pair{13, 12}, std::pair{13, 5}, std::pair{6, 5}, std::pair{8, 1}})
    for (int bs : {1, 4}) {
      const auto r = Scorer(*m, tok512(), bs, {}).rolling(ids, W, S);
      EXPECT_EQ(r[0].tokens, n - 1) << W << "/" << S;
      const double want = reference(W, S);
      EXPECT_NEAR(r[0].nll, want, 1e-5 * want) << "window " << W << " stride " << S;
      // Chunked (--last-window chunked): the last span stays where the stride puts it.
      const auto c = Scorer(*m, tok512(), bs, {}).rolling(ids, W, S, false);
      const double chunked = reference(W, S, false);
      EXPECT_NEAR(c[0].nll, chunked, 1e-5 * chunked) << "chunked " << W << "/" << S;
    }
  EXPECT_THROW(Scorer(*m, tok512(), 1, {}).rolling(ids, 14, 13), Error);  // window - 1 > context
  EXPECT_THROW(Scorer(*m, tok512(), 1, {}).rolling(ids, 13, 13), Error);  // stride > window - 1
}

// ------------------------------------------------------------ generate_until

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The harness's filters and exact_match on fixed strings.
TEST(Generate, FiltersAndExactMatch) {
  EXPECT_EQ(cut_at_stops("42\n\nQuestion: next", {"\n\n", "Question:"}), "42");
  EXPECT_EQ(cut_at_stops("no stop here", {"\n\n"}), "no stop here");
  FilterStep gsm{"regex", "#### (\\-?[0-9\\.\\,]+)", 0, "[invalid]"};
  EXPECT_EQ(apply_filters({gsm}, "so 3 + 4 = 7\n#### 7"), "7");
  EXPECT_EQ(apply_filters({gsm}, "no answer"), "[invalid]");
  // group_select -1: the last match; a pattern without groups keeps the match.
  FilterStep last{"regex", "(-?[$0-9.,]{2,})|(-?[0-9]+)", -1, "[invalid]"};
  EXPECT_EQ(apply_filters({last}, "first 12 then 3 then 45"), "45");
  FilterStep whole{"regex", "[A-D]\\b", 0, "x"};
  EXPECT_EQ(apply_filters({whole, {"take_first", "", 0, ""}}, "The answer is C. Done"), "C");
  EXPECT_EQ(apply_filters({{"strip", "", 0, ""}, {"lowercase", "", 0, ""}}, "  Paris \n"), "paris");
  ExactMatchSpec plain;
  EXPECT_TRUE(exact_match(plain, "7", "7"));
  EXPECT_FALSE(exact_match(plain, " 7", "7"));  // no stripping, as the harness
  ExactMatchSpec loose{true, true, {",", "\\$", "(?:\\.$)"}};
  EXPECT_TRUE(exact_match(loose, "$1,000.", "1000"));
  EXPECT_TRUE(exact_match(loose, "Paris!", "paris"));
  EXPECT_FALSE(exact_match(loose, "Lyon", "paris"));
}

// Patterns of the harness's task files (gsm8k, bbh, gpqa/mmlu CoT, the
// flexible number extractor, regexes_to_ignore), as its Python findall and
// re.sub give them (expected values from Python 3.11's re): lookbehind,
// lookahead, inline (?i) and (?s), several groups, Unicode \w; and a
// 100,000-character generation, on which std::regex used to overflow the stack.
// ROUGE-2 F as rouge_score computes it (values worked out by hand).
TEST(Generate, RougeTwoAsRougeScoreComputesIt) {
  EXPECT_NEAR(rouge_n("the cat sat on the mat", "the cat sat on a mat", 2), 0.6, 1e-12);
  EXPECT_EQ(rouge_n("The Cat, sat!", "the cat sat", 2), 1.0);  // case and punctuation
  EXPECT_NEAR(rouge_n("a b a b a b", "a b a b", 2), 0.75, 1e-12);  // counts clipped
  EXPECT_EQ(rouge_n("dog", "the cat sat", 2), 0.0);
  EXPECT_EQ(rouge_n("", "the cat sat", 2), 0.0);
  EXPECT_EQ(rouge_n("caf\xc3\xa9 au lait", "caf au lait", 2), 1.0);  // non-ASCII breaks words
  EXPECT_NEAR(rouge_n("the cat sat", "the cat", 1), 0.8, 1e-12);
}

TEST(Generate, HarnessRegexesActAsPythons) {
  const auto f = [](const char* p, const std::string& text, int g) {
    return apply_filters({{"regex", p, g, "[invalid]"}}, text);
  };
  EXPECT_EQ(f("#### (\\-?[0-9\\.\\,]+)", "so 3+4=7\n#### 7", 0), "7");
  EXPECT_EQ(f("(-?[$0-9.,]{2,})|(-?[0-9]+)", "I have $1,000 and 5 apples", -1), "5");
  EXPECT_EQ(f("(-?[$0-9.,]{2,})|(-?[0-9]+)", "I have $1,000 and 5 apples", 0), "$1,000");
  EXPECT_EQ(f("(?<=the answer is )(.*)(?=.)", "Let's see. So the answer is (B).", 0), "(B)");
  EXPECT_EQ(f("(?i)answer:\\s*([A-D])", "blah ANSWER: c", 0), "c");
  EXPECT_EQ(f("(?s)Final answer:(.*)", "x\nFinal answer:\n 42\n", 0), "42");
  EXPECT_EQ(f("\\b\\w+\\b", "café naïve", 1), "naïve");
  EXPECT_EQ(f("(?<=\\()([A-D])(?=\\))", "(A) or (C)", -1), "C");
  EXPECT_EQ(f("([A-D])|(E)", "E", 0), "E");
  ExactMatchSpec gsm{true, false, {",", "\\$", "(?s).*#### ", "\\.$"}};
  EXPECT_TRUE(exact_match(gsm, "text\n#### $1,234.", "1234"));
  std::string long_text(100000, 'x');
  long_text += "\n#### 17";
  EXPECT_EQ(f("(?s).*#### (\\-?[0-9\\.\\,]+)", long_text, 0), "17");
  EXPECT_EQ(f("((.|\\n)*)#### (\\d+)", long_text, 0), long_text.substr(0, 100000));
  EXPECT_EQ(f("(?:a|b)*answer", long_text, 0), "[invalid]");
}

// A generate_until task end to end: each answer is the model's greedy
// continuation of the prompt (as strata generate gives it) cut at the first
// stop string, filtered, and exact_match is the mean of the logged per-sample
// scores; a reference equal to the model's own answer scores 1.
TEST(Generate, TaskAnswersAreTheModelsGreedyContinuations) {
  auto m = tiny_model(2, 128);
  testing::TempDir dir;
  const std::string eval = dir / "eval";
  std::filesystem::create_directories(eval);
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "She said"};
  // The model's own greedy answers, 12 tokens, cut at "." (the task's stop).
  std::vector<std::string> answers;
  for (const std::string& p : prompts) {
    std::vector<int32_t> ids = {tok512().bos_id()};
    const auto enc = tok512().encode("Q: " + p + "\nA:");
    ids.insert(ids.end(), enc.begin(), enc.end());
    GenerateOptions go;
    go.max_new_tokens = 12;
    go.eos_id = tok512().eos_id();
    std::vector<int32_t> with_anchor = {ids.back()};
    for (int32_t t : generate(*m, ids, go))
      if (t != go.eos_id) with_anchor.push_back(t);
    const std::string text =
        tok512().decode(with_anchor).substr(tok512().decode({ids.back()}).size());
    answers.push_back(cut_at_stops(text, {"."}));
    EXPECT_GT(answers.back().size(), 3u) << "a trivial answer makes the test weak: " << text;
  }
  std::string rows;
  for (size_t i = 0; i < prompts.size(); ++i)
    rows += nlohmann::json{{"q", prompts[i]}, {"a", i == 1 ? "wrong" : answers[i]}}.dump() + "\n";
  write_text(dir / "qa.jsonl", rows);
  write_text(eval + "/qa.toml",
             "summary = \"qa\"\nkind = \"generate_until\"\nformat = \"jsonl\"\n"
             "data = \"../qa.jsonl\"\ntext = \"Q: {q}\\nA:\"\ntarget = \"{a}\"\n"
             "until = [\".\"]\nmax_gen_toks = 12\nmetrics = [\"exact_match\"]\n");
  EvalOptions o;
  o.tasks = {"qa"};
  o.eval_dir = eval;
  o.progress = false;
  o.log_samples_dir = dir / "samples";
  for (int bs : {1, 2}) {
    o.batch_size = bs;
    const auto r = evaluate_tasks(*m, tok512(), o);
    ASSERT_EQ(r[0][0].metrics.size(), 1u);
    EXPECT_EQ(r[0][0].metrics[0].name, "exact_match");
    EXPECT_NEAR(r[0][0].metrics[0].value, 2.0 / 3.0, 1e-12) << "batch " << bs;
    std::ifstream in(dir / "samples/samples_qa.jsonl");
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["filtered_resps"][0], answers[i]);
      EXPECT_EQ(j["resps"][0][0], answers[i]);
      EXPECT_EQ(j["exact_match"], i == 1 ? 0.0 : 1.0);
      EXPECT_EQ(j["arguments"]["gen_args_0"]["arg_0"], "Q: " + prompts[i] + "\nA:");
    }
  }
}

// Perplexity tasks log a line per document whose [loglikelihood, weight]
// pairs aggregate to the task's word and byte perplexities.
TEST(Evaluate, RollingSampleLogsAggregateToTheTaskMetrics) {
  auto m = tiny_model(2, 64);
  testing::TempDir dir;
  EvalOptions o = task_options({"tinystories"}, 0);
  o.log_samples_dir = dir.path();
  const auto r = evaluate_tasks(*m, tok512(), o)[0][0];
  std::ifstream in(dir / "samples_tinystories.jsonl");
  std::string line;
  double ll = 0, words = 0, bytes = 0, tokens = 0;
  int n = 0;
  for (; std::getline(in, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["doc_id"], n);
    ll += j["resps"][0][0].get<double>();
    EXPECT_EQ(j["word_perplexity"][0], j["resps"][0][0]);
    words += j["word_perplexity"][1].get<double>();
    bytes += j["byte_perplexity"][1].get<double>();
    tokens += j["token_perplexity"][1].get<double>();
  }
  EXPECT_EQ(n, 5);
  auto metric = [&](const std::string& name) {
    for (const Metric& mt : r.metrics)
      if (mt.name == name) return mt.value;
    return -1.0;
  };
  EXPECT_NEAR(std::exp(-ll / words), metric("word_perplexity"), 1e-9 * metric("word_perplexity"));
  EXPECT_NEAR(-ll / bytes / std::log(2.0), metric("bits_per_byte"), 1e-9);
  EXPECT_NEAR(std::exp(-ll / tokens), metric("token_perplexity"),
              1e-9 * metric("token_perplexity"));
}

// `all` is the comparable tasks; others run when named, next to it or alone.
TEST(Evaluate, AllLeavesOutIncomparableTasksUnlessNamed) {
  auto m = tiny_model(2, 64);
  testing::TempDir dir;
  const std::string eval = dir / "eval";
  std::filesystem::create_directories(eval);
  write_text(dir / "rows.jsonl", "{\"q\": \"Is it?\", \"gold\": 1}\n");
  const std::string body =
      "kind = \"multiple_choice\"\nformat = \"jsonl\"\ndata = \"../rows.jsonl\"\n"
      "text = \"{q}\"\nchoices = [\"no\", \"yes\"]\ngold = \"gold\"\n";
  write_text(eval + "/good.toml", "summary = \"good\"\n" + body);
  write_text(eval + "/odd.toml",
             "summary = \"odd\"\ncomparable = false\n"
             "comparable_note = \"made up\"\n" +
                 body);
  EXPECT_EQ(all_tasks(eval), std::vector<std::string>{"good"});
  EvalOptions o;
  o.eval_dir = eval;
  o.progress = false;
  auto run = [&](std::vector<std::string> tasks) {
    o.tasks = std::move(tasks);
    std::vector<std::string> names;
    const auto results = evaluate_tasks(*m, tok512(), o);
    for (const TaskResult& t : results[0]) names.push_back(t.task);
    return names;
  };
  EXPECT_EQ(run({"all"}), std::vector<std::string>{"good"});
  EXPECT_EQ(run({"all", "odd"}), (std::vector<std::string>{"good", "odd"}));
  EXPECT_EQ(run({"odd", "all", "odd"}), (std::vector<std::string>{"odd", "good"}));
  o.tasks = {"odd"};
  const TaskResult odd = evaluate_tasks(*m, tok512(), o)[0][0];
  EXPECT_FALSE(odd.comparable);
  EXPECT_EQ(odd.not_comparable_because, "made up");
  EXPECT_EQ(odd.to_json()["not_comparable_because"], "made up");
}

// HumanEval runs only when allowed; the programs run in the sandbox, and an
// untrained model's completions fail their tests.
TEST(Generate, HumanEvalNeedsPermissionAndRunsInTheSandbox) {
  auto m = tiny_model(2, 128);
  EvalOptions o = task_options({"humaneval"}, 2);
  o.max_gen_toks = 8;
  EXPECT_THROW(evaluate_tasks(*m, tok512(), o), Error);
  o.allow_code_execution = true;
  testing::TempDir dir;
  o.log_samples_dir = dir.path();
  const auto r = evaluate_tasks(*m, tok512(), o);
  ASSERT_EQ(r[0][0].metrics[0].name, "pass@1");
  EXPECT_EQ(r[0][0].metrics[0].value, 0.0);
  std::ifstream in(dir / "samples_humaneval.jsonl");
  std::string line;
  int n = 0;
  for (; std::getline(in, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_NE(j["sandbox"], "passed");
    EXPECT_EQ(j["arguments"]["gen_args_0"]["arg_1"]["max_gen_toks"], 8);
    // The program's first part is the prompt itself.
    EXPECT_EQ(j["filtered_resps"][0].get<std::string>().rfind(
                  j["arguments"]["gen_args_0"]["arg_0"].get<std::string>(), 0),
              0u);
  }
  EXPECT_EQ(n, 2);
}

// ------------------------------------------------------------ chat templates

// --apply-chat-template renders requests in the SFT template, and the engine
// encodes them exactly as SFT training encodes the same conversation.
TEST(Chat, RequestsAreTokenisedAsSftConversations) {
  TaskData t = load_task(std::string(STRATA_SOURCE_DIR) + "/eval", "mmlu", 2, 1234, 1);
  const EvalExample plain = t.examples[0];
  ChatOptions chat;
  chat.apply = true;
  chat.system_instruction = "Answer with a letter.";
  chat.fewshot_as_multiturn = true;
  apply_chat_template(t, chat);
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 4u);
  ASSERT_EQ(ex.shots.size(), 2u);
  // Context text: system (instruction + description), two shot turns, the question.
  const std::string question = plain.requests[0].context.substr(plain.prefix_size);
  const ChatTemplate& tm = chat.tmpl;
  std::string want =
      tm.system_prefix + "Answer with a letter.\n\n" + ex.description + tm.system_suffix;
  for (const auto& [q, a] : ex.shots)
    want += tm.user_prefix + q + tm.user_suffix + tm.assistant_prefix + a + "</s>";
  want += tm.user_prefix + question + tm.user_suffix + tm.assistant_prefix;
  EXPECT_EQ(ex.requests[1].context, want);
  EXPECT_EQ(ex.requests[1].continuation, "B");  // no target delimiter
  // The same conversation through SFT rendering: identical tokens.
  std::vector<std::pair<std::string, std::string>> conv = {
      {"system", "Answer with a letter.\n\n" + ex.description}};
  for (const auto& [q, a] : ex.shots) {
    conv.push_back({"user", q});
    conv.push_back({"assistant", a});
  }
  conv.push_back({"user", question});
  conv.push_back({"assistant", "B"});
  const SftExample sft = SftDataset::render(conv, tok512(), tm);
  auto m = tiny_model();
  Scorer s(*m, tok512(), 1, {});
  std::vector<int32_t> ctx, cont;
  s.tokenize(ex.requests[1], ctx, cont);
  std::vector<int32_t> got = {tok512().bos_id()};
  got.insert(got.end(), ctx.begin(), ctx.end());
  got.insert(got.end(), cont.begin(), cont.end());
  got.push_back(tok512().eos_id());
  EXPECT_EQ(got, sft.tokens);
  // Without multiturn: the shots and the question in one user message.
  TaskData single = load_task(std::string(STRATA_SOURCE_DIR) + "/eval", "mmlu", 2, 1234, 1);
  chat.fewshot_as_multiturn = false;
  chat.system_instruction.clear();
  apply_chat_template(single, chat);
  EXPECT_EQ(single.examples[0].requests[0].context,
            tm.system_prefix + plain.description + tm.system_suffix + tm.user_prefix +
                plain.requests[0].context.substr(plain.description.size()) + tm.user_suffix +
                tm.assistant_prefix);
}

}  // namespace
}  // namespace strata
