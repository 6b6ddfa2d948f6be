#include "eval/evaluate.h"

#include <cmath>
#include <cstdio>

#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/timer.h"

namespace strata {
namespace {

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

int64_t count_words(const std::string& s) {
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

class Progress {
 public:
  Progress(bool on, std::string what) : on_(on), what_(std::move(what)) {}
  // Prints every 5 s on long jobs (and the final count once it has printed).
  void operator()(int64_t done, int64_t total) {
    if (!on_ || last_.seconds() < 5.0) {
      if (!(on_ && printed_ && done == total)) return;
    }
    last_.reset();
    printed_ = true;
    std::fflush(stdout);
    const double s = timer_.seconds();
    std::fprintf(stderr, "eval %s: %lld/%lld requests, %.0fs, ETA %.0fs\n", what_.c_str(),
                 (long long)done, (long long)total, s,
                 done ? s / double(done) * double(total - done) : 0.0);
  }

 private:
  bool on_, printed_ = false;
  std::string what_;
  Timer timer_, last_;
};

// Per-sample log of a multiple-choice or last-word task at one exit, in
// lm-evaluation-harness's sample fields: doc_id, doc (what strata keeps of
// the source row), target, arguments (the rendered context and continuation
// of each request), resps / filtered_resps ([loglikelihood, is_greedy] per
// request), filter, metrics, the sha256 doc/prompt/target hashes, and the
// example's metric values. One JSON object per line, written atomically.
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
    } else {
      const ChoicePick pick = pick_choice(ex, res, k);
      target = std::to_string(ex.gold);
      j["target"] = ex.gold;
      j["metrics"] = {"acc", "acc_norm"};
      j["acc"] = pick.acc == ex.gold ? 1.0 : 0.0;
      j["acc_norm"] = pick.acc_norm == ex.gold ? 1.0 : 0.0;
    }
    j["doc_hash"] = sha256_hex(doc.dump());
    j["prompt_hash"] = sha256_hex(ex.requests[0].context);
    j["target_hash"] = sha256_hex(target);
    text += j.dump() + "\n";
    k += ex.requests.size();
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

std::string samples_path(const EvalOptions& o, const std::string& task, size_t exit_index,
                         const std::vector<int>& exits) {
  std::string name = "samples_" + task;
  if (exits.size() > 1) name += "_exit" + std::to_string(exits[exit_index]);
  return o.log_samples_dir + "/" + name + ".jsonl";
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
      write_samples(samples_path(*log, task.name, e, scorer.exits()), task, results[e]);
  for (const auto& res : results) {
    TaskResult tr;
    tr.task = task.name;
    tr.n = int64_t(task.examples.size());
    tr.shots = task.shots;
    for (const LlResult& r : res) tr.truncated += r.truncated;
    size_t k = 0;
    if (task.kind == TaskKind::LastWord) {
      std::vector<double> acc, ll;
      for (size_t i = 0; i < task.examples.size(); ++i, ++k) {
        acc.push_back(res[k].greedy ? 1.0 : 0.0);
        ll.push_back(res[k].logprob);
      }
      tr.metrics.push_back(mean_metric("acc", acc));
      const Metric mll = mean_metric("ll", ll);
      const double ppl = std::exp(-mll.value);
      tr.metrics.push_back(Metric{"perplexity", ppl, mll.stderr_ >= 0 ? ppl * mll.stderr_ : -1});
    } else {
      std::vector<double> acc, acc_norm;
      std::map<std::string, std::vector<double>> group_acc, group_norm;
      for (const EvalExample& ex : task.examples) {
        const ChoicePick pick = pick_choice(ex, res, k);
        k += ex.requests.size();
        acc.push_back(pick.acc == ex.gold);
        acc_norm.push_back(pick.acc_norm == ex.gold);
        if (!ex.group.empty()) {
          group_acc[ex.group].push_back(acc.back());
          group_norm[ex.group].push_back(acc_norm.back());
        }
      }
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
      }
    }
    out.push_back(std::move(tr));
  }
  return out;
}

std::vector<PerplexityResult> rolling_docs(Scorer& scorer, const Tokenizer& tok,
                                           const std::vector<std::string>& docs, int window,
                                           int stride, const std::string& what, bool progress) {
  std::vector<PerplexityResult> out(scorer.exits().size());
  Progress prog(progress, what);
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> ids = {tok.bos_id()};
    const auto enc = tok.encode(docs[d]);
    ids.insert(ids.end(), enc.begin(), enc.end());
    const auto r = scorer.rolling(ids, window, stride);
    for (size_t e = 0; e < out.size(); ++e) {
      out[e].nll_sum += r[e].nll;
      out[e].tokens += r[e].tokens;
      out[e].words += count_words(docs[d]);
      out[e].bytes += int64_t(docs[d].size());
    }
    prog(int64_t(d + 1), int64_t(docs.size()));
  }
  return out;
}

}  // namespace

ChoicePick pick_choice(const EvalExample& ex, const std::vector<LlResult>& results, size_t first) {
  ChoicePick p;
  double top = -INFINITY, top_norm = -INFINITY;
  for (size_t c = 0; c < ex.requests.size(); ++c) {
    const double lp = results[first + c].logprob;
    // The harness divides by the length of the choice itself: the target
    // delimiter (leading whitespace of the continuation) does not count.
    const std::string& cont = ex.requests[c].continuation;
    const size_t lead = std::min(cont.size(), cont.find_first_not_of(" \n\t"));
    const double bytes = double(std::max<size_t>(1, cont.size() - lead));
    if (lp > top) top = lp, p.acc = int(c);
    if (lp / bytes > top_norm) top_norm = lp / bytes, p.acc_norm = int(c);
  }
  return p;
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
    bool rolling = false, greedy = false;
    for (const Metric& m : ms) {
      rolling = rolling || m.name == "word_perplexity";
      greedy = greedy || m.name == "perplexity";
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
    j["configs"][key] = {{"task", key},
                         {"num_fewshot", t.shots},
                         {"output_type", rolling  ? "loglikelihood_rolling"
                                         : greedy ? "loglikelihood"
                                                  : "multiple_choice"},
                         {"metric_list", list}};
    j["versions"][key] = 1.0;
    j["n-shot"][key] = t.shots;
    j["higher_is_better"][key] = hib;
  };
  for (size_t e = 0; e < results.size(); ++e)
    for (const TaskResult& t : results[e]) {
      const std::string key =
          exits.size() > 1 ? t.task + "_exit" + std::to_string(exits[e]) : t.task;
      const std::vector<Metric>& ms = t.metrics;
      if (!t.groups.empty()) {
        nlohmann::json subtasks = nlohmann::json::array();
        for (const auto& [g, gm] : t.groups) {
          const std::string sub = t.task + "_" + g;
          subtasks.push_back(sub);
          j["results"][sub] = entry(" - " + g, gm);
          describe(sub, t, gm);
        }
        j["group_subtasks"][key] = subtasks;
        j["groups"][key] = entry(key, ms);
      }
      j["results"][key] = entry(key, ms);
      describe(key, t, ms);
      j["n-samples"][key] = {
          {"original",
           config.value("limit", int64_t(0)) > 0 ? nlohmann::json() : nlohmann::json(t.n)},
          {"effective", t.n}};
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
  nlohmann::json j = {{"n", n},
                      {"shots", shots},
                      {"truncated_requests", truncated},
                      {"metrics", metric_json(metrics)}};
  if (!groups.empty()) {
    j["groups"] = nlohmann::json::object();
    for (const auto& [g, ms] : groups) j["groups"][g] = metric_json(ms);
  }
  return j;
}

std::vector<std::vector<TaskResult>> evaluate_tasks(Model<float>& model, const Tokenizer& tok,
                                                    const EvalOptions& o) {
  std::vector<std::string> names = o.tasks;
  if (names.size() == 1 && names[0] == "all") names = list_tasks(o.eval_dir);
  STRATA_CHECK(!names.empty(), "eval: no tasks given");
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
    const TaskData task = load_task(o.eval_dir, name, o.shots, o.seed, o.limit);
    if (o.write_out) write_out_first(task);
    std::vector<TaskResult> per_exit;
    if (task.kind == TaskKind::Perplexity) {
      const auto r = rolling_docs(scorer, tok, task.documents, window, stride, name, o.progress);
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
                                              bool progress) {
  return text_perplexity(model, tok, read_file(path, "perplexity"), path, window, stride,
                         batch_size, exits, progress);
}

std::vector<PerplexityResult> text_perplexity(Model<float>& model, const Tokenizer& tok,
                                              const std::string& text, const std::string& name,
                                              int window, int stride, int batch_size,
                                              const std::vector<int>& exits, bool progress) {
  Scorer scorer(model, tok, batch_size, exits);
  if (window <= 0) window = scorer.max_len() + 1;
  if (stride <= 0) stride = window - 1;
  return rolling_docs(scorer, tok, {text}, window, stride, name, progress);
}

}  // namespace strata
