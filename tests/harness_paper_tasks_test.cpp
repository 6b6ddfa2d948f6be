// The papers' task list as strata ships it (eval/harness/*.yaml): on rows
// made for the tests (tests/fixtures/harness_datasets), every task builds the
// requests lm-evaluation-harness 0.4.13 builds from its own YAML and Python
// functions (expected_paper_tasks.json, made by make_paper_fixtures.py):
// RACE's literal_eval'd problems, HellaSwag's preprocessing, WinoGrande's
// multiple inputs, TruthfulQA, TriviaQA's and NaturalQuestions' several
// accepted answers, MBPP's written-out shots. Around them: the strata
// built-ins that replace the harness's Python (truthfulqa_mc2, pass@1
// programs), multi-answer scoring, TSV data, the shipped folder's place after
// the TOML tasks, and one-line refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/yaml.h"
#include "eval/evaluate.h"
#include "eval/generate_until.h"
#include "eval/harness_task.h"
#include "eval/ifeval.h"
#include "eval/math_answer.h"
#include "eval/task.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kSource = STRATA_SOURCE_DIR;
const std::string kShipped = kSource + "/eval/harness";
const std::string kDatasets = kSource + "/tests/fixtures/harness_datasets";

const HarnessTasks& shipped() {
  static const HarnessTasks h = index_harness_tasks({kShipped}, kDatasets);
  return h;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(PaperTasks, EveryTaskBuildsTheHarnesssRequestsOnTheFixtureRows) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  const json expected = json::parse(read_file(kDatasets + "/expected_paper_tasks.json", "test"));
  ASSERT_GE(expected["tasks"].size(), 16u);
  for (const auto& [name, want] : expected["tasks"].items()) {
    SCOPED_TRACE(name);
    const TaskData t = load_harness_task(shipped(), name, want["shots"].get<int>(), 1234, 0);
    EXPECT_EQ(t.shots, want["shots"].get<int>());
    const json& examples = want["examples"];
    ASSERT_EQ(t.examples.size(), examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      SCOPED_TRACE(i);
      const EvalExample& ex = t.examples[i];
      const json& w = examples[i];
      if (w.contains("contexts")) {  // multiple_choice
        ASSERT_EQ(ex.requests.size(), w["contexts"].size());
        for (size_t r = 0; r < ex.requests.size(); ++r) {
          EXPECT_EQ(ex.requests[r].context, w["contexts"][r].get<std::string>());
          EXPECT_EQ(ex.requests[r].continuation, w["continuations"][r].get<std::string>());
        }
        EXPECT_EQ(ex.gold, w["gold"].get<int>());
      } else {  // generate_until
        ASSERT_EQ(ex.requests.size(), 1u);
        EXPECT_EQ(ex.requests[0].context, w["context"].get<std::string>());
        const auto targets = w["targets"].get<std::vector<std::string>>();
        EXPECT_EQ(ex.target, targets[0]);
        if (targets.size() > 1) {
          EXPECT_EQ(ex.targets, targets);
        }
      }
    }
  }
}

TEST(PaperTasks, EveryShippedTaskLoadsOnFixtureOrShippedData) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  const HarnessTasks& h = shipped();
  for (const char* name :
       {"social_iqa",    "race",      "nq_open",        "triviaqa",       "gsm8k",
        "mbpp",          "humaneval", "ifeval",         "cnn_dailymail",  "xsum",
        "topv2",         "sciq",      "truthfulqa_mc1", "truthfulqa_mc2", "arc_easy",
        "arc_challenge", "hellaswag", "winogrande",     "piqa",           "mmlu_abstract_algebra"})
    ASSERT_TRUE(h.files.count(name)) << name;
  EXPECT_EQ(h.expand("mmlu").size(), 57u);
  EXPECT_EQ(h.expand("hendrycks_math").size(), 7u);
  EXPECT_EQ(h.expand("math_word_problems").size(), 8u);  // with gsm8k
  EXPECT_EQ(h.expand("mmlu_stem").size(), 19u);
  EXPECT_EQ(h.expand("truthfulqa"), (std::vector<std::string>{"truthfulqa_mc1", "truthfulqa_mc2"}));
  for (const auto& [name, file] : h.files) {
    if ((name.starts_with("mmlu_") && name != "mmlu_abstract_algebra") ||
        (name.starts_with("hendrycks_math_") && name != "hendrycks_math_algebra")) {
      EXPECT_TRUE(harness_data_status(h, name).starts_with("missing: ")) << name;
      continue;
    }
    SCOPED_TRACE(name);
    const TaskData t = load_harness_task(h, name, -1, 7, 3);
    EXPECT_FALSE(t.examples.empty());
    EXPECT_EQ(harness_task_runs_code(h, name), name == "mbpp" || name == "humaneval");
  }
}

// strata.hendrycks_math(_docs): the boxed reference, the answer between the
// dollar signs, and the harness's normalisation with its corners (where its
// Python raises, raw texts compared), case by case as lm_eval computed them.
TEST(PaperTasks, MathAnswersCompareAsTheHarnessCompares) {
  const json expected = json::parse(read_file(kDatasets + "/expected_paper_tasks.json", "test"));
  const json& cases = expected["hendrycks_math_answers"];
  ASSERT_GE(cases.size(), 30u);
  int correct = 0;
  for (const json& c : cases) {
    const std::string g = c["generation"], sol = c["solution"], ref = c["reference"];
    EXPECT_EQ(math_answer::reference(sol, "case"), ref);
    EXPECT_EQ(math_answer::correct(g, ref), c["exact_match"].get<int>() == 1) << g << " vs " << ref;
    correct += c["exact_match"].get<int>();
  }
  EXPECT_GT(correct, 5);
  EXPECT_LT(correct, int(cases.size()));
  EXPECT_ERROR(math_answer::reference("no box here", "t.jsonl:3"),
               "t.jsonl:3: the solution has no \\boxed{...} answer");
  EXPECT_ERROR(math_answer::reference("$\\fbox{2}$", "t.jsonl:4"),
               "t.jsonl:4: the solution's answer");
  if (!yaml_available()) return;
  const TaskData t = load_harness_task(shipped(), "hendrycks_math_algebra", 0, 7, 0);
  EXPECT_EQ(t.process_results, "hendrycks_math");
  EXPECT_EQ(score_answer(t, t.examples[1], " $\\dfrac34$.").exact_match, 1.0);
  EXPECT_EQ(score_answer(t, t.examples[1], " 3/4").exact_match, 1.0);  // 3/4 becomes \frac{3}{4}
  EXPECT_EQ(score_answer(t, t.examples[1], " 4/3").exact_match, 0.0);
}

// strata.ifeval: every check, followed and not, as the harness's
// instructions.py judged it (the language checks on texts whose script
// settles the language); whole documents strict and loose; the harness's
// sentence splitter; what validate() refuses.
TEST(PaperTasks, IfevalChecksAsTheHarnessChecks) {
  const json expected = json::parse(read_file(kDatasets + "/expected_paper_tasks.json", "test"));
  const json& e = expected["ifeval"];
  std::set<std::string> ids;
  for (const json& c : e["cases"]) {
    const nlohmann::ordered_json kw = nlohmann::ordered_json::parse(c["kwargs"].dump());
    EXPECT_EQ(ifeval::follows(c["id"], kw, c["response"]), c["followed"].get<bool>())
        << c["id"] << ": " << c["response"];
    ids.insert(c["id"].get<std::string>());
  }
  EXPECT_EQ(ids.size(), 23u);  // all but the two that need NLTK's punkt
  for (const json& d : e["documents"]) {
    const ifeval::Verdict v =
        ifeval::judge(nlohmann::ordered_json::parse(d["doc"].dump()), d["response"]);
    EXPECT_EQ(v.strict, d["strict"].get<std::vector<bool>>()) << d["response"];
    EXPECT_EQ(v.loose, d["loose"].get<std::vector<bool>>()) << d["response"];
  }
  for (const json& c : e["sentences"])
    EXPECT_EQ(ifeval::split_into_sentences(c["text"]),
              c["sentences"].get<std::vector<std::string>>());
  // The two approximated ones: punkt's and word_tokenize's stand-ins.
  const nlohmann::ordered_json sentences = {{"num_sentences", 3}, {"relation", "at least"}};
  EXPECT_TRUE(
      ifeval::follows("length_constraints:number_sentences", sentences, "One. Two! Three?"));
  EXPECT_FALSE(ifeval::follows("length_constraints:number_sentences", sentences, "One. Two!"));
  const nlohmann::ordered_json caps = {{"capital_frequency", 2}, {"capital_relation", "at least"}};
  EXPECT_TRUE(ifeval::follows("change_case:capital_word_frequency", caps, "The NASA and (ESA)."));
  EXPECT_FALSE(ifeval::follows("change_case:capital_word_frequency", caps, "The NASA, 42 and x."));

  const auto doc = [](const std::string& id, const std::string& kwargs) {
    return nlohmann::ordered_json::parse(R"({"instruction_id_list": [")" + id +
                                         R"("], "kwargs": [)" + kwargs + "]}");
  };
  EXPECT_ERROR(ifeval::validate(doc("keywords:nosuch", "{}"), "d.jsonl:2"),
               "d.jsonl:2: unknown IFEval instruction 'keywords:nosuch'");
  EXPECT_ERROR(ifeval::validate(doc("keywords:frequency", R"({"keyword": "x", "frequency": 0,
               "relation": "at least"})"),
                                "d.jsonl:3"),
               "d.jsonl:3: instruction 'keywords:frequency' has no 'frequency'",
               "draw one at random");
  EXPECT_ERROR(
      ifeval::validate(
          doc("length_constraints:number_words", R"({"num_words": 5, "relation": "about"})"), "d"),
      "relation must be 'less than' or 'at least', got 'about'");
  EXPECT_ERROR(ifeval::validate(doc("length_constraints:number_words",
                                    R"({"num_words": "five", "relation": "at least"})"),
                                "d"),
               "a parameter has the wrong type");
  EXPECT_ERROR(ifeval::validate(doc("language:response_language", R"({"language": "xx"})"), "d"),
               "unknown language 'xx'");
  if (!yaml_available()) return;
  const TaskData t = load_harness_task(shipped(), "ifeval", -1, 7, 0);
  EXPECT_EQ(t.process_results, "ifeval");
  EXPECT_EQ(t.examples.size(), 3u);
  EXPECT_FALSE(t.comparable);
  EXPECT_NE(t.not_comparable_because.find("language:response_language"), std::string::npos);
  EXPECT_TRUE(t.generation.until.empty());
  EXPECT_EQ(t.generation.max_gen_toks, 1280);
  EXPECT_EQ(t.examples[1].requests[0].context, "Reply in JSON.");
  const auto metrics = ifeval_metrics(
      {ifeval::Verdict{{true, false}, {true, true}}, ifeval::Verdict{{true}, {true}}});
  ASSERT_EQ(metrics.size(), 4u);
  EXPECT_EQ(metrics[0].name, "prompt_level_strict_acc");
  EXPECT_DOUBLE_EQ(metrics[0].value, 0.5);
  EXPECT_EQ(metrics[1].name, "inst_level_strict_acc");
  EXPECT_DOUBLE_EQ(metrics[1].value, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(metrics[2].value, 1.0);
  EXPECT_DOUBLE_EQ(metrics[3].value, 1.0);
}

TEST(PaperTasks, Topv2ReadsTheShippedTsvWithoutQuoting) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  const TaskData t = load_harness_task(shipped(), "topv2", -1, 7, 0);
  EXPECT_EQ(t.available, 6513);  // every row of test.tsv, quotes and all
  EXPECT_EQ(t.shots, 5);
  EXPECT_EQ(t.examples[0].target, "[IN:PAUSE_TIMER Pause my [SL:METHOD_TIMER timer ] . ]");
  const std::string& ctx = t.examples[0].requests[0].context;
  EXPECT_TRUE(ctx.starts_with("Parse each request into its TOPv2 semantic frame.\n\nRequest: "));
  EXPECT_TRUE(ctx.ends_with("\n\nRequest: Pause my timer .\nFrame:"));
  EXPECT_EQ(t.generation.until, std::vector<std::string>{"\n"});
  bool quoted = false;  // line 301: Play the song , " Handclap " .
  for (const EvalExample& ex : t.examples)
    quoted =
        quoted || ex.target.find("\" [SL:MUSIC_TRACK_TITLE Handclap ] \"") != std::string::npos;
  EXPECT_TRUE(quoted);
}

TEST(PaperTasks, SeveralAcceptedAnswersScoreWhenAnyMatches) {
  TaskData task;
  task.exact_match.ignore_case = task.exact_match.ignore_punctuation = true;
  EvalExample ex;
  ex.target = "Mars";
  ex.targets = {"Mars", "The Red Planet"};
  EXPECT_EQ(score_answer(task, ex, "the red planet").exact_match, 1.0);
  EXPECT_EQ(score_answer(task, ex, "mars!").exact_match, 1.0);
  EXPECT_EQ(score_answer(task, ex, "Venus").exact_match, 0.0);
  // ROUGE-2: the best reference ("red planet" is one of the two bigrams of
  // "The Red Planet": P = 1/1, R = 1/2).
  EXPECT_NEAR(score_answer(task, ex, "red planet").rouge2, 2.0 / 3.0, 1e-12);
  ex.targets.clear();  // one reference: `target`
  EXPECT_EQ(score_answer(task, ex, "mars").exact_match, 1.0);
  EXPECT_EQ(score_answer(task, ex, "the red planet").exact_match, 0.0);
}

TEST(PaperTasks, TruthfulqaMc2IsTheMassOfTheTrueAnswers) {
  EvalExample ex;
  ex.requests.resize(3);
  ex.labels = {1, 1, 0};
  std::vector<LlResult> r(3);
  r[0].logprob = std::log(0.2);
  r[1].logprob = std::log(0.1);
  r[2].logprob = std::log(0.3);
  EXPECT_NEAR(true_mass(ex, r, 0), 0.3 / 0.6, 1e-12);
  // Very negative log-likelihoods (long answers) do not underflow to 0/0.
  for (auto& x : r) x.logprob -= 2000;
  EXPECT_NEAR(true_mass(ex, r, 0), 0.5, 1e-12);
  // The task reads the labels from mc2_targets.labels.
  if (!yaml_available()) return;
  const TaskData t = load_harness_task(shipped(), "truthfulqa_mc2", -1, 7, 0);
  EXPECT_EQ(t.process_results, "truthfulqa_mc2");
  EXPECT_EQ(t.examples[0].labels, (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(t.metrics, std::vector<std::string>{"acc"});
}

TEST(PaperTasks, CodeTasksRunTheFilteredAnswerWithTheTests) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  const TaskData he = load_harness_task(shipped(), "humaneval", -1, 7, 1);
  EXPECT_EQ(he.execute, "program");
  EXPECT_EQ(he.metrics, std::vector<std::string>{"pass@1"});
  // strata.humaneval_program: the prompt, then the completion.
  EXPECT_EQ(apply_filters(he.filters, "    return 1\n", he.examples[0].prompt),
            he.examples[0].prompt + "    return 1\n");
  EXPECT_TRUE(he.examples[0].target.ends_with("\ncheck(has_close_elements)"));
  const TaskData mbpp = load_harness_task(shipped(), "mbpp", -1, 7, 1);
  EXPECT_EQ(mbpp.execute, "program");
  EXPECT_TRUE(mbpp.filters.empty());  // the completion alone, then the tests
  EXPECT_EQ(mbpp.examples[0].target,
            "assert add(1, 2) == 3\nassert add(0, 0) == 0\nassert add(-1, 1) == 0");
  EXPECT_EQ(mbpp.generation.until, std::vector<std::string>{"[DONE]"});
  EXPECT_ERROR(require_code_permission(kSource + "/eval", {"mbpp"}, false,
                                       "pass --allow-code-execution", &shipped()),
               "task 'mbpp' executes model-written code");
}

TEST(PaperTasks, ShippedTasksComeAfterTheTomlTasksAndIncludePathTasks) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  testing::TempDir tmp;
  const std::string dir = tmp.path();
  write(dir + "/mine.yaml",
        "task: nq_open\ndataset_path: json\ndataset_kwargs:\n  data_files: x.jsonl\n"
        "output_type: generate_until\ndoc_to_text: q\ndoc_to_target: a\n");
  HarnessTasks h = index_harness_tasks({dir}, kDatasets);
  add_shipped_tasks(h, kShipped, [](const std::string& n) { return n == "piqa" || n == "mmlu"; });
  EXPECT_EQ(h.files.at("nq_open"), dir + "/mine.yaml");  // --include-path wins
  EXPECT_EQ(h.files.at("race"), kShipped + "/race/race.yaml");
  EXPECT_FALSE(h.files.count("piqa"));  // the TOML task keeps its name
  EXPECT_EQ(h.shadowed.at("piqa"), kShipped + "/piqa/piqa.yaml");
  EXPECT_FALSE(h.groups.count("mmlu"));
  EXPECT_EQ(h.expand("mmlu_humanities").size(), 13u);
  const std::string table = harness_task_table(h);
  EXPECT_NE(table.find("piqa"), std::string::npos);
  EXPECT_NE(table.find("(the TOML task runs; --include-path"), std::string::npos) << table;
  EXPECT_NE(table.find("topv2"), std::string::npos);
  // Given as --include-path, the shipped folder is an ordinary one.
  HarnessTasks both = index_harness_tasks({kShipped}, kDatasets);
  add_shipped_tasks(both, kShipped, [](const std::string&) { return true; });
  EXPECT_TRUE(both.files.count("piqa"));
  EXPECT_TRUE(both.shadowed.empty());
}

TEST(PaperTasks, StrataBuiltinsAndPythonFunctionsAreNamedInOneLine) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  testing::TempDir tmp;
  const std::string dir = tmp.path();
  write(dir + "/rows.jsonl", "{\"q\": \"a?\", \"a\": \"b\"}\n");
  const std::string head = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: " + dir +
                           "/rows.jsonl\ntest_split: test\ndoc_to_text: q\ndoc_to_target: a\n";
  write(dir + "/a.yaml", "task: a\n" + head +
                             "output_type: multiple_choice\ndoc_to_choice: ['b']\n"
                             "process_results: !function utils.process_results\n");
  write(dir + "/b.yaml", "task: b\n" + head +
                             "output_type: generate_until\nmetric_list:\n"
                             "  - metric: !function strata.nosuch\n");
  write(dir + "/c.yaml", "task: c\n" + head +
                             "output_type: generate_until\nfilter_list:\n  - name: x\n"
                             "    filter:\n      - function: custom\n"
                             "        filter_fn: !function utils.build\n");
  write(dir + "/d.yaml", "task: d\n" + head +
                             "output_type: generate_until\n"
                             "process_results: !function strata.truthfulqa_mc2\n");
  const HarnessTasks h = index_harness_tasks({dir}, kDatasets);
  EXPECT_ERROR(load_harness_task(h, "a", 0, 1, 0),
               "task 'a': process_results is a Python function (!function utils.process_results)",
               "strata built-in");
  EXPECT_ERROR(load_harness_task(h, "b", 0, 1, 0), "task 'b': metric: !function strata.nosuch",
               "strata.truthfulqa_mc2, strata.pass_at_1, strata.humaneval_program, "
               "strata.hendrycks_math_docs, strata.hendrycks_math, strata.ifeval");
  EXPECT_ERROR(load_harness_task(h, "c", 0, 1, 0), "filter custom is a Python function",
               "utils.build");
  EXPECT_ERROR(load_harness_task(h, "d", 0, 1, 0),
               "truthfulqa_mc2 needs output_type "
               "multiple_choice");
}

TEST(PaperTasks, CsvDatasetsTakeADelimiterAndQuoteNone) {
  if (!yaml_available()) GTEST_SKIP() << "built without yaml-cpp";
  testing::TempDir tmp;
  const std::string dir = tmp.path();
  write(dir + "/rows.tsv", "q\ta\nsay \"hi\"\tx,y\n");
  write(dir + "/t.yaml", "task: t\ndataset_path: csv\ndataset_kwargs:\n  data_files:\n    test: " +
                             dir + "/rows.tsv\n  delimiter: \"\\t\"\n  quoting: 3\n" +
                             "test_split: test\noutput_type: generate_until\n"
                             "doc_to_text: q\ndoc_to_target: a\n");
  write(dir + "/u.yaml", "task: u\ndataset_path: csv\ndataset_kwargs:\n  data_files:\n    test: " +
                             dir + "/rows.tsv\n  delimiter: \"\\t\"\n" +
                             "test_split: test\noutput_type: generate_until\n"
                             "doc_to_text: q\ndoc_to_target: a\n");
  write(dir + "/v.yaml", "task: v\ndataset_path: csv\ndataset_kwargs:\n  data_files:\n    test: " +
                             dir + "/rows.tsv\n  quoting: 1\n" +
                             "test_split: test\noutput_type: generate_until\n"
                             "doc_to_text: q\ndoc_to_target: a\n");
  const HarnessTasks h = index_harness_tasks({dir}, kDatasets);
  const TaskData t = load_harness_task(h, "t", 0, 1, 0);
  ASSERT_EQ(t.examples.size(), 1u);
  EXPECT_EQ(t.examples[0].requests[0].context, "say \"hi\"");
  EXPECT_EQ(t.examples[0].target, "x,y");
  EXPECT_ERROR(load_harness_task(h, "u", 0, 1, 0), "rows.tsv:2: quote inside an unquoted field");
  EXPECT_ERROR(load_harness_task(h, "v", 0, 1, 0), "quoting must be 0 (QUOTE_MINIMAL) or 3");
}

}  // namespace
}  // namespace strata
