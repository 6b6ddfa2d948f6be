// Per-sample logs (samples.h).
#include "eval/samples.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/sha256.h"
#include "eval/evaluate.h"

namespace strata {

std::string samples_path(const std::string& dir, const std::string& task, size_t exit_index,
                         const std::vector<int>& exits) {
  std::string name = "samples_" + task;
  if (exits.size() > 1) name += "_exit" + std::to_string(exits[exit_index]);
  return dir + "/" + name + ".jsonl";
}

void write_samples(const std::string& path, const TaskData& task,
                   const std::vector<LlResult>& res) {
  std::string text;
  size_t k = 0;
  for (size_t i = 0; i < task.examples.size(); ++i) {
    const EvalExample& ex = task.examples[i];
    nlohmann::json args = nlohmann::json::object(), resps = nlohmann::json::array(),
                   filtered = nlohmann::json::array();
    for (size_t c = 0; c < ex.requests.size(); ++c) {
      args["gen_args_" + std::to_string(c)] = {{"arg_0", ex.requests[c].context},
                                               {"arg_1", ex.requests[c].continuation}};
      const nlohmann::json pair = {res[k + c].logprob, res[k + c].greedy};
      resps.push_back(nlohmann::json::array({pair}));
      filtered.push_back(pair);
    }
    nlohmann::json doc = {{"source", ex.where}};
    if (!ex.group.empty()) doc["group"] = ex.group;
    nlohmann::json j = {{"doc_id", i},
                        {"doc", doc},
                        {"arguments", args},
                        {"resps", resps},
                        {"filtered_resps", filtered},
                        {"filter", "none"}};
    bool cut = false;
    for (size_t c = 0; c < ex.requests.size(); ++c) cut = cut || res[k + c].truncated;
    j["truncated"] = cut;  // a request of this example was cut to fit the context
    std::string target;
    if (task.kind == TaskKind::LastWord) {
      target = ex.requests[0].continuation;
      j["target"] = target;
      j["metrics"] = {"acc", "perplexity"};
      j["acc"] = res[k].greedy ? 1.0 : 0.0;
      j["perplexity"] = res[k].logprob;  // the harness logs the loglikelihood under this name
    } else if (task.process_results == "truthfulqa_mc2") {
      target = std::to_string(ex.gold);
      j["target"] = ex.gold;
      j["metrics"] = {"acc"};
      j["acc"] = true_mass(ex, res, k);  // the probability mass of the true answers
    } else {
      const ChoicePick pick = pick_choice(ex, res, k);
      target = std::to_string(ex.gold);
      j["target"] = ex.gold;
      j["metrics"] = {"acc", "acc_norm", "acc_bytes"};
      j["acc"] = pick.acc == ex.gold ? 1.0 : 0.0;
      j["acc_norm"] = pick.acc_norm == ex.gold ? 1.0 : 0.0;
      j["acc_bytes"] = pick.acc_bytes == ex.gold ? 1.0 : 0.0;
    }
    j["doc_hash"] = sha256_hex(doc.dump());
    j["prompt_hash"] = sha256_hex(ex.requests[0].context);
    j["target_hash"] = sha256_hex(target);
    text += j.dump() + "\n";
    k += ex.requests.size();
  }
  write_file_atomic(path, text);
}

void write_rolling_samples(const std::string& path, const TaskData& task,
                           const std::vector<std::vector<RollingResult>>& per_doc, size_t exit) {
  std::string text;
  for (size_t d = 0; d < per_doc.size(); ++d) {
    const RollingResult& r = per_doc[d][exit];
    const double ll = -r.nll;
    const nlohmann::json doc = {{"source", task.file}, {"document", d}};
    nlohmann::json j = {
        {"doc_id", d},
        {"doc", doc},
        {"target", task.documents[d]},
        {"arguments", {{"gen_args_0", {{"arg_0", task.documents[d]}}}}},
        {"resps", nlohmann::json::array({nlohmann::json::array({ll})})},
        {"filtered_resps", nlohmann::json::array({ll})},
        {"filter", "none"},
        {"metrics", {"word_perplexity", "byte_perplexity", "bits_per_byte", "token_perplexity"}},
        {"word_perplexity", {ll, task.document_words[d]}},
        {"byte_perplexity", {ll, task.document_bytes[d]}},
        {"bits_per_byte", {ll, task.document_bytes[d]}},
        {"token_perplexity", {ll, r.tokens}},
        {"doc_hash", sha256_hex(doc.dump())},
        {"prompt_hash", sha256_hex(task.documents[d])},
        {"target_hash", sha256_hex(task.documents[d])}};
    text += j.dump() + "\n";
  }
  write_file_atomic(path, text);
}

void write_generate_samples(const std::string& path, const TaskData& task, const Generated& g) {
  std::string text;
  const std::string metric = task.execute.empty() ? "exact_match" : "pass@1";
  for (size_t i = 0; i < task.examples.size(); ++i) {
    const EvalExample& ex = task.examples[i];
    nlohmann::json doc = {{"source", ex.where}};
    const GenerationSpec& gs = g.spec;
    nlohmann::json j = {{"doc_id", i},
                        {"doc", doc},
                        {"target", ex.target},
                        {"arguments",
                         {{"gen_args_0",
                           {{"arg_0", ex.requests[0].context},
                            {"arg_1",
                             {{"until", gs.until},
                              {"max_gen_toks", gs.max_gen_toks},
                              {"temperature", gs.temperature},
                              {"do_sample", gs.do_sample}}}}}}},
                        {"resps", nlohmann::json::array({nlohmann::json::array({g.raw[i]})})},
                        {"filtered_resps", nlohmann::json::array({g.filtered[i]})},
                        {"filter", task.filters.empty() ? "none" : "custom"}};
    if (!g.status.empty()) j["sandbox"] = g.status[i];
    if (g.instructions.empty()) {
      j["metrics"] = nlohmann::json::array({metric});
      j[metric] = g.score[i];
    } else {  // ifeval: the harness's four per-document fields
      const ifeval::Verdict& v = g.instructions[i];
      j["metrics"] = {"prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc",
                      "inst_level_loose_acc"};
      j["prompt_level_strict_acc"] = v.all_strict();
      j["inst_level_strict_acc"] = v.strict;
      j["prompt_level_loose_acc"] = v.all_loose();
      j["inst_level_loose_acc"] = v.loose;
    }
    j["doc_hash"] = sha256_hex(doc.dump());
    j["prompt_hash"] = sha256_hex(ex.requests[0].context);
    j["target_hash"] = sha256_hex(ex.target);
    text += j.dump() + "\n";
  }
  write_file_atomic(path, text);
}

// --write-out: the first example's requests as the model sees them.
void write_out_first(const TaskData& task) {
  std::printf("== %s (%s), %d-shot: first example", task.name.c_str(), task.description.c_str(),
              task.shots);
  if (task.kind == TaskKind::Perplexity) {
    const std::string d = task.documents.empty() ? "" : task.documents[0];
    std::printf(" (document 1 of %zu, first 400 bytes)\n%s\n", task.documents.size(),
                d.substr(0, 400).c_str());
    return;
  }
  if (task.examples.empty()) {
    std::printf(": none\n");
    return;
  }
  const EvalExample& ex = task.examples[0];
  std::printf(" (%s)\n", ex.where.c_str());
  for (size_t c = 0; c < ex.requests.size(); ++c)
    std::printf("-- request %zu%s\n[context]\n%s\n[continuation]\n%s\n", c,
                task.kind == TaskKind::MultipleChoice && int(c) == ex.gold ? " (gold)" : "",
                ex.requests[c].context.c_str(), ex.requests[c].continuation.c_str());
  std::fflush(stdout);
}

}  // namespace strata
