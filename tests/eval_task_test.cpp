// Evaluation tasks: every shipped task definition loads with the right counts
// and renders like lm-evaluation-harness; few-shot sampling; the format
// adapters (CSV quoting, PIQA labels, original HellaSwag and ARC, document
// splits, the WikiText detokenizer); one-line errors naming file and line.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/task.h"
#include "testing.h"

namespace strata {
namespace {

const std::string kSource = STRATA_SOURCE_DIR;
const std::string kEval = kSource + "/eval";
const std::string kBench = kSource + "/data/benchmarks";

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TaskData load(const std::string& name, int shots = 0, int64_t limit = 0, uint64_t seed = 1234) {
  return load_task(kEval, name, shots, seed, limit);
}

void expect_request(const LlRequest& r, const std::string& context, const std::string& cont) {
  EXPECT_EQ(r.context, context);
  EXPECT_EQ(r.continuation, cont);
}

// ------------------------------------------------------------ shipped tasks

TEST(ShippedTasks, List) {
  EXPECT_EQ(list_tasks(kEval),
            (std::vector<std::string>{"arc_challenge", "arc_easy", "boolq", "copa", "hellaswag",
                                      "humaneval", "lambada", "mmlu", "openbookqa", "piqa",
                                      "shakespeare", "tinystories", "wikitext2", "winogrande"}));
  // `all`: the comparable tasks that run without code execution.
  EXPECT_EQ(all_tasks(kEval),
            (std::vector<std::string>{"arc_challenge", "arc_easy", "copa", "lambada", "mmlu",
                                      "openbookqa", "piqa", "shakespeare", "tinystories",
                                      "wikitext2", "winogrande"}));
  EXPECT_FALSE(load("boolq", 0, 1).comparable);
  EXPECT_NE(load("boolq", 0, 1).not_comparable_because.find("titles"), std::string::npos);
  EXPECT_FALSE(load("hellaswag", 0, 1).comparable);
  EXPECT_EQ(load("lambada", 0, 1).harness_task, "lambada_openai");
}

TEST(ShippedTasks, ArcEasy) {
  const TaskData t = load("arc_easy");
  EXPECT_EQ(t.kind, TaskKind::MultipleChoice);
  EXPECT_EQ(t.file, kEval + "/arc_easy.toml");
  ASSERT_EQ(t.examples.size(), 2376u);
  EXPECT_EQ(t.metrics, (std::vector<std::string>{"acc", "acc_norm"}));
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 4u);
  const std::string q =
      "Question: Which statement best explains why photosynthesis is the foundation of most food "
      "webs?\nAnswer:";
  expect_request(ex.requests[0], q, " Sunlight is the source of energy for nearly all ecosystems.");
  expect_request(ex.requests[3], q, " The producers in all ecosystems are plants.");
  EXPECT_EQ(ex.gold, 0);
  EXPECT_EQ(ex.group, "");
  EXPECT_EQ(ex.where, kBench + "/llm-foundry/arc_easy.jsonl:1");
  EXPECT_EQ(t.examples[1].gold, 1);
}

TEST(ShippedTasks, ArcChallenge) {
  const TaskData t = load("arc_challenge");
  ASSERT_EQ(t.examples.size(), 1172u);
  const EvalExample& ex = t.examples[0];
  expect_request(ex.requests[2],
                 "Question: An astronomer observes that a planet rotates faster after a meteorite "
                 "impact. Which is the most likely effect of this increase in rotation?\nAnswer:",
                 " Planetary days will become shorter.");
  EXPECT_EQ(ex.gold, 2);
}

TEST(ShippedTasks, BoolqChoicesAreNoYes) {
  const TaskData t = load("boolq");
  ASSERT_EQ(t.examples.size(), 3270u);
  EXPECT_EQ(t.metrics, std::vector<std::string>{"acc"});
  for (const EvalExample& ex : t.examples) {
    ASSERT_EQ(ex.requests.size(), 2u);
    EXPECT_EQ(ex.requests[0].continuation, " no");
    EXPECT_EQ(ex.requests[1].continuation, " yes");
    EXPECT_EQ(ex.requests[0].context, ex.requests[1].context);
  }
  // "Passage: " is dropped: the harness's "{passage}\nQuestion: {question}?\nAnswer:"
  // (boolq.yaml), but the passage lacks the harness's "Title -- " prefix, so the
  // task says it is not comparable.
  const std::string& c = t.examples[0].requests[0].context;
  EXPECT_EQ(c.rfind("All biomass goes through at least some of these steps:", 0), 0u) << c;
  EXPECT_TRUE(c.ends_with("\nQuestion: does ethanol take more energy make that produces?\nAnswer:"))
      << c;
  EXPECT_EQ(t.examples[0].gold, 0);
  int yes = 0;
  for (const EvalExample& ex : t.examples) yes += ex.gold;
  EXPECT_EQ(yes, 2033);
}

// COPA as the harness's copa.yaml renders the SuperGLUE row {premise: "The
// man turned on the faucet.", choice1: "The toilet filled with water.",
// choice2: "Water flowed from the spout.", question: "effect"}: doc_to_text
// premise.strip()[:-1] + " therefore"; doc_to_choice " " + the choice with its
// first letter lower-cased; the default target delimiter " " before it.
TEST(ShippedTasks, CopaConnectorAndLowerCasedChoices) {
  const TaskData t = load("copa");
  ASSERT_EQ(t.examples.size(), 100u);
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 2u);
  expect_request(ex.requests[0], "The man turned on the faucet therefore",
                 "  the toilet filled with water.");
  expect_request(ex.requests[1], "The man turned on the faucet therefore",
                 "  water flowed from the spout.");
  EXPECT_EQ(ex.gold, 1);
  for (const EvalExample& e : t.examples) {
    EXPECT_EQ(e.requests[0].context.find(','), e.requests[0].context.find(", "))
        << "a comma before the connector: " << e.requests[0].context;
    EXPECT_FALSE(e.requests[0].context.ends_with(", because") ||
                 e.requests[0].context.ends_with(", therefore"));
  }
  int because = 0;
  for (const EvalExample& e : t.examples) {
    const std::string& c = e.requests[0].context;
    because += c.ends_with(" because");
  }
  EXPECT_EQ(because, 52);
}

// HumanEval as the harness's humaneval.yaml: the prompt as the context,
// "{test}\ncheck({entry_point})" as the target the completion runs against,
// greedy, stopped at a new top-level statement.
TEST(ShippedTasks, HumanEval) {
  const TaskData t = load("humaneval");
  EXPECT_EQ(t.kind, TaskKind::Generate);
  ASSERT_EQ(t.examples.size(), 164u);
  EXPECT_EQ(t.execute, "humaneval");
  EXPECT_EQ(t.metrics, std::vector<std::string>{"pass@1"});
  EXPECT_EQ(t.generation.until,
            (std::vector<std::string>{"\nclass", "\ndef", "\n#", "\nif", "\nprint"}));
  EXPECT_EQ(t.generation.max_gen_toks, 1024);
  EXPECT_FALSE(t.generation.do_sample);
  const EvalExample& ex = t.examples[0];
  EXPECT_EQ(ex.requests[0].context, ex.prompt);
  EXPECT_EQ(ex.prompt.rfind("from typing import List\n\n\ndef has_close_elements(", 0), 0u);
  EXPECT_TRUE(ex.target.ends_with("\ncheck(has_close_elements)")) << ex.target;
  EXPECT_EQ(ex.target.find("def check(candidate):"), ex.target.find("def check("));
}

TEST(ShippedTasks, OpenBookQa) {
  const TaskData t = load("openbookqa");
  ASSERT_EQ(t.examples.size(), 500u);
  expect_request(t.examples[1].requests[0],
                 "There is most likely going to be fog around:", " a marsh");
  EXPECT_EQ(t.examples[1].gold, 0);
}

TEST(ShippedTasks, PiqaReadsTheLabelsFile) {
  const TaskData t = load("piqa");
  ASSERT_EQ(t.examples.size(), 1838u);
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 2u);
  expect_request(ex.requests[0],
                 "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:",
                 " Provide the guinea pig with a cage full of a few inches of bedding made of "
                 "ripped paper strips, you will also need to supply it with a water bottle and a "
                 "food dish.");
  // valid-labels.lst starts 0, 1, 1, 1, 0.
  const int want[] = {0, 1, 1, 1, 0};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.examples[size_t(i)].gold, want[i]) << i;
  EXPECT_EQ(t.examples[1].where, kBench + "/piqa/valid.jsonl:2");
}

TEST(ShippedTasks, WinograndePartialScoring) {
  const TaskData t = load("winogrande");
  ASSERT_EQ(t.examples.size(), 1267u);
  EXPECT_EQ(t.metrics, std::vector<std::string>{"acc"});
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 2u);
  // One context per option, the same continuation after each.
  expect_request(ex.requests[0], "Sarah was a much better surgeon than Maria so Sarah",
                 " always got the easier cases.");
  expect_request(ex.requests[1], "Sarah was a much better surgeon than Maria so Maria",
                 " always got the easier cases.");
  EXPECT_EQ(ex.gold, 1);

  // A solved few-shot example is the gold context + " " + the continuation.
  const TaskData one = load("winogrande", 1, 20);
  EXPECT_EQ(one.shots, 1);
  ASSERT_EQ(one.examples.size(), 20u);
  for (const EvalExample& e : one.examples) {
    const std::string& c0 = e.requests[0].context;
    const std::string& c1 = e.requests[1].context;
    const size_t cut = c0.find("\n\n");
    ASSERT_NE(cut, std::string::npos);
    EXPECT_EQ(c0.substr(0, cut + 2), c1.substr(0, cut + 2));  // the same shot before each
    const std::string shot = c0.substr(0, cut);
    bool found = false;
    for (const EvalExample& w : t.examples) {
      const std::string solved = w.requests[size_t(w.gold)].context + w.requests[0].continuation;
      if (solved == shot) found = true;
    }
    EXPECT_TRUE(found) << shot;
  }
}

TEST(ShippedTasks, LambadaLastWord) {
  const TaskData t = load("lambada");
  EXPECT_EQ(t.kind, TaskKind::LastWord);
  ASSERT_EQ(t.examples.size(), 5153u);
  EXPECT_EQ(t.metrics, (std::vector<std::string>{"acc", "perplexity"}));
  for (const EvalExample& ex : t.examples) {
    ASSERT_EQ(ex.requests.size(), 1u);
    ASSERT_FALSE(ex.requests[0].context.empty());
    EXPECT_NE(ex.requests[0].context.back(), ' ');  // the space goes with the word
    EXPECT_EQ(ex.requests[0].continuation[0], ' ');
  }
  const LlRequest& r = t.examples[0].requests[0];
  EXPECT_EQ(
      r.context.rfind("In my palm is a clear stone, and inside it is a small ivory statuette.", 0),
      0u);
  const std::string end = "his mouth curved in a confident grin, I don't care about";
  EXPECT_TRUE(r.context.ends_with(end)) << r.context;
  EXPECT_EQ(r.continuation, " signs");
}

TEST(ShippedTasks, HellaswagSample) {
  const TaskData t = load("hellaswag");
  ASSERT_EQ(t.examples.size(), 4u);
  const EvalExample& ex = t.examples[0];
  ASSERT_EQ(ex.requests.size(), 4u);
  expect_request(ex.requests[3],
                 "Removing ice from car: Then, the man writes over the snow covering the window of "
                 "a car, and a woman wearing winter clothes smiles. Then",
                 " , the man continues removing the snow on his car.");
  EXPECT_EQ(ex.gold, 3);
}

TEST(ShippedTasks, MmluZeroShot) {
  const TaskData t = load("mmlu");
  EXPECT_EQ(t.shots, 0);
  ASSERT_EQ(t.examples.size(), 14042u);
  EXPECT_EQ(t.metrics, (std::vector<std::string>{"acc", "acc_macro"}));
  std::set<std::string> groups;
  for (const EvalExample& ex : t.examples) {
    groups.insert(ex.group);
    ASSERT_EQ(ex.requests.size(), 4u);
    ASSERT_GE(ex.gold, 0);
    ASSERT_LT(ex.gold, 4);
  }
  EXPECT_EQ(groups.size(), 57u);
  // The harness's four categories cover every subject (mmlu.toml [categories]).
  EXPECT_EQ(t.categories.size(), 57u);
  EXPECT_EQ(t.categories.at("anatomy"), "stem");
  EXPECT_EQ(t.categories.at("global_facts"), "other");
  EXPECT_EQ(t.categories.at("sociology"), "social_sciences");
  EXPECT_EQ(t.categories.at("world_religions"), "humanities");
  // {question|strip} is Python's strip(): sociology's question 70 ends in
  // U+0085 (NEL), which the harness's template removes.
  for (const EvalExample& ex : t.examples) {
    if (ex.where == kBench + "/mmlu_hf_csv/test/sociology_test.csv:71") {
      EXPECT_NE(ex.requests[0].context.find("suggests that\nA. "), std::string::npos)
          << ex.requests[0].context;
    }
  }
  EXPECT_TRUE(groups.count("abstract_algebra"));
  EXPECT_TRUE(groups.count("high_school_computer_science"));
  const EvalExample& ex = t.examples[0];
  EXPECT_EQ(ex.group, "abstract_algebra");
  EXPECT_EQ(ex.where, kBench + "/mmlu_hf_csv/test/abstract_algebra_test.csv:2");
  EXPECT_EQ(ex.gold, 1);
  const std::string context =
      "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
      "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
      "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:";
  expect_request(ex.requests[0], context, " A");
  expect_request(ex.requests[1], context, " B");
  expect_request(ex.requests[3], context, " D");
}

const char* kAlgebraDescription =
    "The following are multiple choice questions (with answers) about abstract algebra.\n\n";
const char* kAlgebraQuestion =
    "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:";
// abstract_algebra_dev.csv, solved, in file order.
const char* kAlgebraDev[] = {
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B",
    "Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If "
    "H "
    "and K are subgroups of G then HK is a subgroup of G.\nA. True, True\nB. False, False\nC. "
    "True, False\nD. False, True\nAnswer: B",
    "Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 "
    "| "
    "The symmetric group S_10 has 10 elements.\nA. True, True\nB. False, False\nC. True, False\nD. "
    "False, True\nAnswer: C",
    "Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | "
    "Every subgroup of an abelian group is abelian.\nA. True, True\nB. False, False\nC. True, "
    "False\nD. False, True\nAnswer: A",
    "Find the characteristic of the ring 2Z.\nA. 0\nB. 3\nC. 12\nD. 30\nAnswer: A",
};

TEST(ShippedTasks, MmluOneShotAndFiveShotFromDev) {
  const TaskData one = load("mmlu", 1, 3);
  EXPECT_EQ(one.shots, 1);
  ASSERT_EQ(one.examples.size(), 3u);
  EXPECT_EQ(one.examples[0].requests[2].context,
            std::string(kAlgebraDescription) + kAlgebraDev[0] + "\n\n" + kAlgebraQuestion);
  EXPECT_EQ(one.examples[0].requests[2].continuation, " C");

  const TaskData five = load("mmlu", -1, 2);  // the task's default: 5-shot
  EXPECT_EQ(five.shots, 5);
  std::string want = kAlgebraDescription;
  for (const char* shot : kAlgebraDev) want += std::string(shot) + "\n\n";
  want += kAlgebraQuestion;
  EXPECT_EQ(five.examples[0].requests[0].context, want);
  // first_n: every example of a subject gets the same five, whatever the seed.
  const std::string shots = want.substr(0, want.size() - std::string(kAlgebraQuestion).size());
  const TaskData other_seed = load_task(kEval, "mmlu", -1, 99, 2);
  EXPECT_EQ(other_seed.examples[0].requests[0].context, want);
  EXPECT_EQ(other_seed.examples[1].requests[0].context.rfind(shots, 0), 0u);
}

TEST(ShippedTasks, MmluFiveShotStaysWithinTheSubject) {
  const TaskData t = load("mmlu", 5);
  ASSERT_EQ(t.examples.size(), 14042u);
  std::string last_group;
  for (const EvalExample& ex : t.examples) {
    if (ex.group == last_group) continue;  // one check per subject
    last_group = ex.group;
    std::string words = ex.group;
    for (char& c : words) c = c == '_' ? ' ' : c;
    const std::string& c = ex.requests[0].context;
    EXPECT_EQ(c.rfind("The following are multiple choice questions (with answers) about " + words +
                          ".\n\n",
                      0),
              0u)
        << ex.group;
    size_t answers = 0;
    for (size_t p = 0; (p = c.find("\nAnswer: ", p)) != std::string::npos; ++p) ++answers;
    EXPECT_EQ(answers, 5u) << ex.group;
  }
}

TEST(ShippedTasks, WikitextArticles) {
  const TaskData t = load("wikitext2");
  EXPECT_EQ(t.kind, TaskKind::Perplexity);
  EXPECT_TRUE(t.examples.empty());
  ASSERT_EQ(t.documents.size(), 62u);
  EXPECT_EQ(t.metrics, (std::vector<std::string>{"word_perplexity", "byte_perplexity",
                                                 "bits_per_byte", "token_perplexity"}));
  // Detokenised like the harness: " @-@ " -> "-", " , " -> ", ", " \n" -> "\n";
  // the blank line after the title is kept (the original layout).
  EXPECT_EQ(t.documents[0].substr(0, 130),
            " = Robert Boulter =\n\nRobert Boulter is an English film, television and theatre "
            "actor. He had a guest-starring role on the televisi");
  size_t bytes = 0;
  for (const std::string& d : t.documents) {
    EXPECT_EQ(d.rfind(" = ", 0), 0u) << d.substr(0, 40);
    EXPECT_EQ(d.find('\r'), std::string::npos);
    bytes += d.size();
  }
  EXPECT_EQ(bytes, 1240466u);  // the harness's pages and detokenizer, run in Python
  // Word and byte perplexity divide by the counts of the pages before
  // detokenising: len(re.split(r"\s+", page)) and len(page.encode()), summed
  // in Python over the harness's 62 pages.
  int64_t words = 0, raw_bytes = 0;
  for (size_t d = 0; d < t.documents.size(); ++d) {
    words += t.document_words[d];
    raw_bytes += t.document_bytes[d];
  }
  EXPECT_EQ(words, 241335);
  EXPECT_EQ(raw_bytes, 1290527);
  EXPECT_EQ(load("wikitext2", 0, 5).documents.size(), 5u);
}

TEST(ShippedTasks, TinyStoriesAndShakespeare) {
  const TaskData stories = load("tinystories");
  ASSERT_EQ(stories.documents.size(), 5u);
  EXPECT_EQ(stories.documents[0].rfind("Once upon a time there was a little boy named Ben.", 0),
            0u);
  EXPECT_TRUE(
      stories.documents.back().ends_with("the spirit was real and they could play together."));

  const TaskData plays = load("shakespeare");
  ASSERT_EQ(plays.documents.size(), 7222u);
  EXPECT_EQ(plays.documents[0], "First Citizen:\nBefore we proceed any further, hear me speak.");
  EXPECT_EQ(plays.documents[1], "All:\nSpeak, speak.");
  EXPECT_EQ(load("shakespeare", 3, 10).documents.size(), 10u);  // shots do not apply
  EXPECT_EQ(load("shakespeare", 3, 10).shots, 0);
}

TEST(ShippedTasks, Limit) {
  EXPECT_EQ(load("arc_easy", 0, 10).examples.size(), 10u);
  EXPECT_EQ(load("copa", 0, 1000).examples.size(), 100u);
  // The limited examples are the first ones, with the same few-shot examples.
  const TaskData all = load("copa", 3);
  const TaskData few = load("copa", 3, 7);
  ASSERT_EQ(few.examples.size(), 7u);
  for (size_t i = 0; i < 7; ++i)
    EXPECT_EQ(few.examples[i].requests[0].context, all.examples[i].requests[0].context);
}

// ------------------------------------------------------------ scratch tasks

// A task directory with one task file and data files in a temporary folder.
class Scratch {
 public:
  std::string dir() const { return tmp_.path(); }
  std::string path(const std::string& name) const { return tmp_ / name; }
  void file(const std::string& name, const std::string& text) const { write(tmp_ / name, text); }
  TaskData load(const std::string& toml, int shots = 0, uint64_t seed = 1, int64_t limit = 0) {
    file("t.toml", toml);
    return load_task(tmp_.path(), "t", shots, seed, limit);
  }

 private:
  testing::TempDir tmp_;
};

// n rows "q<i>" with choices "a<i>"/"b<i>"; the gold answer is a<i>.
std::string numbered_rows(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += "{\"q\": \"q" + std::to_string(i) + "\", \"choices\": [\"a" + std::to_string(i) +
           "\", \"b" + std::to_string(i) + "\"], \"gold\": 0}\n";
  return out;
}

const char* kNumberedTask =
    "summary = \"numbered\"\nkind = \"multiple_choice\"\nformat = \"jsonl\"\n"
    "data = \"rows.jsonl\"\ntext = \"{q}:\"\nchoices = \"choices\"\ngold = \"gold\"\n";

// The shots of a context "q3: a3\n\nq9: a9\n\nq17:", as row numbers.
std::vector<int> shots_of(const std::string& context) {
  std::vector<int> out;
  size_t pos = 0;
  for (size_t cut; (cut = context.find("\n\n", pos)) != std::string::npos; pos = cut + 2) {
    const std::string shot = context.substr(pos, cut - pos);
    const size_t colon = shot.find(':');
    EXPECT_EQ(shot.substr(colon), ": a" + shot.substr(1, colon - 1)) << shot;
    out.push_back(std::stoi(shot.substr(1, colon - 1)));
  }
  return out;
}

TEST(FewShot, DeterministicDistinctNeverSelf) {
  Scratch s;
  s.file("rows.jsonl", numbered_rows(40));
  const TaskData a = s.load(kNumberedTask, 5, 7);
  const TaskData b = s.load(kNumberedTask, 5, 7);
  const TaskData c = s.load(kNumberedTask, 5, 8);
  ASSERT_EQ(a.examples.size(), 40u);
  EXPECT_EQ(a.shots, 5);
  int differ = 0;
  std::set<int> used;
  for (size_t i = 0; i < 40; ++i) {
    const std::string& ctx = a.examples[i].requests[0].context;
    EXPECT_EQ(ctx, b.examples[i].requests[0].context);
    differ += ctx != c.examples[i].requests[0].context;
    EXPECT_TRUE(ctx.ends_with("\n\nq" + std::to_string(i) + ":")) << ctx;
    const std::vector<int> shots = shots_of(ctx);
    ASSERT_EQ(shots.size(), 5u) << ctx;
    const std::set<int> distinct(shots.begin(), shots.end());
    EXPECT_EQ(distinct.size(), 5u) << ctx;
    EXPECT_FALSE(distinct.count(int(i))) << "example " << i << " is its own shot: " << ctx;
    used.insert(shots.begin(), shots.end());
    EXPECT_EQ(a.examples[i].requests[1].context, ctx);
    EXPECT_EQ(a.examples[i].requests[0].continuation, " a" + std::to_string(i));
  }
  EXPECT_GT(differ, 30);               // another seed draws other shots
  EXPECT_GT(used.size(), size_t(35));  // and the draws cover the split
  // Every other row is a candidate: with 6 rows, 5 shots take all the others.
  s.file("rows.jsonl", numbered_rows(6));
  const TaskData all = s.load(kNumberedTask, 5, 3);
  for (size_t i = 0; i < 6; ++i) {
    std::vector<int> shots = shots_of(all.examples[i].requests[0].context);
    std::sort(shots.begin(), shots.end());
    std::vector<int> others;
    for (int k = 0; k < 6; ++k)
      if (k != int(i)) others.push_back(k);
    EXPECT_EQ(shots, others);
  }
  // More shots than there are other rows: as many as there are.
  EXPECT_EQ(s.load(kNumberedTask, 6, 3).shots, 5);
  EXPECT_EQ(s.load(kNumberedTask, 9, 3).examples[2].requests[0].context,
            all.examples[2].requests[0].context);
  s.file("rows.jsonl", numbered_rows(1));
  EXPECT_ERROR(s.load(kNumberedTask, 1), "t.toml", "no few-shot examples for", "rows.jsonl:1");
}

TEST(FewShot, SeparateSplitDelimitersAndDescription) {
  Scratch s;
  s.file("rows.jsonl", numbered_rows(3));
  s.file("train.jsonl",
         "{\"q\": \"t0\", \"choices\": [\"x\", \"y\"], \"gold\": 1}\n"
         "{\"q\": \"t1\", \"choices\": [\"x\", \"y\"], \"gold\": 0}\n");
  const TaskData t = s.load(std::string(kNumberedTask) +
                                "fewshot_data = \"train.jsonl\"\nfewshot_sampler = \"first_n\"\n"
                                "shots = 2\ntarget_delimiter = \"=\"\nfewshot_delimiter = \"|\"\n"
                                "description = \"About {q}.\\n\"\n",
                            -1);
  EXPECT_EQ(t.shots, 2);
  expect_request(t.examples[1].requests[0], "About q1.\nt0:=y|t1:=x|q1:", "=a1");
}

// ------------------------------------------------------------ formats

TEST(Formats, CsvQuoting) {
  Scratch s;
  // Quoted commas, doubled quotes, a line break inside quotes, CRLF records,
  // empty fields (quoted and not), a blank line and no final line break.
  s.file("rows.csv",
         "q,c0,c1,answer\r\n"
         "\"Hello, world\",\"say \"\"hi\"\"\",plain,0\r\n"
         "\"two\nlines\",,\"\",1\n"
         "\n"
         "last,\"a,b\",\"\"\"\",0");
  const TaskData t = s.load(
      "summary = \"csv\"\nkind = \"multiple_choice\"\nformat = \"csv\"\ndata = \"rows.csv\"\n"
      "text = \"[{q}]\"\nchoices = [\"{c0}\", \"{c1}\"]\ngold = \"answer\"\n");
  ASSERT_EQ(t.examples.size(), 3u);
  expect_request(t.examples[0].requests[0], "[Hello, world]", " say \"hi\"");
  expect_request(t.examples[0].requests[1], "[Hello, world]", " plain");
  expect_request(t.examples[1].requests[0], "[two\nlines]", " ");
  expect_request(t.examples[1].requests[1], "[two\nlines]", " ");
  EXPECT_EQ(t.examples[1].gold, 1);
  expect_request(t.examples[2].requests[0], "[last]", " a,b");
  expect_request(t.examples[2].requests[1], "[last]", " \"");
  EXPECT_EQ(t.examples[0].where, s.path("rows.csv") + ":2");
  EXPECT_EQ(t.examples[1].where, s.path("rows.csv") + ":3");
  EXPECT_EQ(t.examples[2].where, s.path("rows.csv") + ":6");

  const std::string task =
      "summary = \"csv\"\nkind = \"multiple_choice\"\nformat = \"csv\"\ndata = \"bad.csv\"\n"
      "text = \"{q}\"\nchoices = [\"{c0}\"]\ngold = \"answer\"\n";
  s.file("bad.csv", "q,c0,answer\nok,x,0\n\"never closed,x,0\n");
  EXPECT_ERROR(s.load(task), "bad.csv:3", "unterminated quoted field");
  s.file("bad.csv", "q,c0,answer\nok,x,0\nshort,0\n");
  EXPECT_ERROR(s.load(task), "bad.csv:3", "2 fields, the header has 3");
  s.file("bad.csv", "q,c0,answer\n\"x\"y,x,0\n");
  EXPECT_ERROR(s.load(task), "bad.csv:2", "after a closing quote");
}

TEST(Formats, HellaswagOriginalMatchesTheHarnessRendering) {
  Scratch s;
  const std::string fixtures = kBench + "/hf_dummy_original_formats/hellaswag__0.1.0/dummy_data/";
  // hellaswag_train.jsonl holds ind 4 and ind 8, the first two rows of
  // llm-foundry's preprocessed sample.
  const TaskData orig = s.load(
      "summary = \"hs\"\nkind = \"multiple_choice\"\n"
      "format = \"hellaswag_original\"\ndata = \"" +
      fixtures + "hellaswag_train.jsonl\"\n" +
      "text = \"{query}\"\nchoices = \"choices\"\ngold = \"label\"\n");
  const TaskData sample = load("hellaswag");
  ASSERT_EQ(orig.examples.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(orig.examples[i].gold, sample.examples[i].gold);
    ASSERT_EQ(orig.examples[i].requests.size(), 4u);
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_EQ(orig.examples[i].requests[c].context, sample.examples[i].requests[c].context);
      EXPECT_EQ(orig.examples[i].requests[c].continuation,
                sample.examples[i].requests[c].continuation);
    }
  }
  // The validation fixture: "he" is capitalised after the context.
  const TaskData val = s.load(
      "summary = \"hs\"\nkind = \"multiple_choice\"\n"
      "format = \"hellaswag_original\"\ndata = \"" +
      fixtures + "hellaswag_val.jsonl\"\n" +
      "text = \"{query}\"\nchoices = \"choices\"\ngold = \"label\"\n");
  expect_request(val.examples[0].requests[3],
                 "Roof shingle removal: A man is sitting on a roof. He",
                 " starts pulling up roofing on a roof.");

  // WikiHow artifacts: " [title]" -> ". ", "[...]" dropped, double spaces
  // collapsed once, ctx_b capitalised (the rest lower-cased, as Python does).
  s.file("hs.jsonl",
         "{\"activity_label\": \"Home  and Garden\", \"ctx_a\": \"[header] How to dig [title] "
         "Pick a spot. [step] Dig.\", \"ctx_b\": \"THEN you\", \"endings\": [\" plant [substeps] "
         "seeds.\", \"rest\"], \"label\": \"0\"}\n");
  const TaskData wiki = s.load(
      "summary = \"hs\"\nkind = \"multiple_choice\"\nformat = \"hellaswag_original\"\n"
      "data = \"hs.jsonl\"\ntext = \"{query}\"\nchoices = \"choices\"\ngold = \"label\"\n");
  expect_request(wiki.examples[0].requests[0],
                 "Home and Garden: How to dig. Pick a spot. Dig. Then you", " plant seeds.");
  EXPECT_EQ(wiki.examples[0].gold, 0);
}

TEST(Formats, ArcOriginalMatchesTheLlmFoundryExport) {
  Scratch s;
  const TaskData orig = s.load(
      "summary = \"arc\"\nkind = \"multiple_choice\"\nformat = \"jsonl\"\ndata = \"" + kBench +
      "/hf_dummy_original_formats/ai2_arc__ARC-Challenge_1.0.0/dummy_data/ARC-V1-Feb2018-2/"
      "ARC-Challenge/ARC-Challenge-Test.jsonl\"\n"
      "text = \"Question: {question.stem}\\nAnswer:\"\nchoices = \"question.choices[].text\"\n"
      "gold = { field = \"answerKey\", index_in = \"question.choices[].label\" }\n");
  const TaskData foundry = load("arc_challenge", 0, 2);
  ASSERT_EQ(orig.examples.size(), 2u);  // Mercury_7175875 and Mercury_SC_409171
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(orig.examples[i].gold, foundry.examples[i].gold);
    ASSERT_EQ(orig.examples[i].requests.size(), 4u);
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_EQ(orig.examples[i].requests[c].context, foundry.examples[i].requests[c].context);
      EXPECT_EQ(orig.examples[i].requests[c].continuation,
                foundry.examples[i].requests[c].continuation);
    }
  }
}

TEST(Formats, GoldMapsAndTemplates) {
  Scratch s;
  s.file("rows.jsonl",
         "{\"p\": \"  Is it?  \", \"answer\": true, \"tag\": \"x_y_z\", \"opts\": [\"n\", \"y\"]}\n"
         "{\"p\": \"Or not?\", \"answer\": false, \"tag\": \"a\", \"opts\": [\"n\", \"y\"]}\n");
  const TaskData t = s.load(
      "summary = \"map\"\nkind = \"multiple_choice\"\nformat = \"jsonl\"\ndata = \"rows.jsonl\"\n"
      "group_by = \"tag\"\ntext = \"{{{p|strip}}} {_group|spaces} {opts[1]}\"\n"
      "choices = [\"no\", \"yes\"]\ngold = { field = \"answer\", map = { false = 0, true = 1 } "
      "}\n");
  ASSERT_EQ(t.examples.size(), 2u);
  expect_request(t.examples[0].requests[1], "{Is it?} x y z y", " yes");
  EXPECT_EQ(t.examples[0].gold, 1);
  EXPECT_EQ(t.examples[0].group, "x_y_z");
  EXPECT_EQ(t.examples[1].gold, 0);
}

TEST(Formats, TextSplits) {
  Scratch s;
  s.file("p.txt", "a\nb\n\n\nc\r\n \r\nd\n");
  const std::string head = "summary = \"ppl\"\nkind = \"perplexity\"\nformat = \"text\"\n";
  EXPECT_EQ(s.load(head + "data = \"p.txt\"\nsplit = \"paragraph\"\n").documents,
            (std::vector<std::string>{"a\nb", "c", "d"}));
  EXPECT_EQ(s.load(head + "data = \"p.txt\"\n").documents,
            std::vector<std::string>{"a\nb\n\n\nc\n \nd\n"});
  s.file("s.txt", "one\n<|sep|>\n\n<|sep|> two \n<|sep|>");
  EXPECT_EQ(
      s.load(head + "data = \"s.txt\"\nsplit = \"separator\"\nseparator = \"<|sep|>\"\n").documents,
      (std::vector<std::string>{"one", "two"}));
  s.file("w.txt", " = A = \n x \n = = Sub = = \n y \n = B = \n z \n");
  EXPECT_EQ(s.load(head + "data = \"w.txt\"\nsplit = \"wikitext\"\n").documents,
            (std::vector<std::string>{" = A = \n x \n = = Sub = = \n y ", " = B = \n z \n"}));
  EXPECT_EQ(s.load(head + "data = \"w.txt\"\nsplit = \"wikitext\"\n", 0, 1, 1).documents.size(),
            1u);
}

TEST(Formats, WikitextDetokenizer) {
  Scratch s;
  // Expected outputs from the harness's Python wikitext_detokenizer.
  const std::string head =
      "summary = \"ppl\"\nkind = \"perplexity\"\nformat = \"text\"\ndata = \"d.txt\"\n"
      "detokenize = \"wikitext\"\nsplit = \"separator\"\nseparator = \"#\"\n";
  s.file("d.txt",
         " = = Early life = = \n The 1 @,@ 000 @-@ year @.@ old players ' club ( the \" best \" "
         ") said : ' yes ' ; [ a ] { b } N x/' 3/y 30 \xc2\xb0 C . Bob 's \n#"
         " He said \" hi \n there \" . ( a ( b ) c ) [ \xc2\xa0x\xe2\x80\x89 ] Z");
  const TaskData t = s.load(head);
  ASSERT_EQ(t.documents.size(), 2u);
  // (The separator split trims each document first.)
  EXPECT_EQ(t.documents[0],
            "== Early life ==\nThe 1,000-year.old players'club (the \"best\") said:' yes'; [a] "
            "{b} 1 x/'[0-9]/y 30\xc2\xb0"
            "C. Bob's");
  EXPECT_EQ(t.documents[1], "He said \"hi\nthere\". (a ( b) c ) [x] Z");
}

// ------------------------------------------------------------ errors

const char* kGoodHead = "summary = \"x\"\nkind = \"multiple_choice\"\nformat = \"jsonl\"\n";

TEST(Errors, TaskFile) {
  EXPECT_ERROR(load("nope"), "unknown task 'nope'", "arc_easy", "wikitext2");
  Scratch s;
  s.file("rows.jsonl", numbered_rows(3));
  const std::string body =
      "data = \"rows.jsonl\"\ntext = \"{q}\"\nchoices = \"choices\"\n"
      "gold = \"gold\"\n";
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "shotz = 3\n"), "t.toml:8",
               "unknown key 'shotz'", "did you mean 'shots'");
  EXPECT_ERROR(s.load("summary = \"x\"\nkind = \"essay\"\n"), "t.toml:2", "kind", "multiple_choice",
               "'essay'");
  EXPECT_ERROR(s.load("summary = \"x\"\nkind = \"multiple_choice\"\nformat = \"jsonl\"\n"
                      "data = \"missing.jsonl\"\n"),
               "t.toml:4", "data", "no such file", "missing.jsonl");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "shots = \"five\"\n"), "t.toml:8", "shots",
               "expected an integer, got a string");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "split = \"file\"\n"), "t.toml:8",
               "'split' is not used by multiple_choice tasks");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + "data = \"rows.jsonl\"\ntext = \"{q|upper}\"\n"
                                               "choices = \"choices\"\ngold = \"gold\"\n"),
               "t.toml:5", "unknown filter 'upper'");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "metrics = [\"f1\"]\n"), "t.toml:8",
               "unknown metric 'f1'");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + "data = \"rows.jsonl\"\ntext = \"{q}\"\n"), "t.toml",
               "missing key 'choices'");
  EXPECT_ERROR(s.load("summary = \"x\"\nkind = [\n"), "t.toml:2");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + "data = \"rows*.csv\"\n"), "t.toml:4",
               "no file matches");
  // Comparability, categories, suffix replacement.
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "comparable = false\n"), "t.toml:8",
               "comparable = false needs a comparable_note");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "comparable = \"no\"\n"), "t.toml:8",
               "expected true or false");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body +
                      "group_by = \"q\"\n[categories]\n"
                      "a = [\"q0\", \"q7\"]\n"),
               "t.toml", "categories.a: no group 'q7' in the data");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "[categories]\na = [\"x\"]\nb = [\"x\"]\n"),
               "t.toml:10", "group 'x' is already in category 'a'");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "replace_suffix = { q = \",\" }\n"),
               "t.toml:8",
               "replace_suffix.q: expected a list of [\"suffix\", \"replacement\"] pairs");
  EXPECT_ERROR(s.load(std::string(kGoodHead) + body + "replace_suffix = { q = [[\"9\", \"\"]] }\n"),
               s.path("rows.jsonl") + ":1", "field 'q' ends with none of the suffixes");
  // generate_until keys.
  const std::string gen =
      "summary = \"x\"\nkind = \"generate_until\"\nformat = \"jsonl\"\n"
      "data = \"rows.jsonl\"\ntext = \"{q}\"\ntarget = \"{q}\"\n";
  EXPECT_EQ(s.load(gen).examples.size(), 3u);
  EXPECT_EQ(s.load(gen).generation.until, std::vector<std::string>{"\n\n"});
  EXPECT_ERROR(s.load(gen + "choices = \"choices\"\n"), "t.toml:7",
               "'choices' is not used by generate_until tasks");
  EXPECT_ERROR(s.load(gen + "max_gen_toks = 0\n"), "t.toml:7", "max_gen_toks", "1..100000");
  EXPECT_ERROR(s.load(gen + "do_sample = true\n"), "t.toml:7", "needs a temperature > 0");
  EXPECT_ERROR(s.load(gen + "filters = [{ function = \"vote\" }]\n"), "t.toml:7",
               "unknown function 'vote'");
  EXPECT_ERROR(s.load(gen + "filters = [{ function = \"regex\", regex_pattern = \"(\" }]\n"),
               "t.toml:7", "filters: regex_pattern: bad regular expression '('");
  EXPECT_ERROR(s.load(gen + "exact_match = { ignore_spaces = true }\n"), "t.toml:7",
               "exact_match.ignore_spaces: unknown key");
  EXPECT_ERROR(s.load(gen + "metrics = [\"pass@1\"]\n"), "t.toml:7",
               "pass@1 needs execute = \"humaneval\"");
  EXPECT_ERROR(s.load(gen + "execute = \"bash\"\n"), "t.toml:7", "expected one of none, humaneval");
}

TEST(Errors, DataRows) {
  Scratch s;
  const std::string task = std::string(kGoodHead) +
                           "data = \"rows.jsonl\"\ntext = \"{q}\"\nchoices = \"choices\"\n"
                           "gold = \"gold\"\n";
  const std::string rows = s.path("rows.jsonl");
  s.file("rows.jsonl", "{\"q\": \"a\", \"choices\": [\"x\"], \"gold\": 0}\n{\"q\": \"b\", \n");
  EXPECT_ERROR(s.load(task), rows + ":2", "malformed JSON");
  s.file("rows.jsonl", "{\"q\": \"a\", \"gold\": 0}\n");
  EXPECT_ERROR(s.load(task), rows + ":1", "missing field 'choices'");
  s.file("rows.jsonl", "\n{\"q\": \"a\", \"choices\": [\"x\", \"y\"], \"gold\": 2}\n");
  EXPECT_ERROR(s.load(task), rows + ":2", "gold 2 out of range for 2 choices");
  s.file("rows.jsonl", "{\"q\": [\"a\"], \"choices\": [\"x\", \"y\"], \"gold\": 0}\n");
  EXPECT_ERROR(s.load(task), rows + ":1", "field 'q' is a list");
  s.file("rows.jsonl", "{\"q\": \"a\", \"choices\": [\"x\", \"y\"], \"gold\": \"B\"}\n");
  EXPECT_ERROR(s.load(task), rows + ":1", "gold field 'gold'", "expected an integer");
  s.file("rows.jsonl", "[1, 2]\n");
  EXPECT_ERROR(s.load(task), rows + ":1", "expected a JSON object");

  s.file("p.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n");
  s.file("p.lst", "0\n1\n");
  EXPECT_ERROR(s.load("summary = \"x\"\nkind = \"multiple_choice\"\nformat = \"piqa\"\n"
                      "data = \"p.jsonl\"\nlabels = \"p.lst\"\ntext = \"{goal}\"\n"
                      "choices = [\"{sol1}\", \"{sol2}\"]\ngold = \"label\"\n"),
               "p.lst", "2 labels for 1 examples");
}

}  // namespace
}  // namespace strata
