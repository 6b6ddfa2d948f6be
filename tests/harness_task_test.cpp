// lm-evaluation-harness task YAMLs (eval/harness_task.h): tasks written in the
// harness's format over the shipped data give exactly the requests, choices,
// gold answers and few-shot preambles of strata's own TOML tasks (ARC-Easy,
// COPA, LAMBADA, MMLU with the harness's own MMLU template and 5 shots over a
// local copy of cais/mmlu); tags, groups and includes resolve; a
// generate_until task carries its stop strings, regex filter and exact_match
// options; what strata cannot run is refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/yaml.h"
#include "eval/harness_task.h"
#include "eval/task.h"
#include "testing.h"

namespace strata {
namespace {

const std::string kSource = STRATA_SOURCE_DIR;
const std::string kEval = kSource + "/eval";
const std::string kYamls = kSource + "/tests/fixtures/harness_tasks";
const std::string kDatasets = kSource + "/tests/fixtures/harness_datasets";

const HarnessTasks& tasks() {
  static const HarnessTasks h = index_harness_tasks({kYamls}, kDatasets);
  return h;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Same requests (context and continuation), choices and gold, example by example.
void expect_same_requests(const TaskData& yaml, const std::vector<EvalExample>& toml) {
  ASSERT_EQ(yaml.examples.size(), toml.size());
  for (size_t i = 0; i < toml.size(); ++i) {
    const EvalExample &a = yaml.examples[i], &b = toml[i];
    ASSERT_EQ(a.requests.size(), b.requests.size()) << "example " << i;
    for (size_t r = 0; r < a.requests.size(); ++r) {
      EXPECT_EQ(a.requests[r].context, b.requests[r].context) << "example " << i;
      EXPECT_EQ(a.requests[r].continuation, b.requests[r].continuation) << "example " << i;
    }
    EXPECT_EQ(a.gold, b.gold) << "example " << i;
    EXPECT_EQ(a.choices, b.choices) << "example " << i;
    EXPECT_EQ(a.prefix_size, b.prefix_size) << "example " << i;
  }
}

TEST(HarnessYaml, ReadsMappingsListsScalarsAndFunctionTags) {
  const auto j = parse_yaml(
      "a: 1\nb: 2.5\nc: 'yes'\nd: yes\ne: ~\nf: [x, 'y z']\ng: !function utils.process_docs\n"
      "h: |\n  line one\n  line two\ni: \"tab\\there\"\n",
      "t.yaml");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], 2.5);
  EXPECT_EQ(j["c"], "yes");
  EXPECT_EQ(j["d"], true);
  EXPECT_TRUE(j["e"].is_null());
  EXPECT_EQ(j["f"][1], "y z");
  EXPECT_EQ(j["g"]["!function"], "utils.process_docs");
  EXPECT_EQ(j["h"], "line one\nline two\n");
  EXPECT_EQ(j["i"], "tab\there");
  EXPECT_ERROR(parse_yaml("a: [1, 2\nb: 3\n", "bad.yaml"), "bad.yaml:");
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys.front(), "a");  // file order
  EXPECT_EQ(keys.back(), "i");
}

TEST(HarnessTasks, IndexesTasksTagsGroupsAndIncludes) {
  const HarnessTasks& h = tasks();
  EXPECT_EQ(h.files.size(), 5u);
  EXPECT_EQ(h.expand("ai2_arc_local"), std::vector<std::string>{"arc_easy"});
  EXPECT_EQ(h.expand("mmlu_local"), std::vector<std::string>{"mmlu_abstract_algebra"});
  EXPECT_TRUE(h.expand("nonesuch").empty());
  EXPECT_EQ(harness_data_status(h, "arc_easy").find("missing"), std::string::npos);
  EXPECT_NE(harness_task_table(h).find("mmlu_abstract_algebra"), std::string::npos);
}

TEST(HarnessTasks, ArcCopaAndLambadaEqualTheTomlTasks) {
  for (const char* name : {"arc_easy", "copa", "lambada_openai"}) {
    SCOPED_TRACE(name);
    const TaskData yaml = load_harness_task(tasks(), name, -1, 1234, 40);
    const TaskData toml = load_task(kEval, name, 0, 1234, 40);
    EXPECT_EQ(yaml.kind, toml.kind);
    EXPECT_EQ(yaml.available, toml.available);
    EXPECT_EQ(yaml.metrics.size(), toml.metrics.size());
    expect_same_requests(yaml, toml.examples);
  }
}

TEST(HarnessTasks, MmluTemplateWithFiveShotsEqualsTheTomlTask) {
  // The harness's own MMLU template over cais/mmlu's schema (choices as a
  // list) from a local copy, 5 shots first_n from dev, against strata's TOML
  // MMLU over the CSV export of the same rows.
  const TaskData yaml = load_harness_task(tasks(), "mmlu_abstract_algebra", -1, 1234, 0);
  EXPECT_EQ(yaml.shots, 5);
  const TaskData toml = load_task(kEval, "mmlu", 5, 1234, 0);
  std::vector<EvalExample> algebra;
  for (const EvalExample& ex : toml.examples)
    if (ex.group == "abstract_algebra" && algebra.size() < yaml.examples.size())
      algebra.push_back(ex);
  ASSERT_EQ(algebra.size(), 6u);
  expect_same_requests(yaml, algebra);
  EXPECT_EQ(yaml.examples[0].shots.size(), 5u);
}

TEST(HarnessTasks, GenerateUntilCarriesStopsFiltersAndExactMatchOptions) {
  const TaskData t = load_harness_task(tasks(), "gsm8k_mini", -1, 1234, 0);
  EXPECT_EQ(t.kind, TaskKind::Generate);
  ASSERT_EQ(t.examples.size(), 3u);
  EXPECT_EQ(
      t.examples[0].requests[0].context,
      "Question: Lily has 3 red balls and 4 blue balls. How many balls does she have?\nAnswer:");
  EXPECT_EQ(t.examples[2].target, "1000 - 250 = <<1000-250=750>>750 dollars.\n#### 750");
  EXPECT_EQ(t.generation.until, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  ASSERT_EQ(t.filters.size(), 2u);
  EXPECT_EQ(t.filters[0].function, "regex");
  EXPECT_EQ(t.filters[0].pattern, R"(#### (\-?[0-9\.\,]+))");
  EXPECT_EQ(t.filters[1].function, "take_first");
  EXPECT_TRUE(t.exact_match.ignore_case);
  EXPECT_EQ(t.exact_match.regexes_to_ignore.size(), 4u);
  EXPECT_EQ(t.metrics, std::vector<std::string>{"exact_match"});
}

TEST(HarnessTasks, RefusesWhatItCannotRunInOneLine) {
  testing::TempDir dir;
  write(dir / "a.yaml",
        "task: fn\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: x.jsonl\n"
        "test_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: !function utils.doc_to_text\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n");
  write(dir / "b.yaml",
        "task: f1\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: rows.jsonl\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_text: q\ndoc_to_target: a\n"
        "metric_list:\n  - metric: f1\n");
  write(dir / "c.yaml",
        "task: missing\ndataset_path: allenai/ai2_arc\ndataset_name: ARC-Easy\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a]\n");
  write(dir / "d.yaml",
        "task: strict\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: rows.jsonl\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: \"{{ nope }}\"\n"
        "doc_to_target: 0\ndoc_to_choice: [a, b]\n");
  write(dir / "rows.jsonl", "{\"q\": \"why\", \"a\": \"because\"}\n");
  const HarnessTasks h = index_harness_tasks({dir.path()}, dir / "datasets");
  EXPECT_ERROR(load_harness_task(h, "fn", 0, 1, 0), dir / "a.yaml",
               "task 'fn': doc_to_text is a Python function (!function utils.doc_to_text)");
  EXPECT_ERROR(load_harness_task(h, "f1", 0, 1, 0), "metric 'f1' is not supported", "exact_match");
  EXPECT_ERROR(load_harness_task(h, "missing", 0, 1, 0), "split 'test' is not here",
               dir / "datasets/allenai/ai2_arc/ARC-Easy/test.jsonl");
  EXPECT_NE(harness_data_status(h, "missing").find("missing: "), std::string::npos);
  EXPECT_ERROR(load_harness_task(h, "strict", 0, 1, 0), dir / "rows.jsonl:1",
               dir / "d.yaml: doc_to_text:1:4: 'nope' is undefined");
  write(dir / "e.yaml", "task: fn\n");
  EXPECT_ERROR(index_harness_tasks({dir.path()}, ""), "task 'fn' is defined twice", dir / "a.yaml",
               dir / "e.yaml");
  EXPECT_ERROR(index_harness_tasks({dir / "nope"}, ""), "--include-path", "no such folder");
}

}  // namespace
}  // namespace strata
