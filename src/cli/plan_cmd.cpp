// `strata plan search`: the layer plan (standard, skip, ladder, spd, lp
// units) fastest for a deployment (tp degree, link, workload) within a
// perplexity budget on a calibration text, with the Pareto front of speed
// against quality (eval/plan_search.h; the speed side: infer/plan_cost.h; the
// measurements: cli/plan_session.h).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_session.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/text.h"
#include "eval/plan_search.h"
#include "eval/task.h"
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "model/params.h"
#include "train/plan_recovery.h"

namespace strata::cli {

namespace {

constexpr const char* kCmd = "strata plan search";

Args plan_search_args() {
  Args args(kCmd,
            "Searches per-layer plans of a standard checkpoint (layers standard, skipped, "
            "ladder, SPD blocks at the tp degree, Layer-Parallel pairs) for the fastest one "
            "within a perplexity budget on a calibration text (or a task accuracy budget), for a "
            "deployment: a tensor-parallel degree, a link and a workload. Scores each move alone, "
            "finds the front "
            "of the sum of moves against the predicted time, scores the plans near the budget "
            "whole, and writes the front (table, JSON, SVG), the chosen plan and, under "
            "mpirun -np N with --tp N, the front's measured speed-ups.");
  args.option("checkpoint", "FILE", "standard checkpoint (.h5) to plan for")
      .option("plan", "TEXT", "not taken: the search sets the plans", "")
      .option("tp", "N", "the deployment's tensor-parallel degree", "1")
      .option("device", "NAME", "cpu, cuda, simt or auto (as strata eval)", "auto")
      .option("calibration", "FILE",
              "text whose perplexity the budget bounds (scored as strata eval --perplexity "
              "FILE does by default)")
      .option("budget", "ppl+P%|TASK-P[,...]",
              "how far the calibration perplexity may rise (ppl+P%), or a task's accuracy "
              "fall in points (TASK-P: acc on eval/TASK.toml, e.g. piqa-2), or both "
              "(ppl+10%,piqa-2); with task budgets alone the front is scored whole up to "
              "--slack x ppl+25%",
              "ppl+5%")
      .option("task-limit", "N", "task budgets: the first N examples of each task (0: all)", "500")
      .option("link", "BW,LATENCY|measured",
              "the tp group's link (e.g. 10Gbit,20us or 25GB/s,5us), or measured: timed on "
              "the group (under mpirun)",
              "")
      .option("workload", "PROMPT,GENERATE,BATCH",
              "what a deployment runs: prompt tokens, new tokens, prompts decoded together",
              "128,64,1")
      .option("kinds", "LIST", "the moves searched, from skip, ladder, spd, lp",
              "skip,ladder,spd,lp")
      .option("slack", "S",
              "score whole the front's plans whose sum of moves is within S x the budget", "2")
      .option("max-checks", "N", "at most N of them (spread along the front)", "24")
      .option("overlap", "F",
              "share of a module's compute that hides a sum beside it (ladder), in [0, 1]", "1")
      .option("repeat", "R", "runs per timing (the fastest counts)", "3")
      .option("link-delay-us", "US",
              "under mpirun: every tp collective completes no earlier than US after it starts "
              "(a modelled link latency, as bench generate's)",
              "0")
      .option("out", "DIR",
              "writes search.json, front.svg, and its caches (quality.json: every plan scored; "
              "compute.json); a rerun reuses them");
  add_threads_option(args)
      .flag("self-speculative",
            "also choose a self-speculative exit and draft count (LayerSkip) for the decode "
            "phase of each plan that matters, from acceptance measured on the workload")
      .option("max-drafts", "D", "self-speculation: at most D drafts per round", "8")
      .option("recovery-base", "RECIPE",
              "the training recipe (data, tokenizer, batch) the recovery recipe builds on",
              "recipes/pretrain-base.toml")
      .option("recovery-steps", "N", "steps of the recovery recipe's fine-tuning", "200")
      .flag("no-measure", "under mpirun: do not time the front's plans")
      .flag("quiet", "no progress lines");
  return args;
}

// One term of --budget: ppl+P% (or ppl+P) as the fraction P / 100 in `ppl`,
// or TASK-P as a task budget of P points.
void parse_budget_term(const std::string& term, const std::string& text, PlanSearchOptions& o,
                       bool& has_ppl) {
  const bool ppl = term.rfind("ppl+", 0) == 0;
  const size_t dash = term.rfind('-');
  std::string t = ppl ? term.substr(4) : dash == std::string::npos ? "" : term.substr(dash + 1);
  if (ppl && !t.empty() && t.back() == '%') t.pop_back();
  char* end = nullptr;
  const double v = !t.empty() ? std::strtod(t.c_str(), &end) : -1;
  STRATA_USAGE_CHECK((ppl || (dash != std::string::npos && dash > 0)) && end && *end == '\0' &&
                         std::isfinite(v) && v >= 0 && (ppl || v <= 100),
                     kCmd, ": --budget '", text, "': '", term,
                     "' is neither ppl+P% (the calibration perplexity may rise by P percent, "
                     "P >= 0) nor TASK-P (the accuracy on eval/TASK.toml may fall by P points, "
                     "0 <= P <= 100)");
  if (ppl) {
    STRATA_USAGE_CHECK(!has_ppl, kCmd, ": --budget '", text, "' has two ppl budgets");
    o.budget = v / 100;
    has_ppl = true;
  } else {
    o.tasks.push_back({term.substr(0, dash), v});
  }
}

// --budget: ppl+P% and TASK-P terms, comma-separated.
void parse_budget(const std::string& text, PlanSearchOptions& o) {
  bool has_ppl = false;
  for (const std::string& term : split_commas(text))
    parse_budget_term(trim(term), text, o, has_ppl);
  STRATA_USAGE_CHECK(has_ppl || !o.tasks.empty(), kCmd, ": --budget is empty");
  o.ppl_binds = has_ppl;
  if (!has_ppl) o.budget = 0.25;  // the window of plans scored whole
}

std::vector<std::string> parse_kinds(const std::string& text) {
  std::vector<std::string> kinds;
  for (const std::string& k : split_commas(text)) {
    const auto& all = plan_search_kinds();
    STRATA_USAGE_CHECK(std::find(all.begin(), all.end(), k) != all.end(), kCmd, ": --kinds: '", k,
                       "' is not one of skip, ladder, spd, lp");
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  STRATA_USAGE_CHECK(!kinds.empty(), kCmd, ": --kinds is empty");
  return kinds;
}

struct Setup {
  PlanSearchOptions options;
  LinkModel link;
  bool link_measured = false;
  double overlap = 1;
  int repeat = 3;
  int max_drafts = 0;  // > 0: self-speculation searched
};

Setup read_setup(const Args& args) {
  STRATA_USAGE_CHECK(args.has("checkpoint"), kCmd, ": --checkpoint is required");
  STRATA_USAGE_CHECK(args.has("calibration"), kCmd, ": --calibration is required");
  STRATA_USAGE_CHECK(args.has("out"), kCmd, ": --out DIR is required");
  STRATA_USAGE_CHECK(!args.has("plan"), kCmd, ": --plan is not taken: the search sets the plans");
  Setup s;
  PlanSearchOptions& o = s.options;
  o.tp = args.get_int("tp");
  STRATA_USAGE_CHECK(o.tp >= 1, kCmd, ": --tp must be at least 1, got ", o.tp);
  parse_budget(args.get("budget"), o);
  for (PlanTaskBudget& t : o.tasks) {
    const std::string file = resolve_task(default_eval_dir(), t.task);
    STRATA_USAGE_CHECK(!file.empty(), kCmd, ": --budget: no task '", t.task, "' in ",
                       default_eval_dir(), " (strata eval --tasks list names them)");
    t.task = file;
  }
  STRATA_USAGE_CHECK(args.get_int("task-limit") >= 0, kCmd, ": --task-limit must be at least 0");
  o.kinds = parse_kinds(args.get("kinds"));
  o.slack = args.get_double("slack");
  o.max_checks = args.get_int("max-checks");
  STRATA_USAGE_CHECK(o.slack >= 1 && o.max_checks >= 1, kCmd,
                     ": --slack must be at least 1 and --max-checks at least 1");
  s.overlap = args.get_double("overlap");
  STRATA_USAGE_CHECK(s.overlap >= 0 && s.overlap <= 1, kCmd, ": --overlap must be in [0, 1]");
  s.repeat = args.get_int("repeat");
  if (args.has("self-speculative")) {
    s.max_drafts = args.get_int("max-drafts");
    STRATA_USAGE_CHECK(s.max_drafts >= 1 && s.max_drafts <= 64, kCmd,
                       ": --max-drafts must be in 1..64, got ", s.max_drafts);
  }
  STRATA_USAGE_CHECK(s.repeat >= 1, kCmd, ": --repeat must be at least 1");
  const std::string link = args.get("link");
  STRATA_USAGE_CHECK(!link.empty() || o.tp == 1, kCmd, ": --tp ", o.tp,
                     " needs --link BANDWIDTH,LATENCY (e.g. 10Gbit,20us) or --link measured");
  s.link_measured = link == "measured";
  if (!link.empty() && !s.link_measured) s.link = parse_link(link, cat(kCmd, ": --link"));
  o.progress = !args.has("quiet");
  check_output_dir(args.get("out"), cat(kCmd, ": --out"));
  check_output_not_input(args.get("out"), {args.get("checkpoint"), args.get("calibration")},
                         cat(kCmd, ": --out"));
  return s;
}

// The degree against the model; spd left out (with a note) where its degree
// cannot split the model, unless --kinds asked for it.
void check_degree(const Args& args, const LlamaConfig& cfg, PlanSearchOptions& o) {
  try {
    ParamLayout(cfg, o.tp, 0);
  } catch (const Error& e) {
    fail(cat(kCmd, ": --tp ", o.tp, ": ", args.get("checkpoint"), ": ", e.what()));
  }
  const auto spd = std::find(o.kinds.begin(), o.kinds.end(), "spd");
  if (spd == o.kinds.end() || o.tp < 2) return;
  try {
    LayerPlan::parse(cat("spd*", cfg.num_hidden_layers, ";spd_degree=", o.tp),
                     cfg.num_hidden_layers)
        .check_model(cfg, o.tp);
  } catch (const Error& e) {
    STRATA_CHECK(!args.has("kinds"), kCmd, ": --kinds spd at --tp ", o.tp, ": ", e.what());
    log::info(kCmd, ": no spd blocks at tp ", o.tp, " (", e.what(), ")");
    o.kinds.erase(spd);
  }
}

// Under mpirun: the workload timed under the front's plans, the chosen one
// and each technique's best, against the standard plan.
void measure_front(PlanSession& s, PlanSearchResult& r, int repeat, bool progress) {
  const double standard = s.workload_seconds(LayerPlan::standard(r.layers).to_string(), repeat);
  for (int i : plans_that_matter(r)) {
    PlanPoint& p = r.checked[size_t(i)];
    p.measured_speedup = standard / s.workload_seconds(p.plan, repeat);
    if (p.spec.exit > 0)
      p.measured_spec_speedup =
          standard / s.workload_seconds(p.plan, repeat, p.spec.exit, p.spec.drafts);
    if (progress && s.root())
      std::fprintf(stderr, "plan search: timed %s: %.3fx (predicted %.3fx)\n", p.plan.c_str(),
                   p.measured_speedup, p.speedup);
  }
}

// DIR/recover/: the recipes that retrain what the chosen plan changed.
void write_recovery_files(const Args& args, const PlanSearchResult& r, int context) {
  const LayerPlan plan = LayerPlan::parse(r.chosen_point().plan, r.layers);
  if (plan.plain()) {
    std::printf("recovery: nothing to retrain (the chosen plan is the standard one)\n");
    return;
  }
  RecoveryInputs in;
  in.plan = plan;
  in.tp = r.tp;
  in.context = context;
  in.checkpoint = std::filesystem::absolute(args.get("checkpoint")).string();
  in.calibration = std::filesystem::absolute(args.get("calibration")).string();
  in.base_recipe = std::filesystem::absolute(args.get("recovery-base")).string();
  in.dir = std::filesystem::absolute(args.get("out")).string() + "/recover";
  in.strata = std::filesystem::read_symlink("/proc/self/exe").string();
  in.steps = args.get_int("recovery-steps");
  STRATA_CHECK(in.steps >= 1, kCmd, ": --recovery-steps must be at least 1");
  if (!recovery_trainable(plan).empty() && !std::filesystem::exists(in.base_recipe)) {
    std::printf(
        "recovery: not written: --recovery-base %s does not exist (the training data "
        "the fine-tuning needs)\n",
        args.get("recovery-base").c_str());
    return;
  }
  std::filesystem::create_directories(in.dir);
  const RecoveryFiles f = write_recovery(in);
  std::printf("recovery: %s retrains %s; run it to score the plan before and after\n",
              f.script.c_str(),
              f.spd && f.train ? "the SPD blocks (spd.toml), then the ladder layers and LP pairs "
                                 "(train.toml)"
              : f.spd          ? "the SPD blocks (spd.toml)"
              : f.train        ? "the ladder layers and LP pairs (train.toml)"
                               : "nothing (skipped layers only)");
}

nlohmann::json inputs_json(const Args& args, const CostInputs& cost, const Setup& setup,
                           const PlanSession& s) {
  nlohmann::json phases = nlohmann::json::array();
  for (const PhaseCompute& p : cost.phases)
    phases.push_back({{"name", p.name},
                      {"attention_seconds", p.attention},
                      {"mlp_seconds", p.mlp},
                      {"fixed_seconds", p.fixed},
                      {"rows", p.rows},
                      {"passes", p.passes}});
  return {{"checkpoint", args.get("checkpoint")},
          {"calibration", args.get("calibration")},
          {"workload", args.get("workload")},
          {"link",
           {{"bandwidth_bytes_per_s", cost.link.bandwidth},
            {"latency_s", cost.link.latency},
            {"measured", setup.link_measured},
            {"modelled_delay_us", args.get_int("link-delay-us")}}},
          {"overlap", cost.overlap},
          {"processes", s.distributed() ? s.tp() : 1},
          {"compute", phases},
          {"cache",
           {{"fingerprint", s.fingerprint()},
            {"reused_plans", s.cached_plans()},
            {"scored_plans", s.scored_plans()}}}};
}

int plan_search_cmd(int argc, char** argv, int first) {
  Args args = plan_search_args();
  if (!args.parse(argc, argv, first)) return 0;
  Setup setup = read_setup(args);
  apply_threads(args.get_int("threads"));
  // The context bounds the workload: read from the checkpoint's header first.
  STRATA_CHECK(std::filesystem::exists(args.get("checkpoint")), kCmd, ": --checkpoint ",
               args.get("checkpoint"), ": no such file");
  const LlamaConfig header = read_checkpoint_info(CheckpointReader(args.get("checkpoint"))).config;
  const Workload work = parse_workload(args.get("workload"), header.max_position_embeddings,
                                       cat(kCmd, ": --workload"));
  check_degree(args, header, setup.options);
  PlanSession s(args, kCmd, setup.options.tp, work);
  setup.options.progress = setup.options.progress && s.root();
  if (s.cached_plans() > 0 && s.root())
    log::info(kCmd, ": ", s.cached_plans(), " plan(s) already scored in ", args.get("out"));
  CostInputs cost;
  cost.tp = setup.options.tp;
  cost.hidden = s.config().hidden_size;
  cost.link = setup.link_measured ? s.measure_link() : setup.link;
  cost.overlap = setup.overlap;
  cost.phases = s.profile(setup.repeat, cost.link);
  PlanSearchResult r = plan_search(
      [&](const std::string& p) { return s.quality(p); }, s.config(), cost, setup.options,
      [&](const std::string& p, const std::string& t) { return s.task_accuracy(p, t); });
  if (setup.max_drafts > 0)
    choose_self_speculation(
        r, cost, [&](const std::string& p, int e) { return s.draft_acceptance(p, e); },
        setup.max_drafts, work.batch, work.generate, setup.options.progress);
  if (s.distributed() && !args.has("no-measure")) {
    measure_front(s, r, setup.repeat, setup.options.progress);
    choose_measured(r);
  }
  if (!s.root()) return 0;
  std::printf("%s: tp %d over %s%s; workload %s (prompt, new tokens, batch)\n",
              args.get("checkpoint").c_str(), cost.tp, cost.link.to_string().c_str(),
              setup.link_measured ? " (measured)" : "", work.to_string().c_str());
  std::fputs(plan_search_table(r).c_str(), stdout);
  nlohmann::json j = plan_search_json(r);
  j["inputs"] = inputs_json(args, cost, setup, s);
  const std::string out = args.get("out");
  write_file_atomic(out + "/search.json", j.dump(2) + "\n");
  write_file_atomic(out + "/front.svg", render_svg(plan_search_chart(
                                            r, cat(args.get("checkpoint"), " at tp ", cost.tp))));
  std::printf("wrote %s/search.json and %s/front.svg (%d plan(s) scored, %d from the cache)\n",
              out.c_str(), out.c_str(), s.scored_plans(), s.cached_plans());
  write_recovery_files(args, r, s.config().max_position_embeddings);
  return 0;
}

}  // namespace

int cmd_plan(int argc, char** argv, int first) {
  return run_subcommand(
      "strata plan",
      "usage: strata plan <command> [options]\n\n"
      "Layer plans for a deployment:\n"
      "  search  the fastest plan within a perplexity budget: the front of speed against "
      "quality\n",
      {{"search", plan_search_cmd}}, argc, argv, first);
}

}  // namespace strata::cli
