// The harness task loader's settings, data and rendering
// (eval/harness_internal.h).
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/regex.h"
#include "core/text.h"
#include "eval/harness_internal.h"
#include "eval/task_formats.h"

namespace strata::harness_internal {

const char* const kBuiltins[6] = {"strata.truthfulqa_mc2",    "strata.pass_at_1",
                                  "strata.humaneval_program", "strata.hendrycks_math_docs",
                                  "strata.hendrycks_math",    "strata.ifeval"};

namespace {

namespace fs = std::filesystem;

std::string function_of(const json& v) {
  return v.is_object() && v.contains("!function") ? v["!function"].get<std::string>() : "";
}

// The built-in `!function strata.<name>` expected for `key`, or a one-line
// refusal naming the task and the function.
void check_builtin(const Spec& s, const std::string& key, const std::string& fn,
                   const std::string& want) {
  if (!want.empty() && fn == "strata." + want) return;
  if (fn.starts_with("strata."))
    fail(cat(s.file, ": task '", s.name, "': ", key, ": !function ", fn,
             " is not a strata built-in here (strata has ",
             join(std::vector<std::string>(std::begin(kBuiltins), std::end(kBuiltins)), ", "),
             ")"));
  fail(cat(s.file, ": task '", s.name, "': ", key, " is a Python function (!function ", fn,
           "), which strata cannot run; write it as a Jinja template or a column name, or use a "
           "strata built-in (docs/evaluation.md)"));
}

// Python callables cannot run here: one line naming the task and function.
void refuse_functions(const Spec& s, const json& cfg) {
  for (const char* key : {"doc_to_text", "doc_to_target", "doc_to_choice", "description",
                          "doc_to_image", "doc_to_audio"}) {
    if (!cfg.contains(key)) continue;
    const std::string fn = function_of(cfg[key]);
    if (!fn.empty()) check_builtin(s, key, fn, "");
  }
}

std::string str_of(const json& cfg, const char* key, const std::string& dflt,
                   const std::string& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return dflt;
  STRATA_CHECK(cfg[key].is_string(), file, ": '", key, "' must be a string");
  return cfg[key].get<std::string>();
}

int int_of(const json& cfg, const char* key, int dflt, const std::string& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return dflt;
  STRATA_CHECK(cfg[key].is_number_integer(), file, ": '", key, "' must be an integer");
  return cfg[key].get<int>();
}

void read_generation(const json& cfg, Spec& s) {
  s.generation = GenerationSpec{};
  if (!cfg.contains("generation_kwargs") || cfg["generation_kwargs"].is_null()) {
    s.generation.until = {s.fewshot_delimiter};  // the harness's default
    return;
  }
  const json& g = cfg["generation_kwargs"];
  STRATA_CHECK(g.is_object(), s.file, ": 'generation_kwargs' must be a mapping");
  s.generation.until.clear();
  if (g.contains("until")) {
    const json& u = g["until"];
    if (u.is_string())
      s.generation.until.push_back(u.get<std::string>());
    else if (u.is_array())
      for (const json& e : u) {
        STRATA_CHECK(e.is_string(), s.file, ": generation_kwargs.until must hold strings");
        s.generation.until.push_back(e.get<std::string>());
      }
  }
  if (g.contains("max_gen_toks")) s.generation.max_gen_toks = g["max_gen_toks"].get<int>();
  if (g.contains("temperature")) s.generation.temperature = g["temperature"].get<double>();
  if (g.contains("do_sample")) s.generation.do_sample = g["do_sample"].get<bool>();
}

void read_filters(const json& cfg, Spec& s) {
  if (!cfg.contains("filter_list")) return;
  const json& fl = cfg["filter_list"];
  STRATA_CHECK(fl.is_array() && !fl.empty(), s.file, ": 'filter_list' must be a list");
  if (fl.size() > 1)
    log::warn("eval ", s.name, ": ", s.file, " has ", fl.size(),
              " filter pipelines; strata scores the first ('",
              fl[0].value("name", std::string("?")), "')");
  const json& steps = fl[0].value("filter", json::array());
  for (const json& st : steps) {
    FilterStep f;
    f.function = st.value("function", std::string());
    if (f.function == "custom") {
      check_builtin(s, "filter custom", function_of(st.value("filter_fn", json())),
                    "humaneval_program");
      f.function = "prepend_prompt";
    } else if (f.function == "regex") {
      f.pattern = st.value("regex_pattern", std::string(R"(#### (\-?[0-9\.\,]+))"));
      f.group_select = st.value("group_select", 0);
      f.fallback = st.value("fallback", std::string("[invalid]"));
      Regex::compile(f.pattern, cat(s.file, ": filter_list regex_pattern"));
    } else if (f.function == "remove_whitespace") {
      f.function = "strip";  // the harness's WhitespaceFilter: str.strip()
    } else if (f.function != "take_first" && f.function != "lowercase") {
      fail(cat(s.file, ": task '", s.name, "': filter '", f.function,
               "' is not supported (regex, take_first, lowercase, remove_whitespace)"));
    }
    s.filters.push_back(std::move(f));
  }
}

void read_metrics(const json& cfg, Spec& s) {
  static const std::map<TaskKind, std::vector<std::string>> known = {
      {TaskKind::MultipleChoice, {"acc", "acc_norm", "acc_bytes"}},
      {TaskKind::LastWord, {"perplexity", "acc"}},
      {TaskKind::Perplexity, {"word_perplexity", "byte_perplexity", "bits_per_byte"}},
      {TaskKind::Generate, {"exact_match", "rouge2"}}};
  const std::vector<std::string>& ok = known.at(s.kind);
  if (!cfg.contains("metric_list")) {
    s.metrics = s.kind == TaskKind::MultipleChoice ? std::vector<std::string>{"acc", "acc_norm"}
                : s.kind == TaskKind::Generate     ? std::vector<std::string>{"exact_match"}
                                                   : ok;
    return;
  }
  for (const json& m : cfg["metric_list"]) {
    STRATA_CHECK(m.is_object() && m.contains("metric"), s.file,
                 ": metric_list entries must be {metric: ...}");
    const std::string fn = function_of(m["metric"]);
    if (!fn.empty()) {
      check_builtin(s, "metric", fn, "pass_at_1");
      STRATA_CHECK(s.kind == TaskKind::Generate, s.file, ": task '", s.name,
                   "': strata.pass_at_1 needs output_type generate_until");
      s.metrics.push_back("pass@1");
      s.execute = "program";
      continue;
    }
    const std::string name = m["metric"].get<std::string>();
    if (!s.process_results.empty()) {  // the built-in reports its metrics itself
      const std::vector<std::string> own =
          s.process_results == "ifeval"
              ? std::vector<std::string>{"prompt_level_strict_acc", "inst_level_strict_acc",
                                         "prompt_level_loose_acc", "inst_level_loose_acc"}
          : s.kind == TaskKind::Generate ? std::vector<std::string>{"exact_match"}
                                         : std::vector<std::string>{"acc"};
      STRATA_CHECK(std::find(own.begin(), own.end(), name) != own.end(), s.file, ": task '", s.name,
                   "': strata.", s.process_results, " reports ", join(own, ", "), ", not '", name,
                   "'");
      s.metrics.push_back(name);
      continue;
    }
    STRATA_CHECK(std::find(ok.begin(), ok.end(), name) != ok.end(), s.file, ": task '", s.name,
                 "': metric '", name, "' is not supported for this output_type (", join(ok, ", "),
                 ")");
    s.metrics.push_back(name);
    if (name != "exact_match") continue;
    s.exact_match.ignore_case = m.value("ignore_case", false);
    s.exact_match.ignore_punctuation = m.value("ignore_punctuation", false);
    if (m.contains("regexes_to_ignore"))
      for (const json& r : m["regexes_to_ignore"]) s.exact_match.regexes_to_ignore.push_back(r);
  }
}

// dataset_kwargs' CSV reader options (pandas.read_csv's): delimiter or
// sep (one character), quoting 3 (QUOTE_NONE).
void csv_options(const std::string& file, const json& kwargs, DataSource& src) {
  if (!kwargs.is_object()) return;
  for (const char* key : {"delimiter", "sep"})
    if (kwargs.contains(key)) {
      const json& d = kwargs[key];
      STRATA_CHECK(d.is_string() && d.get<std::string>().size() == 1, file, ": dataset_kwargs.",
                   key, " must be one character");
      src.delimiter = d.get<std::string>()[0];
    }
  if (kwargs.contains("quoting")) {
    const json& q = kwargs["quoting"];
    STRATA_CHECK(q.is_number_integer() && (q.get<int>() == 0 || q.get<int>() == 3), file,
                 ": dataset_kwargs.quoting must be 0 (QUOTE_MINIMAL) or 3 (QUOTE_NONE)");
    src.quoting = q.get<int>() != 3;
  }
}

// A data_files path: as given (the working directory), else beside the YAML.
std::string locate(const std::string& path, const std::string& yaml) {
  std::error_code ec;
  if (fs::path(path).is_absolute() || fs::exists(path, ec)) return path;
  const std::string beside = (fs::path(yaml).parent_path() / path).string();
  return fs::exists(beside, ec) ? beside : path;
}

std::string format_of(const std::string& file) {
  const std::string ext = fs::path(file).extension().string();
  if (ext == ".csv" || ext == ".tsv") return "csv";
  if (ext == ".txt") return "text";
  return "json";
}

// CSV columns whose every value is an integer become integers (as the
// datasets library's CSV reader types them).
void type_csv_columns(std::vector<Doc>& docs) {
  if (docs.empty()) return;
  static const Regex integer = Regex::compile(R"(^-?[0-9]+$)", "csv");
  for (auto it = docs[0].fields.begin(); it != docs[0].fields.end(); ++it) {
    const std::string col = it.key();
    Regex::Match m;
    const bool all_ints = std::all_of(docs.begin(), docs.end(), [&](const Doc& d) {
      const json& v = d.fields[col];
      return v.is_string() && integer.search(v.get<std::string>(), 0, &m);
    });
    if (all_ints)
      for (Doc& d : docs)
        d.fields[col] = std::strtoll(d.fields[col].get<std::string>().c_str(), nullptr, 10);
  }
}

}  // namespace

Spec read_spec(const std::string& file, const std::string& name, const json& cfg) {
  Spec s;
  s.file = file;
  s.name = name;
  refuse_functions(s, cfg);
  const std::string type = str_of(cfg, "output_type", "generate_until", file);
  if (type == "multiple_choice")
    s.kind = TaskKind::MultipleChoice;
  else if (type == "loglikelihood")
    s.kind = TaskKind::LastWord;
  else if (type == "loglikelihood_rolling")
    s.kind = TaskKind::Perplexity;
  else if (type == "generate_until")
    s.kind = TaskKind::Generate;
  else
    fail(cat(file, ": task '", name, "': output_type '", type,
             "' (multiple_choice, loglikelihood, loglikelihood_rolling or generate_until)"));
  for (auto [key, slot] : {std::pair{"doc_to_text", &s.doc_to_text},
                           {"doc_to_target", &s.doc_to_target},
                           {"doc_to_choice", &s.doc_to_choice},
                           {"description", &s.description}})
    if (cfg.contains(key) && !cfg[key].is_null()) *slot = cfg[key];
  s.has_choice = s.doc_to_choice.has_value();
  if (cfg.contains("process_results") && !cfg["process_results"].is_null()) {
    const std::string fn = function_of(cfg["process_results"]);
    const bool generate = fn == "strata.hendrycks_math" || fn == "strata.ifeval";
    check_builtin(s, "process_results", fn, generate ? fn.substr(7) : "truthfulqa_mc2");
    const TaskKind need = generate ? TaskKind::Generate : TaskKind::MultipleChoice;
    STRATA_CHECK(s.kind == need, file, ": task '", name, "': ", fn, " needs output_type ",
                 generate ? "generate_until" : "multiple_choice");
    s.process_results = fn.substr(7);
  }
  if (cfg.contains("process_docs") && !cfg["process_docs"].is_null()) {
    check_builtin(s, "process_docs", function_of(cfg["process_docs"]), "hendrycks_math_docs");
    s.process_docs = "hendrycks_math_docs";
  }
  STRATA_CHECK(s.kind != TaskKind::MultipleChoice || s.has_choice, file, ": task '", name,
               "': multiple_choice needs doc_to_choice");
  STRATA_CHECK(s.kind == TaskKind::Perplexity || s.doc_to_text, file, ": task '", name,
               "' has no doc_to_text");
  STRATA_CHECK(s.doc_to_target, file, ": task '", name, "' has no doc_to_target");
  if (s.description && s.description->is_string() && s.description->get<std::string>().empty())
    s.description.reset();
  s.target_delimiter = str_of(cfg, "target_delimiter", " ", file);
  s.fewshot_delimiter = str_of(cfg, "fewshot_delimiter", "\n\n", file);
  s.num_fewshot = int_of(cfg, "num_fewshot", 0, file);
  if (cfg.contains("fewshot_config") && cfg["fewshot_config"].is_object()) {
    const json& fc = cfg["fewshot_config"];
    const std::string sampler = fc.value("sampler", std::string("default"));
    STRATA_CHECK(sampler == "default" || sampler == "first_n", file, ": task '", name,
                 "': fewshot_config.sampler '", sampler, "' (default or first_n)");
    s.first_n = sampler == "first_n";
    if (fc.contains("samples")) {
      STRATA_CHECK(fc["samples"].is_array(), file, ": task '", name,
                   "': fewshot_config.samples must be a list of documents (a !function is "
                   "Python, which strata cannot run)");
      s.samples = std::vector<json>(fc["samples"].begin(), fc["samples"].end());
    }
  }
  if (cfg.contains("metadata") && cfg["metadata"].is_object() &&
      cfg["metadata"].contains("version"))
    s.version = int(cfg["metadata"]["version"].get<double>());
  STRATA_CHECK(int_of(cfg, "repeats", 1, file) == 1, file, ": task '", name,
               "': repeats > 1 is not supported");
  read_generation(cfg, s);
  read_filters(cfg, s);
  read_metrics(cfg, s);
  return s;
}

std::string eval_split(const json& cfg) {
  for (const char* key : {"test_split", "validation_split"})
    if (cfg.contains(key) && cfg[key].is_string()) return cfg[key].get<std::string>();
  return "";
}

std::string fewshot_split(const json& cfg) {
  for (const char* key : {"fewshot_split", "training_split", "validation_split", "test_split"})
    if (cfg.contains(key) && cfg[key].is_string()) return cfg[key].get<std::string>();
  return "";
}

DataSource data_source(const HarnessTasks& h, const std::string& file, const json& cfg,
                       const std::string& split) {
  const std::string path = cfg.value("dataset_path", std::string());
  const json kwargs = cfg.value("dataset_kwargs", json::object());
  const json data_files = kwargs.is_object() ? kwargs.value("data_files", json()) : json();
  DataSource src;
  const bool builder = path == "json" || path == "csv" || path == "text";
  if (builder || !data_files.is_null()) {
    STRATA_CHECK(!data_files.is_null(), file, ": dataset_path '", path,
                 "' needs dataset_kwargs.data_files");
    json chosen;
    if (data_files.is_object()) {
      STRATA_CHECK(data_files.contains(split), file, ": dataset_kwargs.data_files has no split '",
                   split, "'");
      chosen = data_files[split];
    } else {
      STRATA_CHECK(split == "train", file,
                   ": dataset_kwargs.data_files without split names is "
                   "the 'train' split; the task reads '",
                   split, "'");
      chosen = data_files;
    }
    for (const json& f : chosen.is_array() ? chosen : json::array({chosen}))
      src.files.push_back(locate(f.get<std::string>(), file));
    src.format = builder ? path : format_of(src.files.at(0));
    if (fs::path(src.files.at(0)).extension() == ".tsv") src.delimiter = '\t';
    csv_options(file, kwargs, src);
    return src;
  }
  STRATA_CHECK(!path.empty(), file, ": no dataset_path");
  const json name = cfg.value("dataset_name", json());
  const fs::path dir =
      fs::path(h.datasets_dir) / path / (name.is_string() ? name.get<std::string>() : "default");
  for (const char* ext : {".jsonl", ".json", ".csv"}) {
    const std::string f = (dir / (split + ext)).string();
    if (fs::exists(f)) {
      src.files = {f};
      src.format = format_of(f);
      return src;
    }
  }
  src.files = {(dir / (split + ".jsonl")).string()};
  src.format = "json";
  return src;
}

std::vector<Doc> read_docs(const HarnessTasks& h, const std::string& file, const json& cfg,
                           const std::string& split) {
  const DataSource src = data_source(h, file, cfg, split);
  std::vector<Doc> docs;
  for (const std::string& f : src.files) {
    std::error_code ec;
    STRATA_CHECK(fs::exists(f, ec), file, ": the ", cfg.value("dataset_path", std::string("?")),
                 " split '", split, "' is not here: ", f,
                 " (a hub dataset is read from --datasets-dir; docs/evaluation.md)");
    if (src.format == "text") {
      const std::string text = read_file(f, "data file");
      size_t line = 0;
      for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string l = text.substr(pos, end - pos);
        if (!l.empty() && l.back() == '\r') l.pop_back();
        docs.push_back({json{{"text", l}}, cat(f, ":", ++line)});
        pos = end + 1;
      }
      continue;
    }
    const std::vector<task_internal::Row> rows =
        src.format == "csv" ? task_internal::read_csv(f, src.delimiter, src.quoting)
                            : task_internal::read_jsonl(f);
    const size_t first = docs.size();
    for (const auto& r : rows) docs.push_back({json::parse(r.fields.dump()), r.where});
    if (src.format == "csv") {
      std::vector<Doc> part(docs.begin() + long(first), docs.end());
      type_csv_columns(part);
      std::copy(part.begin(), part.end(), docs.begin() + long(first));
    }
  }
  return docs;
}

}  // namespace strata::harness_internal
