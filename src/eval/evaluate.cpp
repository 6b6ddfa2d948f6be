#include "eval/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>

#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/text.h"
#include "core/timer.h"
#include "infer/generate.h"

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

// Per-sample log of a perplexity task at one exit, in the harness's fields
// for loglikelihood_rolling: the document's loglikelihood in resps, and per
// metric the (loglikelihood, weight) pair the harness aggregates (words for
// word_perplexity, bytes for byte_perplexity and bits_per_byte), plus the
// token count strata's token_perplexity uses.
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
      std::vector<double> acc, acc_norm, acc_bytes;
      std::map<std::string, std::vector<double>> group_acc, group_norm;
      for (const EvalExample& ex : task.examples) {
        const ChoicePick pick = pick_choice(ex, res, k);
        k += ex.requests.size();
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

// ------------------------------------------------------------ generate_until

// The harness's regex filter: every match of the pattern; the group_select-th
// (negative counts from the end); its first non-empty group when the pattern
// has groups, else the whole match; stripped. No match: the fallback.
std::string regex_filter(const FilterStep& f, const std::string& text) {
  const std::regex re(f.pattern);
  std::vector<std::smatch> matches;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    matches.push_back(*it);
  if (matches.empty()) return f.fallback;
  int64_t i = f.group_select < 0 ? int64_t(matches.size()) + f.group_select : f.group_select;
  if (i < 0 || i >= int64_t(matches.size())) return f.fallback;
  const std::smatch& m = matches[size_t(i)];
  std::string picked = m.str(0);
  if (m.size() > 1) {
    picked.clear();
    for (size_t g = 1; g < m.size() && picked.empty(); ++g) picked = m.str(g);
  }
  return python_strip(picked);
}

std::string apply_filters(const std::vector<FilterStep>& filters, std::string text) {
  for (const FilterStep& f : filters) {
    if (f.function == "regex") {
      text = regex_filter(f, text);
    } else if (f.function == "strip") {
      text = python_strip(text);
    } else if (f.function == "lowercase") {
      for (char& ch : text) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    }  // take_first: one response per example already
  }
  return text;
}

// The harness's exact_match: regexes removed, optionally lower-cased and
// without ASCII punctuation, then compared as they are (no stripping).
bool exact_match(const ExactMatchSpec& spec, std::string pred, std::string ref) {
  for (const std::string& r : spec.regexes_to_ignore) {
    const std::regex re(r);
    pred = std::regex_replace(pred, re, "");
    ref = std::regex_replace(ref, re, "");
  }
  auto norm = [&](std::string& s) {
    if (spec.ignore_case)
      for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (spec.ignore_punctuation)
      std::erase_if(s, [](char ch) { return std::ispunct(static_cast<unsigned char>(ch)) != 0; });
  };
  norm(pred);
  norm(ref);
  return pred == ref;
}

// The generated text up to the first stop string.
std::string cut_at_stops(std::string text, const std::vector<std::string>& until) {
  for (const std::string& u : until)
    if (const size_t at = text.find(u); at != std::string::npos) text.resize(at);
  return text;
}

namespace {

// Tokens of a request's context as the model sees them: BOS, then the text
// (or the chat pieces).
std::vector<int32_t> prompt_ids(const Tokenizer& tok, const LlRequest& r) {
  std::vector<int32_t> ids = {tok.bos_id()};
  if (r.pieces.empty()) {
    const auto enc = tok.encode(r.context);
    ids.insert(ids.end(), enc.begin(), enc.end());
    return ids;
  }
  for (const ContextPiece& p : r.pieces) {
    if (p.eos) {
      ids.push_back(tok.eos_id());
    } else {
      const auto enc = tok.encode(p.text);
      ids.insert(ids.end(), enc.begin(), enc.end());
    }
  }
  return ids;
}

struct Generated {
  std::vector<std::string> raw, filtered;
  std::vector<double> score;        // exact_match or pass@1 per example
  std::vector<std::string> status;  // HumanEval: the sandbox's verdict
  GenerationSpec spec;              // the settings used (task + overrides)
};

Generated generate_answers(Model<float>& model, const Tokenizer& tok, const TaskData& task,
                           const EvalOptions& o) {
  const size_t n = task.examples.size();
  GenerationSpec g = task.generation;
  if (o.max_gen_toks > 0) g.max_gen_toks = o.max_gen_toks;
  if (o.temperature >= 0) g.temperature = o.temperature, g.do_sample = o.temperature > 0;
  GenerateOptions go;
  go.max_new_tokens = g.max_gen_toks;
  go.sampling.temperature = g.do_sample ? g.temperature : 0.0;
  go.sampling.seed = o.seed;
  go.eos_id = tok.eos_id();
  Generated out;
  out.raw.resize(n);
  out.spec = g;
  Progress prog(o.progress, task.name);
  const int B = std::max(1, o.batch_size);
  for (size_t start = 0; start < n; start += size_t(B)) {
    const size_t end = std::min(n, start + size_t(B));
    std::vector<std::vector<int32_t>> prompts, gen(end - start);
    std::vector<int32_t> anchor;  // each prompt's last token: decoding starts after it
    for (size_t i = start; i < end; ++i) {
      prompts.push_back(prompt_ids(tok, task.examples[i].requests[0]));
      anchor.push_back(prompts.back().back());
    }
    // Stop strings end a sequence as soon as its text holds one.
    auto text_of = [&](size_t b) {
      std::vector<int32_t> ids = {anchor[b]};
      ids.insert(ids.end(), gen[b].begin(), gen[b].end());
      const std::string whole = tok.decode(ids), head = tok.decode({anchor[b]});
      return whole.starts_with(head) ? whole.substr(head.size()) : tok.decode(gen[b]);
    };
    int current = 0;
    go.stop_requested = [&] {
      const std::string t = text_of(size_t(current));
      for (const std::string& u : g.until)
        if (t.find(u) != std::string::npos) return true;
      return false;
    };
    generate_batch(model, prompts, go, [&](int i, int32_t t) {
      current = i;
      if (t != go.eos_id) gen[size_t(i)].push_back(t);
    });
    for (size_t b = 0; b < gen.size(); ++b) out.raw[start + b] = cut_at_stops(text_of(b), g.until);
    prog(int64_t(end), int64_t(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const EvalExample& ex = task.examples[i];
    if (!task.execute.empty()) {
      // HumanEval: the prompt, the completion and the tests run as one program.
      const std::string program = ex.prompt + out.raw[i] + "\n" + ex.target + "\n";
      const SandboxResult r = run_python_sandboxed(program, o.sandbox);
      out.filtered.push_back(ex.prompt + out.raw[i]);
      out.score.push_back(r.status == SandboxStatus::Passed ? 1.0 : 0.0);
      out.status.push_back(sandbox_status_name(r.status));
    } else {
      out.filtered.push_back(apply_filters(task.filters, out.raw[i]));
      out.score.push_back(exact_match(task.exact_match, out.filtered.back(), ex.target) ? 1.0
                                                                                        : 0.0);
    }
  }
  return out;
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
                        {"filter", task.filters.empty() ? "none" : "custom"},
                        {"metrics", nlohmann::json::array({metric})},
                        {metric, g.score[i]}};
    if (!g.status.empty()) j["sandbox"] = g.status[i];
    j["doc_hash"] = sha256_hex(doc.dump());
    j["prompt_hash"] = sha256_hex(ex.requests[0].context);
    j["target_hash"] = sha256_hex(ex.target);
    text += j.dump() + "\n";
  }
  write_file_atomic(path, text);
}

}  // namespace

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
      const std::string key =
          exits.size() > 1 ? t.task + "_exit" + std::to_string(exits[e]) : t.task;
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
  nlohmann::json j = {
      {"n", n},
      {"shots", shots},
      {"truncated_requests", truncated},
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

std::vector<std::vector<TaskResult>> evaluate_tasks(Model<float>& model, const Tokenizer& tok,
                                                    const EvalOptions& o) {
  // "all" expands in place to the comparable tasks; a name given twice runs once.
  std::vector<std::string> names;
  for (const std::string& t : o.tasks)
    for (const std::string& n : t == "all" ? all_tasks(o.eval_dir) : std::vector<std::string>{t})
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  STRATA_CHECK(!names.empty(), "eval: no tasks given");
  require_code_permission(o.eval_dir, names, o.allow_code_execution);  // before any work
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
    TaskData task = load_task(o.eval_dir, name, o.shots, o.seed, o.limit);
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
        write_generate_samples(samples_path(o, name, 0, scorer.exits()), task, g);
      TaskResult tr;
      tr.task = name;
      tr.n = int64_t(task.examples.size());
      tr.shots = task.shots;
      tr.metrics.push_back(mean_metric(task.execute.empty() ? "exact_match" : "pass@1", g.score));
      per_exit.push_back(tr);
    } else if (task.kind == TaskKind::Perplexity) {
      std::vector<std::vector<RollingResult>> per_doc;
      const bool log = !o.log_samples_dir.empty();
      const auto r =
          rolling_docs(scorer, tok, task.documents, task.document_words, task.document_bytes,
                       window, stride, name, o.progress, log ? &per_doc : nullptr);
      if (log)
        for (size_t e = 0; e < r.size(); ++e)
          write_rolling_samples(samples_path(o, name, e, scorer.exits()), task, per_doc, e);
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
    for (TaskResult& tr : per_exit) {
      tr.comparable = task.comparable;
      tr.not_comparable_because = task.not_comparable_because;
      tr.harness_task = task.harness_task;
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
                             bool allowed, const std::string& how) {
  if (allowed) return;
  for (const std::string& name : names)
    if (name != "all" && task_runs_code(eval_dir, name))
      fail_one_line("eval: task '", name, "' executes model-written code; ", how,
                    " to run it (in a sandbox: a subprocess without network, with time and "
                    "memory limits)");
}

}  // namespace strata
