// `strata eval` as a library call (eval_job.h): the job, its tables, its JSON.
#include "eval/eval_job.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "core/text.h"
#include "core/timer.h"

namespace strata {
namespace {

std::string fmt(double v) { return strprintf(std::fabs(v) >= 1000 ? "%.1f" : "%.4f", v); }

std::string stderr_text(const Metric& m) { return m.stderr_ >= 0 ? "±" + fmt(m.stderr_) : ""; }

// The first two columns' widths: every task (and, with categories, every
// " - category" label) and every metric name fits.
std::pair<int, int> name_widths(const std::vector<TaskResult>& results, bool categories) {
  int w = 16, mw = 18;
  for (const TaskResult& t : results) {
    w = std::max(w, int(t.task.size()));
    if (categories)
      for (const auto& [c, ms] : t.categories) w = std::max(w, int(c.size()) + 3);
    for (const Metric& m : t.metrics) mw = std::max(mw, int(m.name.size()));
  }
  return {w, mw};
}

std::string one_exit_table(const std::vector<TaskResult>& results) {
  const auto [w, mw] = name_widths(results, true);
  std::string out = strprintf("%-*s %-*s %10s %10s %7s %6s\n", w, "task", mw, "metric", "value",
                              "stderr", "n", "shots");
  for (const TaskResult& t : results) {
    bool first = true;
    for (const Metric& m : t.metrics) {
      out += strprintf("%-*s %-*s %10s %10s", w, first ? t.task.c_str() : "", mw, m.name.c_str(),
                       fmt(m.value).c_str(), stderr_text(m).c_str());
      if (first)
        out += strprintf(" %7lld %6d%s", (long long)t.n, t.shots, t.comparable ? "" : "  *");
      out += "\n";
      first = false;
    }
    for (const auto& [c, ms] : t.categories)
      for (const Metric& m : ms)
        out += strprintf("%-*s %-*s %10s %10s\n", w, (" - " + c).c_str(), mw, m.name.c_str(),
                         fmt(m.value).c_str(), stderr_text(m).c_str());
  }
  for (const TaskResult& t : results)
    if (!t.comparable)
      out += strprintf("* %s: not comparable with lm-evaluation-harness: %s\n", t.task.c_str(),
                       t.not_comparable_because.c_str());
  return out;
}

std::string perplexity_table(const std::vector<PerplexityResult>& r,
                             const std::vector<int>& exits) {
  std::string out = strprintf("%-8s %10s %10s %10s %12s %12s\n", "exit", "ppl", "nll", "tokens",
                              "word_ppl", "bits/byte");
  for (size_t e = 0; e < exits.size(); ++e)
    out += strprintf("%-8d %10.4f %10.6f %10lld %12.4f %12.4f\n", exits[e], r[e].ppl(),
                     r[e].mean_nll(), (long long)r[e].tokens, r[e].word_perplexity(),
                     r[e].bits_per_byte());
  return out;
}

// The per-exit results as JSON {"<exit>": ...}.
template <typename R, typename ToJson>
nlohmann::json per_exit(const std::vector<R>& results, const std::vector<int>& exits,
                        ToJson to_json) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t e = 0; e < exits.size(); ++e) j[std::to_string(exits[e])] = to_json(results[e]);
  return j;
}

nlohmann::json tasks_json(const std::vector<TaskResult>& rs) {
  nlohmann::json j = nlohmann::json::object();
  for (const TaskResult& t : rs) j[t.task] = t.to_json();
  return j;
}

void run_perplexity(Model<float>& model, const Tokenizer& tok, const EvalJob& job,
                    EvalJobResult& out) {
  const EvalOptions& o = job.tasks;
  const auto r = file_perplexity(model, tok, job.perplexity_file, o.window, o.stride, o.batch_size,
                                 o.exits, o.progress, job.full_last_window);
  out.table = perplexity_table(r, o.exits);
  out.json["perplexity_file"] = job.perplexity_file;
  out.json.update(r.back().to_json());
  if (o.exits.size() > 1)
    out.json["per_exit"] =
        per_exit(r, o.exits, [](const PerplexityResult& p) { return p.to_json(); });
}

void run_tasks(Model<float>& model, const Tokenizer& tok, const EvalJob& job, EvalJobResult& out) {
  const EvalOptions& o = job.tasks;
  const auto results = evaluate_tasks(model, tok, o);
  out.table = results_table(results, o.exits);
  out.json["seed"] = o.seed;
  out.json["shots"] = o.shots >= 0 ? nlohmann::json(o.shots) : nlohmann::json();
  out.json["limit"] = o.limit;
  out.json["results"] = tasks_json(results.back());
  if (o.exits.size() > 1) out.json["per_exit"] = per_exit(results, o.exits, tasks_json);
  if (job.output_format == "lm-eval") {
    const nlohmann::json config = {
        {"model", "strata"},
        {"model_args", cat("checkpoint=", job.checkpoint, ",plan=", job.plan)},
        {"batch_size", o.batch_size},
        {"limit", o.limit},
        {"seed", o.seed},
        {"exit_layers", o.exits},
        {"strata_version", STRATA_VERSION}};
    out.json = lm_eval_results(results, o.exits, config);
  }
}

}  // namespace

EvalJobResult run_eval_job(Model<float>& model, const Tokenizer& tok, const EvalJob& job) {
  EvalJobResult out;
  out.json = {{"checkpoint", job.checkpoint},
              {"step", job.step},
              {"plan", job.plan},
              {"num_layers", model.config().num_hidden_layers},
              {"exit_layers", job.tasks.exits},
              {"batch_size", job.tasks.batch_size}};
  Timer timer;
  if (job.perplexity)
    run_perplexity(model, tok, job, out);
  else
    run_tasks(model, tok, job, out);
  if (job.output_format == "strata")
    out.json["seconds"] = timer.seconds();
  else
    out.json["config"]["seconds"] = timer.seconds();
  return out;
}

std::vector<int> all_exits(const LayerPlan& plan) {
  std::vector<int> exits;
  for (int e = 1; e <= plan.num_layers(); ++e)
    if (plan.unit_boundary(e)) exits.push_back(e);
  return exits;
}

std::string results_table(const std::vector<std::vector<TaskResult>>& results,
                          const std::vector<int>& exits) {
  if (exits.size() == 1) return one_exit_table(results[0]);
  const auto [w, mw] = name_widths(results[0], false);
  std::string out = strprintf("%-*s %-*s", w, "task", mw, "metric");
  for (int e : exits) out += strprintf(" %9s", ("exit " + std::to_string(e)).c_str());
  out += "\n";
  for (size_t t = 0; t < results[0].size(); ++t)
    for (size_t k = 0; k < results[0][t].metrics.size(); ++k) {
      out += strprintf("%-*s %-*s", w, k == 0 ? results[0][t].task.c_str() : "", mw,
                       results[0][t].metrics[k].name.c_str());
      for (size_t e = 0; e < exits.size(); ++e)
        out += strprintf(" %9s", fmt(results[e][t].metrics[k].value).c_str());
      out += "\n";
    }
  return out;
}

std::string task_table(const std::string& eval_dir) {
  struct Row {
    std::string name, kind, metrics, summary;
    int64_t n;
    int shots;
    std::string comparable;
  };
  std::vector<Row> rows;
  size_t width = 7;
  for (const std::string& name : list_tasks(eval_dir)) {
    const TaskData t = load_task(eval_dir, name, -1, 1234, 0);
    Row r{name,
          "",
          "",
          t.description,
          0,
          t.shots,
          !t.comparable            ? "no"
          : t.harness_task.empty() ? "-"
                                   : "yes"};
    for (const std::string& m : t.metrics) r.metrics += (r.metrics.empty() ? "" : ", ") + m;
    std::set<std::string> groups;
    for (const EvalExample& ex : t.examples)
      if (!ex.group.empty()) groups.insert(ex.group);
    if (!groups.empty()) r.summary += cat(" (", groups.size(), " groups)");
    std::set<std::string> categories;
    for (const auto& [g, c] : t.categories) categories.insert(c);
    if (!categories.empty())
      r.summary += cat(" (categories: ", join({categories.begin(), categories.end()}, ", "), ")");
    if (!t.comparable) r.summary += " [not comparable: " + t.not_comparable_because + "]";
    if (!t.execute.empty()) r.summary += " [runs code: --allow-code-execution]";
    r.kind = t.kind == TaskKind::MultipleChoice ? "multiple_choice"
             : t.kind == TaskKind::LastWord     ? "last_word"
             : t.kind == TaskKind::Generate     ? "generate_until"
                                                : "perplexity";
    r.n = t.kind == TaskKind::Perplexity ? int64_t(t.documents.size()) : int64_t(t.examples.size());
    width = std::max(width, r.metrics.size());
    rows.push_back(std::move(r));
  }
  const int w = int(width);
  std::string out = strprintf("%-14s %-16s %8s %6s  %-*s  %-10s  %s\n", "task", "kind", "n",
                              "shots", w, "metrics", "comparable", "summary");
  for (const Row& r : rows)
    out += strprintf("%-14s %-16s %8lld %6d  %-*s  %-10s  %s\n", r.name.c_str(), r.kind.c_str(),
                     (long long)r.n, r.shots, w, r.metrics.c_str(), r.comparable.c_str(),
                     r.summary.c_str());
  return out +
         "comparable: yes = lm-evaluation-harness's task of the same name (see "
         "eval/README.md), no = cannot match it (left out of `all`), - = no counterpart\n";
}

}  // namespace strata
