// Metrics, results and their JSON layouts (results.h).
#include "eval/results.h"

#include <cmath>

namespace strata {

// Mean and its standard error (sample standard deviation / sqrt(n)), as the
// harness reports them.
Metric mean_metric(const std::string& name, const std::vector<double>& xs) {
  Metric m{name, 0, -1};
  const double n = double(xs.size());
  if (xs.empty()) return m;
  for (double x : xs) m.value += x;
  m.value /= n;
  if (xs.size() > 1) {
    double var = 0;
    for (double x : xs) var += (x - m.value) * (x - m.value);
    m.stderr_ = std::sqrt(var / (n - 1) / n);
  }
  return m;
}

nlohmann::json lm_eval_results(const std::vector<std::vector<TaskResult>>& results,
                               const std::vector<int>& exits, const nlohmann::json& config) {
  nlohmann::json j = {{"results", nlohmann::json::object()},
                      {"groups", nlohmann::json::object()},
                      {"group_subtasks", nlohmann::json::object()},
                      {"configs", nlohmann::json::object()},
                      {"versions", nlohmann::json::object()},
                      {"n-shot", nlohmann::json::object()},
                      {"higher_is_better", nlohmann::json::object()},
                      {"n-samples", nlohmann::json::object()},
                      {"config", config}};
  auto lower_is_better = [](const std::string& m) {
    return m.find("perplexity") != std::string::npos || m == "bits_per_byte";
  };
  auto entry = [&](const std::string& alias, const std::vector<Metric>& ms) {
    nlohmann::json e = {{"alias", alias}};
    for (const Metric& m : ms) {
      e[m.name + ",none"] = m.value;
      e[m.name + "_stderr,none"] =
          m.stderr_ >= 0 ? nlohmann::json(m.stderr_) : nlohmann::json("N/A");
    }
    return e;
  };
  auto describe = [&](const std::string& key, const TaskResult& t, const std::vector<Metric>& ms) {
    bool rolling = false, greedy = false, generate = false;
    for (const Metric& m : ms) {
      rolling = rolling || m.name == "word_perplexity";
      greedy = greedy || m.name == "perplexity";
      generate = generate || m.name == "exact_match" || m.name == "pass@1";
    }
    nlohmann::json list = nlohmann::json::array(), hib = nlohmann::json::object();
    for (const Metric& m : ms) {
      list.push_back({{"metric", m.name},
                      {"aggregation", m.name == "bits_per_byte" ? "bits_per_byte"
                                      : rolling                 ? "weighted_perplexity"
                                      : m.name == "perplexity"  ? "perplexity"
                                                                : "mean"},
                      {"higher_is_better", !lower_is_better(m.name)}});
      hib[m.name] = !lower_is_better(m.name);
    }
    nlohmann::json meta = {{"version", double(t.version)}, {"comparable", t.comparable}};
    if (!t.comparable) meta["not_comparable_because"] = t.not_comparable_because;
    if (!t.harness_task.empty()) meta["harness_task"] = t.harness_task;
    j["configs"][key] = {{"task", key},
                         {"num_fewshot", t.shots},
                         {"output_type", rolling    ? "loglikelihood_rolling"
                                         : greedy   ? "loglikelihood"
                                         : generate ? "generate_until"
                                                    : "multiple_choice"},
                         {"metric_list", list},
                         {"metadata", meta}};
    j["versions"][key] = double(t.version);
    j["n-shot"][key] = t.shots;
    j["higher_is_better"][key] = hib;
  };
  for (size_t e = 0; e < results.size(); ++e)
    for (const TaskResult& t : results[e]) {
      // Keyed by the harness's task name where the task has one.
      const std::string name = t.harness_task.empty() ? t.task : t.harness_task;
      const std::string key = exits.size() > 1 ? name + "_exit" + std::to_string(exits[e]) : name;
      const std::vector<Metric>& ms = t.metrics;
      if (!t.groups.empty()) {
        // The task is a group of its groups (MMLU's subjects); with
        // categories, of the categories (mmlu_stem, ...), each a group of
        // its subjects, as the harness nests them.
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [c, cm] : t.categories) {
          const std::string sub = key + "_" + c;
          top.push_back(sub);
          j["results"][sub] = entry(" - " + c, cm);
          j["groups"][sub] = entry(" - " + c, cm);
          j["group_subtasks"][sub] = nlohmann::json::array();
          describe(sub, t, cm);
        }
        for (const auto& [g, gm] : t.groups) {
          const std::string sub = key + "_" + g;
          std::string parent = key;
          const auto cat_it = t.group_category.find(g);
          if (cat_it != t.group_category.end()) parent = key + "_" + cat_it->second;
          j["results"][sub] = entry(parent == key ? " - " + g : "  - " + g, gm);
          describe(sub, t, gm);
          if (parent == key)
            top.push_back(sub);
          else
            j["group_subtasks"][parent].push_back(sub);
        }
        j["group_subtasks"][key] = top;
        j["groups"][key] = entry(key, ms);
      }
      j["results"][key] = entry(key, ms);
      describe(key, t, ms);
      j["n-samples"][key] = {{"original", t.available > 0 ? t.available : t.n}, {"effective", t.n}};
    }
  return j;
}

double PerplexityResult::mean_nll() const { return tokens ? nll_sum / double(tokens) : 0; }
double PerplexityResult::ppl() const { return std::exp(mean_nll()); }
double PerplexityResult::word_perplexity() const {
  return words ? std::exp(nll_sum / double(words)) : 0;
}
double PerplexityResult::byte_perplexity() const {
  return bytes ? std::exp(nll_sum / double(bytes)) : 0;
}
double PerplexityResult::bits_per_byte() const {
  return bytes ? nll_sum / double(bytes) / std::log(2.0) : 0;
}
nlohmann::json PerplexityResult::to_json() const {
  return {{"ppl", ppl()},
          {"nll", mean_nll()},
          {"nll_sum", nll_sum},
          {"tokens", tokens},
          {"words", words},
          {"bytes", bytes},
          {"word_perplexity", word_perplexity()},
          {"byte_perplexity", byte_perplexity()},
          {"bits_per_byte", bits_per_byte()}};
}

nlohmann::json TaskResult::to_json() const {
  auto metric_json = [](const std::vector<Metric>& ms) {
    nlohmann::json j = nlohmann::json::object();
    for (const Metric& m : ms)
      j[m.name] = {{"value", m.value},
                   {"stderr", m.stderr_ >= 0 ? nlohmann::json(m.stderr_) : nlohmann::json()}};
    return j;
  };
  nlohmann::json j = {
      {"n", n},
      {"shots", shots},
      {"truncated_requests", truncated},
      {"long_continuations", long_continuations},
      {"long_continuations_scored", long_scored},
      {"exact_ties", ties},
      {"version", version},
      {"harness_task", harness_task.empty() ? nlohmann::json() : nlohmann::json(harness_task)},
      {"comparable", comparable},
      {"metrics", metric_json(metrics)}};
  if (!comparable) j["not_comparable_because"] = not_comparable_because;
  if (!groups.empty()) {
    j["groups"] = nlohmann::json::object();
    for (const auto& [g, ms] : groups) j["groups"][g] = metric_json(ms);
  }
  if (!categories.empty()) {
    j["categories"] = nlohmann::json::object();
    for (const auto& [c, ms] : categories) j["categories"][c] = metric_json(ms);
  }
  return j;
}

}  // namespace strata
