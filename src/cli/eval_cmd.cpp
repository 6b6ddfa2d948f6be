// `strata eval`: benchmark tasks and perplexity, at one or every exit layer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "core/yaml.h"
#include "data/tokenizer.h"
#include "eval/eval_job.h"
#include "eval/evaluate.h"
#include "eval/harness_task.h"
#include "eval/task.h"

namespace strata::cli {

// eval/ in the working directory, else the one of the source tree strata was
// built from, so `strata eval` works from anywhere after a build.
std::string default_eval_dir() {
  if (std::filesystem::is_directory("eval")) return "eval";
  const std::string built = std::string(STRATA_SOURCE_DIR) + "/eval";
  return std::filesystem::is_directory(built) ? built : "eval";
}

namespace {

// $STRATA_DATASETS, else ~/.cache/strata/datasets.
std::string default_datasets_dir() {
  if (const char* d = std::getenv("STRATA_DATASETS"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/strata/datasets";
}

// The task YAMLs of --include-path, then those shipped in <eval-dir>/harness
// (where this build reads YAML); null when there are none.
std::shared_ptr<const HarnessTasks> harness_tasks(const Args& args) {
  const std::string eval_dir = args.get("eval-dir");
  const std::string shipped = (std::filesystem::path(eval_dir) / "harness").string();
  const bool has_shipped = yaml_available() && std::filesystem::is_directory(shipped);
  if (!args.has("include-path") && !has_shipped) return nullptr;
  HarnessTasks h =
      index_harness_tasks(args.has("include-path") ? split_commas(args.get("include-path"))
                                                   : std::vector<std::string>{},
                          args.get("datasets-dir"));
  if (has_shipped)
    add_shipped_tasks(h, shipped,
                      [&](const std::string& n) { return !resolve_task(eval_dir, n).empty(); });
  return std::make_shared<const HarnessTasks>(std::move(h));
}

// Where lm-evaluation-harness task YAMLs and their data are.
Args& add_harness_options(Args& args) {
  return args
      .option("include-path", "DIRS",
              "lm-evaluation-harness task YAMLs: comma-separated folders searched (recursively) "
              "for --tasks names, tags and groups before --eval-dir")
      .option("datasets-dir", "DIR",
              "local copies of the Hugging Face datasets --include-path tasks name: "
              "DIR/<dataset_path>/<dataset_name or default>/<split>.jsonl",
              default_datasets_dir())
      .option("long-continuations", "MODE",
              "examples whose answer alone is longer than the model's context (the harness "
              "refuses them): skip (left out of the metrics, counted in the results) or truncate "
              "(scored on the answer's last tokens)",
              "skip");
}

Args eval_args() {
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
      .option("eval-dir", "DIR", "task definitions", default_eval_dir());
  add_harness_options(args)
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
              "target, acc, hashes)");
  add_threads_option(args).flag("bf16", "bf16 matmuls").flag("quiet", "no progress lines");
  // lm-evaluation-harness's spellings (--batch_size, --limit, --log_samples
  // DIR follow from the dash rule).
  args.alias("num_fewshot", "shots")
      .alias("output_path", "out")
      .alias("confirm_run_unsafe_code", "allow-code-execution");
  return args;
}

// --gen-kwargs K=V,...: generate_until overrides.
void read_gen_kwargs(const std::string& text, EvalOptions& o) {
  for (const std::string& kv : split_commas(text)) {
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const bool number = !v.empty() && end && *end == '\0';
    if (k == "max_gen_toks" && number && x >= 1 && x <= 100000 && x == std::floor(x)) {
      o.max_gen_toks = int(x);
    } else if (k == "temperature" && number && x >= 0 && x <= 100) {
      o.temperature = x;
    } else {
      fail(cat("strata eval: --gen-kwargs: bad item '", kv,
               "' (max_gen_toks=1..100000 or temperature=0..100)"));
    }
  }
}

// What the JSON and the logs need besides the scores.
void check_output_options(const Args& args) {
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
  // Where the results go, checked now rather than after the evaluation.
  const std::vector<std::string> inputs = {args.get("checkpoint"), args.get("perplexity")};
  if (args.has("out")) {
    check_output_file(args.get("out"), "strata eval: --out");
    check_output_not_input(args.get("out"), inputs, "strata eval: --out");
  }
  if (args.has("log-samples")) {
    check_output_dir(args.get("log-samples"), "strata eval: --log-samples");
    check_output_not_input(args.get("log-samples"), inputs, "strata eval: --log-samples");
  }
}

// The job the options describe, checked in full before the model loads (the
// model's part: see for_model).
EvalJob read_eval_job(const Args& args) {
  check_output_options(args);
  EvalJob job;
  EvalOptions& o = job.tasks;
  const double code_timeout = args.get_double("code-timeout");
  const int code_memory = args.get_int("code-memory-mb");
  STRATA_CHECK(code_timeout > 0 && code_timeout <= 3600,
               "strata eval: --code-timeout must be in (0, 3600] seconds, got ", code_timeout);
  STRATA_CHECK(code_memory >= 16, "strata eval: --code-memory-mb must be >= 16, got ", code_memory);
  o.sandbox.wall_seconds = o.sandbox.cpu_seconds = code_timeout;
  o.sandbox.memory_bytes = int64_t(code_memory) << 20;
  read_gen_kwargs(args.get("gen-kwargs"), o);
  o.limit = args.get_int("limit");
  STRATA_CHECK(o.limit >= 0, "strata eval: --limit must be >= 0 (0: all), got ", o.limit);
  o.shots = args.get_int("shots");
  STRATA_CHECK(o.shots >= -1,
               "strata eval: --shots must be >= 0 (or -1: each task's default), got ", o.shots);
  o.window = args.get_int("window");
  o.stride = args.get_int("stride");
  STRATA_CHECK(o.window >= 0 && o.stride >= 0,
               "strata eval: --window and --stride must be >= 0 (0: the default), got ", o.window,
               " and ", o.stride);
  o.batch_size = args.get_int("batch-size");
  STRATA_CHECK(o.batch_size >= 1, "strata eval: --batch-size must be >= 1, got ", o.batch_size);
  o.eval_dir = args.get("eval-dir");
  o.harness = harness_tasks(args);
  for (const std::string& t : split_commas(args.get("tasks")))  // YAML names win
    o.tasks.push_back(
        o.harness && !o.harness->expand(t).empty() ? t : resolve_tasks(o.eval_dir, {t}).front());
  o.chat.apply = args.has("apply-chat-template");
  o.chat.system_instruction = args.get("system-instruction");
  o.chat.fewshot_as_multiturn = args.has("fewshot-as-multiturn");
  o.allow_code_execution = args.has("allow-code-execution");
  const std::string long_mode = args.get("long-continuations");
  STRATA_USAGE_CHECK(long_mode == "skip" || long_mode == "truncate",
                     "strata eval: --long-continuations must be skip or truncate, got '", long_mode,
                     "'");
  o.score_long_continuations = long_mode == "truncate";
  job.perplexity = args.has("perplexity");
  job.perplexity_file = args.get("perplexity");
  job.full_last_window = args.get("last-window") == "full";
  job.output_format = args.get("output-format");
  return job;
}

// Task names checked before anything loads.
void check_tasks(const Args& args, const EvalJob& job) {
  const auto known = list_tasks(args.get("eval-dir"));
  const HarnessTasks* h = job.tasks.harness.get();
  for (const std::string& t : split_commas(args.get("tasks")))
    if (t != "all" && resolve_task(args.get("eval-dir"), t).empty() && (!h || h->expand(t).empty()))
      fail(cat("strata eval: unknown task '", t, "' (", args.get("eval-dir"),
               "/ has: ", join(known, ", "),
               h ? cat("; and ", h->files.size(), " task YAMLs: --tasks list shows them")
                 : std::string(),
               ")"));
  require_code_permission(args.get("eval-dir"),
                          resolve_tasks(args.get("eval-dir"), split_commas(args.get("tasks"))),
                          args.has("allow-code-execution"), "pass --allow-code-execution", h);
}

// At most: a batch of full windows through the model and its logits.
MemoryPlan eval_memory(const Args& args) {
  MemoryPlan memory;
  memory.hint = "lower --batch-size";
  memory.use = [&args](const CheckpointInfo& info) {
    MemoryUse u;
    const int ctx = info.config.max_position_embeddings;
    u.batch = args.get_int("batch-size");
    u.seq = args.get_int("window") > 0 ? std::min(args.get_int("window"), ctx) : ctx;
    u.logits_rows = int64_t(u.batch) * u.seq;
    return u;
  };
  return memory;
}

// The job's part that needs the loaded model: exits, what the JSON says of
// it, and what only the root rank does (progress, --write-out, logs).
void for_model(EvalJob& job, const Args& args, const LoadedModel& lm) {
  EvalOptions& o = job.tasks;
  const std::string exit_arg = args.get("exit-layer");
  if (exit_arg == "all") {
    o.exits = all_exits(lm.info.plan);
  } else if (!exit_arg.empty()) {
    o.exits = {args.get_int("exit-layer")};
    lm.info.plan.check_exit(o.exits.back(), "strata eval: --exit-layer");
  } else {
    o.exits = {lm.model->config().num_hidden_layers};
  }
  if (!job.perplexity) o.seed = uint64_t(args.get_int("seed"));
  job.checkpoint = args.get("checkpoint");
  job.plan = lm.info.plan.to_string();
  job.step = lm.info.state.value("step", int64_t(0));
  o.progress = !args.has("quiet") && lm.root();
  o.write_out = args.has("write-out") && lm.root();
  if (lm.root() && args.has("log-samples")) o.log_samples_dir = args.get("log-samples");
}

}  // namespace

int cmd_eval(int argc, char** argv, int first) {
  Args args = eval_args();
  if (!args.parse(argc, argv, first)) return 0;
  if (args.has("tasks") && args.get("tasks") == "list") {
    std::fputs(task_table(args.get("eval-dir")).c_str(), stdout);
    if (const auto h = harness_tasks(args)) std::fputs(harness_task_table(*h).c_str(), stdout);
    return 0;
  }
  STRATA_USAGE_CHECK(args.has("checkpoint"), "strata eval: --checkpoint is required");
  STRATA_USAGE_CHECK(args.has("tasks") != args.has("perplexity"),
                     "strata eval: give either --tasks or --perplexity");
  EvalJob job = read_eval_job(args);
  apply_threads(args.get_int("threads"));
  if (args.has("tasks")) check_tasks(args, job);
  LoadedModel lm = load_model_from_args(args, "strata eval", false, 0, eval_memory(args));
  const Tokenizer tok = checkpoint_tokenizer(lm, args.get("checkpoint"));
  if (args.has("bf16")) lm.model->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  for_model(job, args, lm);
  const EvalJobResult r = run_eval_job(*lm.model, tok, job);
  std::fputs(r.table.c_str(), stdout);
  if (args.has("out") && lm.root()) write_file_atomic(args.get("out"), r.json.dump(2) + "\n");
  return 0;
}

}  // namespace strata::cli
