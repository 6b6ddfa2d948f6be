// lm-evaluation-harness task YAMLs -> TaskData (eval/harness_task.h). The
// request layout is the harness's ConfigurableTask: context = description +
// shots + doc_to_text(doc), each shot `text + target_delimiter + target` and
// followed by fewshot_delimiter; a choice's continuation is target_delimiter
// + choice.
#include "eval/harness_task.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/jinja.h"
#include "core/regex.h"
#include "core/text.h"
#include "core/yaml.h"
#include "eval/harness_internal.h"
#include "eval/ifeval.h"
#include "eval/math_answer.h"
#include "eval/task_rows.h"

namespace strata {

using namespace harness_internal;

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kFewshotStream = 0x45564653u;  // "EVFS", as TOML tasks

// A YAML with its includes merged (the including file's keys win).
json load_config(const std::string& file, int depth = 0) {
  json cfg = read_yaml_file(file);
  STRATA_CHECK(cfg.is_object(), file, ": a task file must be a YAML mapping");
  if (!cfg.contains("include")) return cfg;
  STRATA_CHECK(depth < 8, file, ": includes nest deeper than 8 files");
  STRATA_CHECK(cfg["include"].is_string(), file, ": 'include' must be a file name");
  const std::string inc =
      (fs::path(file).parent_path() / cfg["include"].get<std::string>()).string();
  STRATA_CHECK(fs::exists(inc), file, ": include '", cfg["include"].get<std::string>(),
               "': no such file ", inc);
  json merged = load_config(inc, depth + 1);
  for (auto it = cfg.begin(); it != cfg.end(); ++it)
    if (it.key() != "include") merged[it.key()] = it.value();
  return merged;
}

std::vector<std::string> names_of(const json& v) {
  std::vector<std::string> out;
  if (v.is_string()) out.push_back(v.get<std::string>());
  if (v.is_array())
    for (const json& e : v) {
      if (e.is_string())
        out.push_back(e.get<std::string>());
      else if (e.is_object() && e.contains("task") && e["task"].is_string())
        out.push_back(e["task"].get<std::string>());
    }
  return out;
}

std::string target_text(const json& target, const std::vector<std::string>& choices,
                        const std::string& where) {
  if (target.is_string()) return target.get<std::string>();
  if (target.is_array()) return target.empty() ? "" : target_text(target[0], choices, where);
  if (target.is_number_integer()) {
    const int64_t t = target.get<int64_t>();
    if (choices.empty()) return std::to_string(t);
    STRATA_CHECK(t >= 0 && size_t(t) < choices.size(), where, ": target ", t, " out of range for ",
                 choices.size(), " choices");
    return choices[size_t(t)];
  }
  return jinja::Value::from_json(target).str();
}

// strata.hendrycks_math_docs: each document gains `answer`, its solution's
// boxed answer.
std::vector<Doc> process_docs(const Spec& s, std::vector<Doc> docs) {
  if (s.process_docs != "hendrycks_math_docs") return docs;
  for (Doc& d : docs) {
    STRATA_CHECK(d.fields.contains("solution") && d.fields["solution"].is_string(), d.where,
                 ": strata.hendrycks_math_docs needs a 'solution' text");
    d.fields["answer"] = math_answer::reference(d.fields["solution"].get<std::string>(), d.where);
  }
  return docs;
}

// truthfulqa_mc2: the document's mc2_targets.labels, one per choice.
std::vector<int> mc2_labels(const Doc& d, size_t choices) {
  const json* labels = nullptr;
  if (d.fields.contains("mc2_targets") && d.fields["mc2_targets"].is_object() &&
      d.fields["mc2_targets"].contains("labels"))
    labels = &d.fields["mc2_targets"]["labels"];
  STRATA_CHECK(labels && labels->is_array(), d.where,
               ": strata.truthfulqa_mc2 needs the document's mc2_targets.labels");
  STRATA_CHECK(labels->size() == choices, d.where, ": mc2_targets.labels has ", labels->size(),
               " labels for ", choices, " choices");
  std::vector<int> out;
  for (const json& l : *labels) {
    STRATA_CHECK(l.is_number_integer(), d.where, ": mc2_targets.labels must be 0 or 1");
    out.push_back(l.get<int>());
  }
  return out;
}

}  // namespace

std::vector<std::string> HarnessTasks::expand(const std::string& name) const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::function<void(const std::string&, int)> walk = [&](const std::string& n, int depth) {
    if (depth > 16 || seen.count(n)) return;
    seen.insert(n);
    if (files.count(n)) {
      out.push_back(n);
      return;
    }
    if (const auto g = groups.find(n); g != groups.end())
      for (const std::string& m : g->second) walk(m, depth + 1);
  };
  walk(name, 0);
  return out;
}

namespace {

// Every task and group of the YAML files under `dir` into `files` and
// `groups`; a task defined twice (here or before) is an error.
void scan(const std::string& dir, std::map<std::string, std::string>& files,
          std::map<std::string, std::vector<std::string>>& groups) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), "--include-path ", dir, ": no such folder");
  std::vector<std::string> yamls;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file() && (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
      yamls.push_back(e.path().string());
  std::sort(yamls.begin(), yamls.end());
  for (const std::string& file : yamls) {
    const json cfg = load_config(file);
    const json task = cfg.value("task", json());
    if (task.is_string()) {
      const std::string name = task.get<std::string>();
      if (const auto it = files.find(name); it != files.end())
        fail(cat("task '", name, "' is defined twice: ", it->second, " and ", file));
      files[name] = file;
      for (const char* key : {"tag", "group"})
        for (const std::string& g : names_of(cfg.value(key, json()))) groups[g].push_back(name);
    } else if (cfg.contains("group") && cfg["group"].is_string() && task.is_array()) {
      auto& members = groups[cfg["group"].get<std::string>()];
      for (const std::string& m : names_of(task)) members.push_back(m);
    }
  }
}

}  // namespace

HarnessTasks index_harness_tasks(const std::vector<std::string>& dirs,
                                 const std::string& datasets_dir) {
  HarnessTasks h;
  h.dirs = dirs;
  h.datasets_dir = datasets_dir;
  for (const std::string& dir : dirs) scan(dir, h.files, h.groups);
  return h;
}

void add_shipped_tasks(HarnessTasks& h, const std::string& dir,
                       const std::function<bool(const std::string&)>& taken) {
  std::error_code ec;
  for (const std::string& d : h.dirs)
    if (fs::equivalent(d, dir, ec)) return;  // given as --include-path: already there
  std::map<std::string, std::string> files;
  std::map<std::string, std::vector<std::string>> groups;
  scan(dir, files, groups);
  h.shipped_dir = dir;
  for (const auto& [name, file] : files) {
    if (h.files.count(name) || h.groups.count(name)) continue;
    if (taken(name))
      h.shadowed[name] = file;
    else
      h.files[name] = file;
  }
  for (const auto& [group, members] : groups)
    if (!h.groups.count(group) && !h.files.count(group) && !taken(group)) h.groups[group] = members;
}

bool harness_task_runs_code(const HarnessTasks& h, const std::string& name) {
  const auto it = h.files.find(name);
  if (it == h.files.end()) return false;
  const json cfg = load_config(it->second);
  if (!cfg.contains("metric_list") || !cfg["metric_list"].is_array()) return false;
  for (const json& m : cfg["metric_list"])
    if (m.is_object() && m.value("metric", json()) == json{{"!function", "strata.pass_at_1"}})
      return true;
  return false;
}

std::string harness_data_status(const HarnessTasks& h, const std::string& name) {
  const auto it = h.files.find(name);
  if (it == h.files.end()) return "unknown task";
  try {
    const json cfg = load_config(it->second);
    const DataSource src = data_source(h, it->second, cfg, eval_split(cfg));
    for (const std::string& f : src.files)
      if (!fs::exists(f)) return "missing: " + f;
    return join(src.files, ", ");
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

std::string harness_task_table(const HarnessTasks& h) {
  std::vector<std::string> where = h.dirs;
  if (!h.shipped_dir.empty()) where.push_back(h.shipped_dir + " (shipped)");
  std::string out = cat("\nlm-evaluation-harness task YAMLs (", join(where, ", "),
                        "; hub datasets from ", h.datasets_dir, "):\n");
  size_t width = 4;
  for (const auto& [name, file] : h.files) width = std::max(width, name.size());
  for (const auto& [name, file] : h.shadowed) width = std::max(width, name.size());
  bool missing = false;
  for (const auto& [name, file] : h.files) {
    const std::string status = harness_data_status(h, name);
    const bool present = !status.starts_with("missing") && !status.starts_with("error");
    missing = missing || !present;
    out += cat("  ", name, std::string(width - name.size() + 2, ' '),
               present ? "data present  " : "no data       ", file, "\n");
    if (!present) out += cat("  ", std::string(width + 2, ' '), status, "\n");
  }
  for (const auto& [name, file] : h.shadowed)
    out += cat("  ", name, std::string(width - name.size() + 2, ' '), "(the TOML task runs; ",
               "--include-path ", h.shipped_dir, " runs ", file, ")\n");
  for (const auto& [group, members] : h.groups)
    out += cat("  group/tag ", group, ": ", join(h.expand(group), ", "), "\n");
  if (missing)
    out += cat("(no data: copy the hub dataset to ", h.datasets_dir,
               "/<dataset_path>/<dataset_name or default>/<split>.jsonl, or give --datasets-dir; "
               "docs/evaluation.md shows how)\n");
  return out;
}

TaskData load_harness_task(const HarnessTasks& h, const std::string& name, int shots, uint64_t seed,
                           int64_t limit) {
  const auto found = h.files.find(name);
  STRATA_CHECK(found != h.files.end(), "unknown task '", name, "' (not in --include-path)");
  const std::string& file = found->second;
  const json cfg = load_config(file);
  Spec s = read_spec(file, name, cfg);

  TaskData task;
  task.name = name;
  task.file = file;
  task.description = cat("lm-evaluation-harness task YAML ", file);
  task.kind = s.kind;
  task.metrics = s.metrics;
  task.harness_task = name;
  task.version = s.version;
  task.target_delimiter = s.target_delimiter;
  task.fewshot_delimiter = s.fewshot_delimiter;
  task.generation = s.generation;
  task.filters = s.filters;
  task.exact_match = s.exact_match;
  task.execute = s.execute;
  task.process_results = s.process_results;
  if (s.process_results == "ifeval") {
    task.comparable = false;
    task.not_comparable_because =
        "5 of IFEval's 25 checks are approximated (langdetect's language and NLTK's sentence "
        "and word tokenizers: " +
        join(std::vector<std::string>(std::begin(ifeval::kApproximate),
                                      std::end(ifeval::kApproximate)),
             ", ") +
        ")";
  }

  const std::string split = eval_split(cfg);
  STRATA_CHECK(!split.empty(), file, ": task '", name, "' names no test_split or validation_split");
  const std::vector<Doc> docs = process_docs(s, read_docs(h, file, cfg, split));
  STRATA_CHECK(!docs.empty(), file, ": task '", name, "': split '", split, "' has no documents");
  task.available = int64_t(docs.size());
  const size_t n = limit > 0 ? std::min(docs.size(), size_t(limit)) : docs.size();
  Render r(s);

  if (s.kind == TaskKind::Perplexity) {
    for (size_t i = 0; i < n; ++i) {
      const std::string text = target_text(r.target(docs[i]), {}, docs[i].where);
      task.document_words.push_back(python_split_count(text));
      task.document_bytes.push_back(int64_t(text.size()));
      task.documents.push_back(text);
    }
    return task;
  }

  // Few-shot examples: fewshot_config.samples, else the few-shot split (the
  // evaluation split itself without the example when they are the same).
  std::vector<Doc> pool_docs;
  const std::string pool_split = fewshot_split(cfg);
  const bool own_pool = !s.samples && (pool_split.empty() || pool_split == split);
  if (s.samples) {
    for (size_t i = 0; i < s.samples->size(); ++i)
      pool_docs.push_back({(*s.samples)[i], cat(file, ": fewshot_config.samples[", i, "]")});
  } else if (!own_pool) {
    pool_docs = process_docs(s, read_docs(h, file, cfg, pool_split));
  }
  const std::vector<Doc>& pool = own_pool ? docs : pool_docs;
  std::vector<int> candidates(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) candidates[i] = int(i);
  task.shots = shots < 0 ? s.num_fewshot : shots;
  if (task.shots > 0) {
    const int have = int(pool.size()) - (own_pool ? 1 : 0);
    STRATA_CHECK(have > 0, file, ": task '", name, "': no few-shot examples (split '",
                 own_pool ? split : pool_split, "')");
    task.shots = std::min(task.shots, have);
  }

  std::vector<std::optional<std::pair<std::string, std::string>>> solved_shots(pool.size());
  for (size_t i = 0; i < n; ++i) {
    const Doc& d = docs[i];
    EvalExample ex;
    ex.where = d.where;
    ex.description = s.description ? r.text_of(*s.description, d, "description") : "";
    std::string prefix = ex.description;
    if (task.shots > 0) {
      const PhiloxStream rng(seed, kFewshotStream, uint32_t(i));
      for (int k : task_internal::draw_shots(candidates, own_pool ? int(i) : -1, task.shots,
                                             s.first_n || s.samples, rng)) {
        auto& solved = solved_shots[size_t(k)];  // each pool document rendered once
        if (!solved) {
          const Doc& shot = pool[size_t(k)];
          const std::vector<std::string> shot_choices =
              s.has_choice ? r.choices(shot) : std::vector<std::string>{};
          const json q = r.text_value(shot);
          // Multiple inputs (an int text): the shot's text is the gold choice.
          const std::string shot_text =
              q.is_number_integer() ? target_text(q, shot_choices, shot.where) : r.text(shot);
          const json a = r.target(shot);
          solved.emplace(shot_text, q.is_number_integer() && !a.is_number_integer()
                                        ? target_text(a, {}, shot.where)
                                        : target_text(a, shot_choices, shot.where));
        }
        prefix += solved->first + s.target_delimiter + solved->second + s.fewshot_delimiter;
        ex.shots.push_back(*solved);
      }
    }
    ex.prefix_size = prefix.size();
    const json text_value = r.text_value(d);
    const json target = r.target(d);
    const std::string text =
        text_value.is_string() ? text_value.get<std::string>() : target_text(text_value, {}, "");
    if (s.kind == TaskKind::MultipleChoice) {
      ex.choices = r.choices(d);
      STRATA_CHECK(!ex.choices.empty(), d.where, ": doc_to_choice gave no choices");
      if (text_value.is_number_integer()) {
        // Multiple inputs (Winogrande): each choice ends its own context, the
        // target is the one continuation, the text gives the gold index.
        ex.gold = gold_index(text_value, ex.choices, d.where);
        const std::string cont = s.target_delimiter + target_text(target, {}, d.where);
        for (const std::string& c : ex.choices) ex.requests.push_back({prefix + c, cont});
      } else {
        ex.gold = gold_index(target, ex.choices, d.where);
        for (const std::string& c : ex.choices)
          ex.requests.push_back({prefix + text, s.target_delimiter + c});
      }
      if (s.process_results == "truthfulqa_mc2") ex.labels = mc2_labels(d, ex.choices.size());
    } else if (s.kind == TaskKind::LastWord) {
      ex.requests.push_back({prefix + text, s.target_delimiter + target_text(target, {}, d.where)});
    } else {  // generate_until
      if (s.process_results == "ifeval") {
        ifeval::validate(d.fields, d.where);
        ex.document = d.fields.dump();
      }
      ex.requests.push_back({prefix + text, ""});
      ex.prompt = text;
      const std::vector<std::string> choices =
          s.has_choice ? r.choices(d) : std::vector<std::string>{};
      ex.target = target_text(target, choices, d.where);
      if (target.is_array() && !s.has_choice)  // several accepted answers
        for (const json& t : target) ex.targets.push_back(target_text(t, {}, d.where));
    }
    task.examples.push_back(std::move(ex));
  }
  return task;
}

}  // namespace strata
