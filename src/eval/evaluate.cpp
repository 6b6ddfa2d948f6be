// Evaluation jobs (evaluate.h): tasks scored per exit, perplexity of text.
#include "eval/evaluate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/text.h"
#include "core/timer.h"
#include "eval/progress.h"
#include "eval/samples.h"

namespace strata {
namespace {

// The harness's pooled_sample_stderr: the standard error of a size-weighted
// mean of subtasks from their standard errors and sizes.
double pooled_stderr(const std::vector<double>& stderrs, const std::vector<double>& sizes) {
  double num = 0, total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    num += (sizes[i] - 1) * stderrs[i] * stderrs[i] * sizes[i];
    total += sizes[i];
  }
  const double dof = total - double(sizes.size());
  return dof > 0 ? std::sqrt(num / dof / total) : -1;
}

std::vector<TaskResult> score_choices(Scorer& scorer, const TaskData& task, bool progress,
                                      const EvalOptions* log = nullptr) {
  std::vector<LlRequest> requests;
  for (const EvalExample& ex : task.examples)
    requests.insert(requests.end(), ex.requests.begin(), ex.requests.end());
  Progress prog(progress, task.name);
  const auto results = scorer.loglikelihood(requests, [&](int64_t d, int64_t t) { prog(d, t); });
  std::vector<TaskResult> out;
  if (log && !log->log_samples_dir.empty())
    for (size_t e = 0; e < results.size(); ++e)
      write_samples(samples_path(log->log_samples_dir, task.name, e, scorer.exits()), task,
                    results[e]);
  for (const auto& res : results) {
    TaskResult tr;
    tr.task = task.name;
    tr.n = int64_t(task.examples.size());
    tr.shots = task.shots;
    for (const LlResult& r : res) tr.truncated += r.truncated && !r.long_continuation;
    tr.long_scored = log && log->score_long_continuations;
    // Whether the example's requests [k, k + count) are left out: a
    // continuation longer than the context (unless asked to score them).
    auto left_out = [&](size_t k, size_t count) {
      bool is_long = false;
      for (size_t c = 0; c < count; ++c) is_long = is_long || res[k + c].long_continuation;
      tr.long_continuations += is_long;
      if (is_long && !tr.long_scored) --tr.n;
      return is_long && !tr.long_scored;
    };
    size_t k = 0;
    if (task.kind == TaskKind::LastWord) {
      std::vector<double> acc, ll;
      for (size_t i = 0; i < task.examples.size(); ++i, ++k) {
        if (left_out(k, 1)) continue;
        acc.push_back(res[k].greedy ? 1.0 : 0.0);
        ll.push_back(res[k].logprob);
      }
      tr.metrics.push_back(mean_metric("acc", acc));
      const Metric mll = mean_metric("ll", ll);
      const double ppl = std::exp(-mll.value);
      tr.metrics.push_back(Metric{"perplexity", ppl, mll.stderr_ >= 0 ? ppl * mll.stderr_ : -1});
    } else if (task.process_results == "truthfulqa_mc2") {
      std::vector<double> mass;
      for (const EvalExample& ex : task.examples) {
        const size_t first = k;
        k += ex.requests.size();
        if (left_out(first, ex.requests.size())) continue;
        mass.push_back(true_mass(ex, res, first));
      }
      tr.metrics.push_back(mean_metric("acc", mass));
    } else {
      std::vector<double> acc, acc_norm, acc_bytes;
      std::map<std::string, std::vector<double>> group_acc, group_norm;
      for (const EvalExample& ex : task.examples) {
        const size_t first = k;
        k += ex.requests.size();
        if (left_out(first, ex.requests.size())) continue;
        const ChoicePick pick = pick_choice(ex, res, first);
        tr.ties += pick.tie;
        acc.push_back(pick.acc == ex.gold);
        acc_norm.push_back(pick.acc_norm == ex.gold);
        acc_bytes.push_back(pick.acc_bytes == ex.gold);
        if (!ex.group.empty()) {
          group_acc[ex.group].push_back(acc.back());
          group_norm[ex.group].push_back(acc_norm.back());
        }
      }
      tr.metrics.push_back(mean_metric("acc_bytes", acc_bytes));
      if (group_acc.empty()) {
        tr.metrics.push_back(mean_metric("acc", acc));
        tr.metrics.push_back(mean_metric("acc_norm", acc_norm));
      } else {
        // acc: the micro average over every question, the harness's group
        // score (its groups weight subtasks by size); acc_macro: each group
        // once, its standard error from the groups' errors.
        double macro = 0, se2 = 0;
        for (const auto& [g, xs] : group_acc) {
          const Metric m = mean_metric("acc", xs);
          tr.groups[g] = {m, mean_metric("acc_norm", group_norm[g])};
          macro += m.value;
          se2 += m.stderr_ > 0 ? m.stderr_ * m.stderr_ : 0;
        }
        const double G = double(group_acc.size());
        tr.metrics.push_back(mean_metric("acc", acc));
        tr.metrics.push_back(Metric{"acc_macro", macro / G, std::sqrt(se2) / G});
        tr.metrics.push_back(mean_metric("acc_norm", acc_norm));
        // Categories: the size-weighted mean of their groups, pooled error.
        std::map<std::string, std::vector<std::string>> members;
        for (const auto& [g, xs] : group_acc) {
          const auto c = task.categories.find(g);
          if (c != task.categories.end()) members[c->second].push_back(g);
        }
        for (const auto& [cat_name, groups] : members) {
          std::vector<double> ses, sizes;
          double sum = 0;
          for (const std::string& g : groups) {
            const Metric& m = tr.groups[g][0];
            ses.push_back(std::max(0.0, m.stderr_));
            sizes.push_back(double(group_acc[g].size()));
            sum += m.value * sizes.back();
          }
          double n_cat = 0;
          for (double x : sizes) n_cat += x;
          tr.categories[cat_name] = {Metric{"acc", sum / n_cat, pooled_stderr(ses, sizes)}};
          for (const std::string& g : groups) tr.group_category[g] = cat_name;
        }
      }
    }
    out.push_back(std::move(tr));
  }
  return out;
}

// Rolling perplexity of documents; words[d] and bytes[d] are the counts word
// and byte perplexity divide by.
std::vector<PerplexityResult> rolling_docs(
    Scorer& scorer, const Tokenizer& tok, const std::vector<std::string>& docs,
    const std::vector<int64_t>& words, const std::vector<int64_t>& bytes, int window, int stride,
    const std::string& what, bool progress,
    std::vector<std::vector<RollingResult>>* per_doc = nullptr, bool full_last = true) {
  std::vector<PerplexityResult> out(scorer.exits().size());
  Progress prog(progress, what);
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> ids = {tok.bos_id()};
    const auto enc = tok.encode(docs[d]);
    ids.insert(ids.end(), enc.begin(), enc.end());
    const auto r = scorer.rolling(ids, window, stride, full_last);
    if (per_doc) per_doc->push_back(r);
    for (size_t e = 0; e < out.size(); ++e) {
      out[e].nll_sum += r[e].nll;
      out[e].tokens += r[e].tokens;
      out[e].words += words[d];
      out[e].bytes += bytes[d];
    }
    prog(int64_t(d + 1), int64_t(docs.size()));
  }
  return out;
}

}  // namespace

std::vector<Metric> ifeval_metrics(const std::vector<ifeval::Verdict>& verdicts) {
  std::vector<Metric> out;
  for (const bool strict : {true, false}) {
    std::vector<double> prompts, instructions;
    for (const ifeval::Verdict& v : verdicts) {
      prompts.push_back(strict ? v.all_strict() : v.all_loose());
      for (bool b : strict ? v.strict : v.loose) instructions.push_back(b);
    }
    const std::string kind = strict ? "strict" : "loose";
    out.push_back(mean_metric("prompt_level_" + kind + "_acc", prompts));
    Metric inst = mean_metric("inst_level_" + kind + "_acc", instructions);
    inst.stderr_ = -1;  // the harness reports none (its examples are prompts)
    out.push_back(inst);
  }
  return out;
}

double true_mass(const EvalExample& ex, const std::vector<LlResult>& results, size_t first) {
  double top = -INFINITY;
  for (size_t c = 0; c < ex.requests.size(); ++c) top = std::max(top, results[first + c].logprob);
  double all = 0, truth = 0;
  for (size_t c = 0; c < ex.requests.size(); ++c) {
    const double p = std::exp(results[first + c].logprob - top);
    all += p;
    if (c < ex.labels.size() && ex.labels[c] == 1) truth += p;
  }
  return truth / all;
}

ChoicePick pick_choice(const EvalExample& ex, const std::vector<LlResult>& results, size_t first) {
  ChoicePick p;
  double top = -INFINITY, top_norm = -INFINITY, top_bytes = -INFINITY;
  for (size_t c = 0; c < ex.requests.size(); ++c) {
    const double lp = results[first + c].logprob;
    // The harness divides by the length of the choice itself (the target
    // delimiter does not count): characters for acc_norm, bytes for acc_bytes.
    const std::string& choice = c < ex.choices.size() ? ex.choices[c] : ex.requests[c].continuation;
    const double chars = double(std::max<int64_t>(1, utf8_length(choice)));
    const double bytes = double(std::max<size_t>(1, choice.size()));
    if (lp > top) top = lp, p.acc = int(c);
    if (lp / chars > top_norm) top_norm = lp / chars, p.acc_norm = int(c);
    if (lp / bytes > top_bytes) top_bytes = lp / bytes, p.acc_bytes = int(c);
  }
  for (size_t c = 0; c < ex.requests.size(); ++c)
    p.tie = p.tie || (int(c) != p.acc && results[first + c].logprob == top);
  return p;
}

std::vector<std::vector<TaskResult>> evaluate_tasks(Model<float>& model, const Tokenizer& tok,
                                                    const EvalOptions& o) {
  // "all" expands in place to the comparable tasks; a name given twice runs once.
  std::vector<std::string> names;
  for (const std::string& t : o.tasks)
    for (const std::string& n : t == "all" ? all_tasks(o.eval_dir)
                                : o.harness && !o.harness->expand(t).empty()
                                    ? o.harness->expand(t)
                                    : std::vector<std::string>{t})
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  STRATA_CHECK(!names.empty(), "eval: no tasks given");
  require_code_permission(o.eval_dir, names, o.allow_code_execution,  // before any work
                          "pass --allow-code-execution", o.harness.get());
  if (!o.log_samples_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.log_samples_dir, ec);
    STRATA_CHECK(!ec, "eval: cannot create the --log-samples directory '", o.log_samples_dir,
                 "': ", ec.message());
  }
  Scorer scorer(model, tok, o.batch_size, o.exits);
  const int window = o.window > 0 ? o.window : scorer.max_len() + 1;
  const int stride = o.stride > 0 ? o.stride : window - 1;
  std::vector<std::vector<TaskResult>> out(scorer.exits().size());
  for (const std::string& name : names) {
    Timer t;
    TaskData task = o.harness && o.harness->files.count(name)
                        ? load_harness_task(*o.harness, name, o.shots, o.seed, o.limit)
                        : load_task(o.eval_dir, name, o.shots, o.seed, o.limit);
    apply_chat_template(task, o.chat);
    if (o.write_out) write_out_first(task);
    std::vector<TaskResult> per_exit;
    if (task.kind == TaskKind::Generate) {
      STRATA_CHECK(
          scorer.exits().size() == 1 && scorer.exits()[0] == model.config().num_hidden_layers,
          "eval: generate_until tasks run the full model (task '", name,
          "'; --exits is for loglikelihood tasks)");
      const Generated g = generate_answers(model, tok, task, o);
      if (!o.log_samples_dir.empty())
        write_generate_samples(samples_path(o.log_samples_dir, name, 0, scorer.exits()), task, g);
      TaskResult tr;
      tr.task = name;
      tr.n = int64_t(task.examples.size());
      tr.shots = task.shots;
      if (task.process_results == "ifeval") {
        tr.metrics = ifeval_metrics(g.instructions);
      } else {
        tr.metrics.push_back(mean_metric(task.execute.empty() ? "exact_match" : "pass@1", g.score));
        if (!g.rouge2.empty()) tr.metrics.push_back(mean_metric("rouge2", g.rouge2));
      }
      per_exit.push_back(tr);
    } else if (task.kind == TaskKind::Perplexity) {
      std::vector<std::vector<RollingResult>> per_doc;
      const bool log = !o.log_samples_dir.empty();
      const auto r =
          rolling_docs(scorer, tok, task.documents, task.document_words, task.document_bytes,
                       window, stride, name, o.progress, log ? &per_doc : nullptr);
      if (log)
        for (size_t e = 0; e < r.size(); ++e)
          write_rolling_samples(samples_path(o.log_samples_dir, name, e, scorer.exits()), task,
                                per_doc, e);
      for (const PerplexityResult& p : r) {
        TaskResult tr;
        tr.task = name;
        tr.n = int64_t(task.documents.size());
        tr.metrics = {{"word_perplexity", p.word_perplexity(), -1},
                      {"byte_perplexity", p.byte_perplexity(), -1},
                      {"bits_per_byte", p.bits_per_byte(), -1},
                      {"token_perplexity", p.ppl(), -1}};
        per_exit.push_back(tr);
      }
    } else {
      per_exit = score_choices(scorer, task, o.progress, &o);
    }
    if (!task.metrics.empty())  // report what the task asks for, in its order
      for (TaskResult& tr : per_exit) {
        std::vector<Metric> kept;
        for (const std::string& want : task.metrics)
          for (const Metric& m : tr.metrics)
            if (m.name == want) kept.push_back(m);
        tr.metrics = std::move(kept);
      }
    if (per_exit[0].truncated > 0)
      log::warn("eval ", name, ": ", per_exit[0].truncated,
                " request(s) longer than the model's context (", scorer.max_len(),
                " tokens) were cut from the left; the harness does the same, but their scores "
                "saw less context (truncated_requests in the results)");
    if (per_exit[0].long_continuations > 0)
      log::warn("eval ", name, ": ", per_exit[0].long_continuations,
                " example(s) have a continuation longer than the model's context (",
                scorer.max_len(), " tokens), which lm-evaluation-harness refuses (an assertion); ",
                o.score_long_continuations
                    ? "scored on their last tokens, as --long-continuations truncate asks"
                    : "left out of the metrics (long_continuations in the results; "
                      "--long-continuations truncate scores their last tokens)");
    for (TaskResult& tr : per_exit) {
      tr.comparable = task.comparable;
      tr.not_comparable_because = task.not_comparable_because;
      tr.harness_task = task.harness_task;
      tr.available = task.available;
      tr.version = task.version;
    }
    if (!task.comparable)
      log::warn("eval ", name,
                ": not comparable with lm-evaluation-harness: ", task.not_comparable_because);
    for (size_t e = 0; e < per_exit.size(); ++e) out[e].push_back(per_exit[e]);
    if (o.progress)
      log::info("eval ", name, ": ", per_exit.back().n, " examples, ", task.shots, "-shot, ",
                static_cast<long>(t.seconds() + 0.5), " s");
  }
  return out;
}

std::vector<PerplexityResult> file_perplexity(Model<float>& model, const Tokenizer& tok,
                                              const std::string& path, int window, int stride,
                                              int batch_size, const std::vector<int>& exits,
                                              bool progress, bool full_last) {
  const std::string text = read_file(path, "perplexity");
  require_text(text, path);  // perplexity of something that is not text means nothing
  return text_perplexity(model, tok, text, path, window, stride, batch_size, exits, progress,
                         full_last);
}

std::vector<PerplexityResult> text_perplexity(Model<float>& model, const Tokenizer& tok,
                                              const std::string& text, const std::string& name,
                                              int window, int stride, int batch_size,
                                              const std::vector<int>& exits, bool progress,
                                              bool full_last) {
  if (python_strip(text).empty())
    fail_one_line(name, ": nothing to score (the text is empty or only whitespace)");
  Scorer scorer(model, tok, batch_size, exits);
  if (window <= 0) window = scorer.max_len() + 1;
  if (stride <= 0) stride = window - 1;
  return rolling_docs(scorer, tok, {text}, {python_split_count(text)}, {int64_t(text.size())},
                      window, stride, name, progress, nullptr, full_last);
}

void require_code_permission(const std::string& eval_dir, const std::vector<std::string>& names,
                             bool allowed, const std::string& how, const HarnessTasks* harness) {
  if (allowed) return;
  for (const std::string& name : names)
    if (name != "all" &&
        (harness && harness->files.count(name) ? harness_task_runs_code(*harness, name)
                                               : task_runs_code(eval_dir, name)))
      fail_one_line("eval: task '", name, "' executes model-written code; ", how,
                    " to run it (in a sandbox: a subprocess without network, with time and "
                    "memory limits)");
}

}  // namespace strata
