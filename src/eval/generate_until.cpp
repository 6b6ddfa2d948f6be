// generate_until: generation, filters, exact_match and execution
// (generate_until.h).
#include "eval/generate_until.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/regex.h"
#include "core/text.h"
#include "eval/evaluate.h"
#include "eval/math_answer.h"
#include "eval/progress.h"
#include "eval/sandbox.h"
#include "infer/generate.h"

namespace strata {

// The harness's regex filter (Python's findall): every match of the
// pattern; the group_select-th (negative counts from the end); with one group
// that group, with several the first non-empty one (none: the fallback),
// without groups the whole match; stripped. No match: the fallback. The
// pattern is PCRE2's, which reads Python's syntax ((?i), (?s), lookbehind).
std::string regex_filter(const FilterStep& f, const std::string& text) {
  const Regex re = Regex::compile(f.pattern, "filter regex_pattern");
  const std::vector<Regex::Match> matches = re.matches(text);
  if (matches.empty()) return f.fallback;
  int64_t i = f.group_select < 0 ? int64_t(matches.size()) + f.group_select : f.group_select;
  if (i < 0 || i >= int64_t(matches.size())) return f.fallback;
  const Regex::Match& m = matches[size_t(i)];
  const auto group = [&](size_t g) {
    const auto [b, e] = m.groups[g];
    return b == Regex::npos ? std::string() : text.substr(b, e - b);
  };
  std::string picked = text.substr(m.begin, m.end - m.begin);
  if (m.groups.size() == 1) {
    picked = group(0);
  } else if (m.groups.size() > 1) {
    picked.clear();
    for (size_t g = 0; g < m.groups.size() && picked.empty(); ++g) picked = group(g);
    if (picked.empty()) return f.fallback;
  }
  return python_strip(picked);
}

std::string apply_filters(const std::vector<FilterStep>& filters, std::string text,
                          const std::string& prompt) {
  for (const FilterStep& f : filters) {
    if (f.function == "prepend_prompt") {
      text = prompt + text;
    } else if (f.function == "regex") {
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
    const Regex re = Regex::compile(r, "exact_match regexes_to_ignore");
    pred = re.replace_all(pred, "");
    ref = re.replace_all(ref, "");
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

double rouge_n(const std::string& prediction, const std::string& reference, int n) {
  auto grams = [n](const std::string& text) {
    std::vector<std::string> words;
    std::string w;
    for (char c : text + " ") {
      const char l = char(std::tolower(static_cast<unsigned char>(c)));
      if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
        w += l;
      } else if (!w.empty()) {
        words.push_back(std::move(w));
        w.clear();
      }
    }
    std::map<std::vector<std::string>, int64_t> counts;
    for (size_t i = 0; i + size_t(n) <= words.size(); ++i)
      ++counts[std::vector<std::string>(words.begin() + long(i), words.begin() + long(i) + n)];
    return counts;
  };
  const auto p = grams(prediction), r = grams(reference);
  int64_t overlap = 0, np = 0, nr = 0;
  for (const auto& [g, c] : p) {
    np += c;
    if (const auto it = r.find(g); it != r.end()) overlap += std::min(c, it->second);
  }
  for (const auto& [g, c] : r) nr += c;
  const double precision = double(overlap) / double(std::max<int64_t>(np, 1));
  const double recall = double(overlap) / double(std::max<int64_t>(nr, 1));
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

AnswerScore score_answer(const TaskData& task, const EvalExample& ex, const std::string& answer) {
  AnswerScore a;
  if (task.process_results == "hendrycks_math") {
    a.exact_match = math_answer::correct(answer, ex.target) ? 1 : 0;
    a.rouge2 = rouge_n(answer, ex.target, 2);
    return a;
  }
  for (const std::string& ref :
       ex.targets.empty() ? std::vector<std::string>{ex.target} : ex.targets) {
    a.rouge2 = std::max(a.rouge2, rouge_n(answer, ref, 2));
    if (exact_match(task.exact_match, answer, ref)) a.exact_match = 1;
  }
  return a;
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

}  // namespace

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
  go.more_eos = tok.end_of_turn_ids();
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
      if (!go.is_eos(t)) gen[size_t(i)].push_back(t);
    });
    for (size_t b = 0; b < gen.size(); ++b) out.raw[start + b] = cut_at_stops(text_of(b), g.until);
    prog(int64_t(end), int64_t(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const EvalExample& ex = task.examples[i];
    if (!task.execute.empty()) {
      // HumanEval (TOML): the prompt, the completion and the tests run as one
      // program; "program" (YAML): the filtered answer and the tests.
      const std::string answer = task.execute == "program"
                                     ? apply_filters(task.filters, out.raw[i], ex.prompt)
                                     : ex.prompt + out.raw[i];
      const std::string program = answer + "\n" + ex.target + "\n";
      const SandboxResult r = run_python_sandboxed(program, o.sandbox);
      out.filtered.push_back(answer);
      out.score.push_back(r.status == SandboxStatus::Passed ? 1.0 : 0.0);
      out.status.push_back(sandbox_status_name(r.status));
    } else {
      out.filtered.push_back(apply_filters(task.filters, out.raw[i], ex.prompt));
      if (task.process_results == "ifeval") {
        out.instructions.push_back(
            ifeval::judge(nlohmann::ordered_json::parse(ex.document), out.filtered.back()));
        out.score.push_back(out.instructions.back().all_strict() ? 1.0 : 0.0);
        continue;
      }
      const AnswerScore a = score_answer(task, ex, out.filtered.back());
      out.rouge2.push_back(a.rouge2);
      out.score.push_back(a.exact_match);
    }
  }
  return out;
}

}  // namespace strata
