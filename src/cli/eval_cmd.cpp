// `strata eval`: benchmark tasks and perplexity, at one or every exit layer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "eval/task.h"
#include "io/model_io.h"

namespace strata::cli {
namespace {

// eval/ in the working directory, else the one of the source tree strata was
// built from, so `strata eval` works from anywhere after a build.
std::string default_eval_dir() {
  if (std::filesystem::is_directory("eval")) return "eval";
  const std::string built = std::string(STRATA_SOURCE_DIR) + "/eval";
  return std::filesystem::is_directory(built) ? built : "eval";
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 1000 ? "%.1f" : "%.4f", v);
  return buf;
}

void print_table(const std::vector<std::vector<TaskResult>>& results,
                 const std::vector<int>& exits) {
  if (exits.size() == 1) {
    int w = 16;  // the first column fits every task and category label
    for (const TaskResult& t : results[0]) {
      w = std::max(w, int(t.task.size()));
      for (const auto& [c, ms] : t.categories) w = std::max(w, int(c.size()) + 3);
    }
    std::printf("%-*s %-18s %10s %10s %7s %6s\n", w, "task", "metric", "value", "stderr", "n",
                "shots");
    for (const TaskResult& t : results[0]) {
      bool first = true;
      for (const Metric& m : t.metrics) {
        std::printf("%-*s %-18s %10s %10s", w, first ? t.task.c_str() : "", m.name.c_str(),
                    fmt(m.value).c_str(), m.stderr_ >= 0 ? ("±" + fmt(m.stderr_)).c_str() : "");
        if (first) std::printf(" %7lld %6d%s", (long long)t.n, t.shots, t.comparable ? "" : "  *");
        std::printf("\n");
        first = false;
      }
      for (const auto& [c, ms] : t.categories)
        for (const Metric& m : ms)
          std::printf("%-*s %-18s %10s %10s\n", w, (" - " + c).c_str(), m.name.c_str(),
                      fmt(m.value).c_str(), m.stderr_ >= 0 ? ("±" + fmt(m.stderr_)).c_str() : "");
    }
    for (const TaskResult& t : results[0])
      if (!t.comparable)
        std::printf("* %s: not comparable with lm-evaluation-harness: %s\n", t.task.c_str(),
                    t.not_comparable_because.c_str());
    return;
  }
  std::printf("%-16s %-18s", "task", "metric");
  for (int e : exits) std::printf(" %9s", ("exit " + std::to_string(e)).c_str());
  std::printf("\n");
  for (size_t t = 0; t < results[0].size(); ++t)
    for (size_t k = 0; k < results[0][t].metrics.size(); ++k) {
      std::printf("%-16s %-18s", k == 0 ? results[0][t].task.c_str() : "",
                  results[0][t].metrics[k].name.c_str());
      for (size_t e = 0; e < exits.size(); ++e)
        std::printf(" %9s", fmt(results[e][t].metrics[k].value).c_str());
      std::printf("\n");
    }
}

// `strata eval --tasks list`: every task of the directory, loaded as it
// would be scored (so the counts are real), one line each.
void list_task_table(const std::string& eval_dir) {
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
  std::printf("%-14s %-16s %8s %6s  %-*s  %-10s  %s\n", "task", "kind", "n", "shots", w, "metrics",
              "comparable", "summary");
  for (const Row& r : rows)
    std::printf("%-14s %-16s %8lld %6d  %-*s  %-10s  %s\n", r.name.c_str(), r.kind.c_str(),
                (long long)r.n, r.shots, w, r.metrics.c_str(), r.comparable.c_str(),
                r.summary.c_str());
  std::printf(
      "comparable: yes = lm-evaluation-harness's task of the same name (see "
      "eval/README.md), no = cannot match it (left out of `all`), - = no counterpart\n");
}

}  // namespace

int cmd_eval(int argc, char** argv, int first) {
  Args args("strata eval",
            "Evaluates a checkpoint on benchmark tasks (eval/*.toml, lm-evaluation-harness "
            "semantics: acc, acc_norm, perplexities, with standard errors) or the perplexity of "
            "a text file, at the full model or at exit layers. Prints a table; --out writes JSON.");
  add_model_options(args);
  args.option("tasks", "LIST",
              "comma-separated task names, all (every task comparable with "
              "lm-evaluation-harness that runs no code), or list (print the tasks and exit; "
              "see eval/README.md)")
      .option("perplexity", "FILE", "token perplexity of a text file instead of tasks")
      .option("shots", "N", "few-shot examples (default: each task's own)", "-1")
      .option("limit", "N", "only the first N examples or documents of each task (0: all)", "0")
      .option("batch-size", "N", "sequences per forward pass (results do not depend on it)", "8")
      .option("exit-layer", "E", "evaluate after layer E (1..L), or all for every exit", "")
      .option("seed", "S", "seed of the few-shot sampling", "1234")
      .option("window", "W",
              "perplexity: tokens per window, inputs plus the last target "
              "(default: the model's context + 1)",
              "0")
      .option("stride", "S", "perplexity: window step (default: window - 1)", "0")
      .option("last-window", "MODE",
              "--perplexity: full (the last window extended left to a full context, the "
              "harness's rule) or chunked (where the stride puts it, as llama2.c's chunks)",
              "full")
      .option("eval-dir", "DIR", "task definitions", default_eval_dir())
      .option("out", "FILE", "write the results as JSON")
      .option("output-format", "NAME",
              "layout of --out: strata, or lm-eval (lm-evaluation-harness's results.json: "
              "results[task][\"acc,none\"], configs, versions, n-shot, ...)",
              "strata")
      .flag("write-out", "print each task's first rendered example (its requests) before scoring")
      .flag("apply-chat-template",
            "render requests in the chat template strata trains SFT with (system, user and "
            "assistant turns; the answer starts the assistant turn)")
      .option("system-instruction", "TEXT", "with --apply-chat-template: the system message")
      .flag("fewshot-as-multiturn",
            "with --apply-chat-template: each few-shot example as its own user/assistant turn")
      .option("gen-kwargs", "K=V,...",
              "generate_until overrides: max_gen_toks=N, temperature=T (0: greedy)")
      .flag("allow-code-execution",
            "run tasks that execute model-written code (HumanEval), each program in a sandbox: "
            "a subprocess without network, in a temporary directory, with time and memory "
            "limits")
      .option("code-timeout", "S",
              "sandbox: seconds per program, wall clock and CPU (the harness's code_eval: 3)", "3")
      .option("code-memory-mb", "MB", "sandbox: address-space limit per program", "1024")
      .option("log-samples", "DIR",
              "per-sample logs of every task: "
              "DIR/samples_<task>.jsonl (lm-evaluation-harness fields: arguments, resps, "
              "target, acc, hashes)")
      .option("threads", "N", "OpenMP threads (0: OMP_NUM_THREADS or all cores)", "0")
      .flag("bf16", "bf16 matmuls")
      .flag("quiet", "no progress lines");
  if (!args.parse(argc, argv, first)) return 0;
  if (args.has("tasks") && args.get("tasks") == "list") {
    list_task_table(args.get("eval-dir"));
    return 0;
  }
  STRATA_USAGE_CHECK(args.has("checkpoint"), "strata eval: --checkpoint is required");
  STRATA_USAGE_CHECK(args.has("tasks") != args.has("perplexity"),
                     "strata eval: give either --tasks or --perplexity");
  const std::string format = args.get("output-format");
  STRATA_CHECK(format == "strata" || format == "lm-eval",
               "strata eval: --output-format must be strata or lm-eval, got '", format, "'");
  STRATA_CHECK(format == "strata" || args.has("tasks"),
               "strata eval: --output-format lm-eval lays out --tasks results (not --perplexity)");
  STRATA_CHECK(!args.has("log-samples") || args.has("tasks"),
               "strata eval: --log-samples logs the samples of --tasks (a --perplexity file has "
               "none)");
  STRATA_CHECK(args.get("last-window") == "full" || args.get("last-window") == "chunked",
               "strata eval: --last-window must be full or chunked, got '", args.get("last-window"),
               "'");
  STRATA_CHECK(args.has("apply-chat-template") ||
                   (!args.has("system-instruction") && !args.has("fewshot-as-multiturn")),
               "strata eval: --system-instruction and --fewshot-as-multiturn go with "
               "--apply-chat-template");
  const double code_timeout = args.get_double("code-timeout");
  const int code_memory = args.get_int("code-memory-mb");
  STRATA_CHECK(code_timeout > 0 && code_timeout <= 3600,
               "strata eval: --code-timeout must be in (0, 3600] seconds, got ", code_timeout);
  STRATA_CHECK(code_memory >= 16, "strata eval: --code-memory-mb must be >= 16, got ", code_memory);
  int max_gen_toks = -1;
  double temperature = -1;
  for (const std::string& kv : split_commas(args.get("gen-kwargs"))) {
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const bool number = !v.empty() && end && *end == '\0';
    if (k == "max_gen_toks" && number && x >= 1 && x <= 100000 && x == std::floor(x)) {
      max_gen_toks = int(x);
    } else if (k == "temperature" && number && x >= 0 && x <= 100) {
      temperature = x;
    } else {
      fail(cat("strata eval: --gen-kwargs: bad item '", kv,
               "' (max_gen_toks=1..100000 or temperature=0..100)"));
    }
  }
  STRATA_CHECK(args.get_int("limit") >= 0, "strata eval: --limit must be >= 0 (0: all), got ",
               args.get_int("limit"));
  STRATA_CHECK(args.get_int("shots") >= -1,
               "strata eval: --shots must be >= 0 (or -1: each task's default), got ",
               args.get_int("shots"));
  STRATA_CHECK(args.get_int("window") >= 0 && args.get_int("stride") >= 0,
               "strata eval: --window and --stride must be >= 0 (0: the default), got ",
               args.get_int("window"), " and ", args.get_int("stride"));
  STRATA_CHECK(args.get_int("batch-size") >= 1, "strata eval: --batch-size must be >= 1, got ",
               args.get_int("batch-size"));
  apply_threads(args.get_int("threads"));
  if (args.has("tasks")) {  // check the names before loading anything
    const auto known = list_tasks(args.get("eval-dir"));
    for (const std::string& t : split_commas(args.get("tasks")))
      if (t != "all" && std::find(known.begin(), known.end(), t) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        fail(cat("strata eval: unknown task '", t, "' (", args.get("eval-dir"), "/ has: ", list,
                 ")"));
      }
    require_code_permission(args.get("eval-dir"), split_commas(args.get("tasks")),
                            args.has("allow-code-execution"));
  }

  MemoryPlan memory;
  memory.hint = "lower --batch-size";
  memory.use = [&](const CheckpointInfo& info) {
    // At most: a batch of full windows through the model and its logits.
    MemoryUse u;
    const int ctx = info.config.max_position_embeddings;
    u.batch = args.get_int("batch-size");
    u.seq = args.get_int("window") > 0 ? std::min(args.get_int("window"), ctx) : ctx;
    u.logits_rows = int64_t(u.batch) * u.seq;
    return u;
  };
  LoadedModel lm = load_model_from_args(args, "strata eval", false, 0, memory);
  Model<float>* model = lm.model.get();
  const CheckpointInfo& info = lm.info;
  const bool progress = !args.has("quiet") && lm.root();
  STRATA_CHECK(!info.tokenizer.empty(), args.get("checkpoint"), ": has no tokenizer");
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, args.get("checkpoint"));
  if (args.has("bf16")) model->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  const int L = model->config().num_hidden_layers;
  std::vector<int> exits;
  const std::string exit_arg = args.get("exit-layer");
  if (exit_arg == "all") {  // every exit the plan allows (unit boundaries)
    for (int e = 1; e <= L; ++e)
      if (info.plan.unit_boundary(e)) exits.push_back(e);
  } else if (!exit_arg.empty()) {
    exits.push_back(args.get_int("exit-layer"));
    info.plan.check_exit(exits.back(), "strata eval: --exit-layer");
  } else {
    exits.push_back(L);
  }

  nlohmann::json out = {{"checkpoint", args.get("checkpoint")},
                        {"step", info.state.value("step", int64_t(0))},
                        {"plan", info.plan.to_string()},
                        {"num_layers", L},
                        {"exit_layers", exits},
                        {"batch_size", args.get_int("batch-size")}};
  Timer timer;
  if (args.has("perplexity")) {
    const auto r = file_perplexity(*model, tok, args.get("perplexity"), args.get_int("window"),
                                   args.get_int("stride"), args.get_int("batch-size"), exits,
                                   progress, args.get("last-window") == "full");
    std::printf("%-8s %10s %10s %10s %12s %12s\n", "exit", "ppl", "nll", "tokens", "word_ppl",
                "bits/byte");
    for (size_t e = 0; e < exits.size(); ++e)
      std::printf("%-8d %10.4f %10.6f %10lld %12.4f %12.4f\n", exits[e], r[e].ppl(),
                  r[e].mean_nll(), (long long)r[e].tokens, r[e].word_perplexity(),
                  r[e].bits_per_byte());
    out["perplexity_file"] = args.get("perplexity");
    out.update(r.back().to_json());
    if (exits.size() > 1) {
      out["per_exit"] = nlohmann::json::object();
      for (size_t e = 0; e < exits.size(); ++e)
        out["per_exit"][std::to_string(exits[e])] = r[e].to_json();
    }
  } else {
    EvalOptions o;
    o.tasks = split_commas(args.get("tasks"));
    o.shots = args.get_int("shots");
    o.limit = args.get_int("limit");
    o.batch_size = args.get_int("batch-size");
    o.exits = exits;
    o.seed = uint64_t(args.get_int("seed"));
    o.eval_dir = args.get("eval-dir");
    o.window = args.get_int("window");
    o.stride = args.get_int("stride");
    o.progress = progress;
    o.write_out = args.has("write-out") && lm.root();
    if (lm.root() && args.has("log-samples")) o.log_samples_dir = args.get("log-samples");
    o.chat.apply = args.has("apply-chat-template");
    o.chat.system_instruction = args.get("system-instruction");
    o.chat.fewshot_as_multiturn = args.has("fewshot-as-multiturn");
    o.allow_code_execution = args.has("allow-code-execution");
    o.sandbox.wall_seconds = code_timeout;
    o.sandbox.cpu_seconds = code_timeout;
    o.sandbox.memory_bytes = int64_t(code_memory) << 20;
    o.max_gen_toks = max_gen_toks;
    o.temperature = temperature;
    const auto results = evaluate_tasks(*model, tok, o);
    print_table(results, exits);
    out["seed"] = o.seed;
    out["shots"] = o.shots >= 0 ? nlohmann::json(o.shots) : nlohmann::json();
    out["limit"] = o.limit;
    auto tasks_json = [](const std::vector<TaskResult>& rs) {
      nlohmann::json j = nlohmann::json::object();
      for (const TaskResult& t : rs) j[t.task] = t.to_json();
      return j;
    };
    out["results"] = tasks_json(results.back());
    if (exits.size() > 1) {
      out["per_exit"] = nlohmann::json::object();
      for (size_t e = 0; e < exits.size(); ++e)
        out["per_exit"][std::to_string(exits[e])] = tasks_json(results[e]);
    }
    if (format == "lm-eval") {
      nlohmann::json config = {{"model", "strata"},
                               {"model_args", cat("checkpoint=", args.get("checkpoint"),
                                                  ",plan=", info.plan.to_string())},
                               {"batch_size", args.get_int("batch-size")},
                               {"limit", o.limit},
                               {"seed", o.seed},
                               {"exit_layers", exits},
                               {"strata_version", STRATA_VERSION}};
      out = lm_eval_results(results, exits, config);
    }
  }
  if (format == "strata")
    out["seconds"] = timer.seconds();
  else
    out["config"]["seconds"] = timer.seconds();
  if (args.has("out") && lm.root()) write_file_atomic(args.get("out"), out.dump(2) + "\n");
  return 0;
}

}  // namespace strata::cli
