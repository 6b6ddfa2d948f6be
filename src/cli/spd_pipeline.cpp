// `strata spd <recipe.toml>`: the SPD paper's Algorithm 1 on a standard
// checkpoint. Sensitivity of every block at the degree on calibration
// windows; the N_spd least sensitive blocks classified ISB / SB / ESB by the
// thresholds; zero-shot for ISBs, block-to-block distillation for SBs, head
// grouping then distillation for ESBs; the SPD checkpoint and a report
// (perplexity and tasks against the budget for zero-shot, +B2B and +HG).
// Every result lands in the output directory as it is made, so a rerun
// resumes where the last one stopped (per block for the distillations).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/sha256.h"
#include "core/svg_plot.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "model/kinds/kinds.h"
#include "parallel/grid.h"
#include "train/recipe.h"
#include "train/spd.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

const char* kUsage =
    "usage: strata spd <recipe.toml> [--set section.key=value ...] [--threads N] [--quiet]\n"
    "                  [--dry-run [--plan-memory BYTES]]\n"
    "       strata spd --help-recipe\n\n"
    "Runs the SPD paper's Algorithm 1 on the standard checkpoint the recipe names:\n"
    "  1. sensitivity S_k of every block at spd.degree on calibration windows\n"
    "  2. the spd.budget least sensitive blocks, classified by S: ISB (S <= tau1),\n"
    "     SB (tau1 < S <= tau2), ESB (S > tau2)\n"
    "  3. ISB: zero-shot; SB: block-to-block distillation; ESB: head grouping, then\n"
    "     distillation (each block alone, on the original model's block inputs)\n"
    "  4. <out_dir>/spd.h5 (the SPD checkpoint), report.md, report.json, sensitivity.svg,\n"
    "     budget.svg: perplexity and tasks against the budget for zero-shot, +B2B, +HG\n"
    "Results are kept in <out_dir> as they are made: a rerun resumes (per block).\n"
    "Under mpirun -np N the distillations are spread over the N processes.\n\n"
    "options:\n"
    "  --set section.key=value  override a recipe key (repeatable)\n"
    "  --threads N              compute threads per process (0: all cores)\n"
    "  --quiet                  no progress lines\n"
    "  --dry-run                check the recipe and the checkpoint's shape, print the memory\n"
    "                           each stage needs; run nothing, write nothing\n"
    "  --plan-memory BYTES      with --dry-run: check against a device of that size (e.g. 80GB)\n"
    "                           instead of this machine; spd.config stands in for a checkpoint\n"
    "                           that is not here\n"
    "  --help-recipe            list every recipe key with its default\n";

std::vector<KeySpec> spd_schema() {
  using K = KeyType;
  return {
      {"spd.checkpoint", K::String, "", "standard checkpoint to convert", true},
      {"spd.config", K::String, "",
       "Hugging Face config.json of the checkpoint's model, for --dry-run --plan-memory where "
       "the checkpoint is not on this machine"},
      {"spd.degree", K::Int, "2", "tensor-parallel degree g whose attention sync is dropped"},
      {"spd.budget", K::Int, "-1", "N_spd: blocks in SPD (-1: spd.budget_percent of the layers)"},
      {"spd.budget_percent", K::Float, "100", "the budget as a share of the layers"},
      {"spd.tau1", K::Float, "0.05", "ISB threshold: S <= tau1 runs zero-shot"},
      {"spd.tau2", K::Float, "10", "ESB threshold: S > tau2 gets head grouping"},
      {"spd.out_dir", K::String, "", "where the checkpoint, report and partial results go", true},
      {"spd.seed", K::Int, "1", "seed of the calibration draw, shuffles and grouping starts"},
      {"calibration.text", K::String, "", "calibration text file (the training corpus)", true},
      {"calibration.limit_bytes", K::Int, "0", "read at most this much of it (0: all)"},
      {"calibration.samples", K::Int, "128", "windows drawn at random offsets"},
      {"calibration.seq_len", K::Int, "256", "tokens per window"},
      {"calibration.batch_size", K::Int, "8", "windows per forward pass (scan, capture)"},
      {"calibration.capture_memory", K::String, "\"8GB\"",
       "host memory for the captured block inputs and outputs the distillations train on: "
       "blocks are captured as many at a time as fit (at least one)"},
      {"b2b.lr", K::Float, "5e-5", "AdamW learning rate (constant; no weight decay)"},
      {"b2b.epochs", K::Int, "10", "passes over the calibration windows"},
      {"b2b.batch_size", K::Int, "1", "windows per optimizer step"},
      {"hg.restarts", K::Int, "16", "random starts of the anticlustering"},
      {"report.text", K::String, "", "held-out text for perplexity (\"\": none)"},
      {"report.limit_bytes", K::Int, "20000", "read at most this much of it (0: all)"},
      {"report.tasks", K::StringList, "[]", "eval tasks (eval/<name>.toml) scored per stage"},
      {"report.task_limit", K::Int, "0", "examples per task (0: all)"},
      {"report.task_budgets", K::StringList, "[]",
       "budgets (block counts) whose tasks are scored as well ([]: 0 and N_spd)"},
      {"report.ablation", K::Bool, "true",
       "also distil ESBs without head grouping and sweep every budget for zero-shot, +B2B, +HG"},
  };
}

enum class Cls { Isb, Sb, Esb };
const char* cls_name(Cls c) { return c == Cls::Isb ? "ISB" : c == Cls::Sb ? "SB" : "ESB"; }

// A distillation job: block `layer`, with head grouping first or not.
struct Job {
  int layer;
  bool hg;
  std::string name() const { return cat("block_", layer, hg ? "_hg" : "_b2b"); }
};
struct JobResult {
  // The block's tensors after distillation stay in <out_dir>/blocks/<job>.f32
  // (read back when a variant is assembled), not in memory.
  nlohmann::json info;  // mse before/after, steps, seconds, head order
};

std::string hex_of(const std::string& bytes) { return sha256_hex(bytes).substr(0, 16); }

std::string read_or_empty(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  return read_file(path, "strata spd:");
}

// A result file of an earlier run; one line naming it when it does not parse.
nlohmann::json parse_saved(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception&) {
    fail(cat(path, ": not a readable result of an earlier run (remove it to recompute)"));
  }
}

int int_arg(const std::string& s, const char* what) {
  int v = 0;
  STRATA_CHECK(parse_int(s, &v), "strata spd: ", what, ": expected an integer, got '", s, "'");
  return v;
}

}  // namespace

std::string spd_report_markdown(const nlohmann::json& rep) {
  std::string o;
  const int L = rep.at("layers").get<int>();
  o += cat("# SPD report: ", rep.at("checkpoint").get<std::string>(), ", degree ",
           rep.at("degree").get<int>(), ", budget ", rep.at("budget").get<int>(), " of ", L,
           " blocks\n\n");
  o += cat("Calibration: ", rep["calibration"]["samples"].get<int>(), " windows of ",
           rep["calibration"]["seq_len"].get<int>(), " tokens from ",
           rep["calibration"]["text"].get<std::string>(), "; tau1 = ", rep["tau1"].get<double>(),
           ", tau2 = ", rep["tau2"].get<double>(), ".\n\n## Sensitivity\n\n");
  o += "| block | ppl, blocks k..L-1 in SPD | S_k | class | rank | in SPD "
       "|\n|---|---|---|---|---|---|\n";
  for (const auto& b : rep.at("blocks"))
    o += cat("| ", b["layer"].get<int>(), " | ", fixed(b["ppl_blocks_from"].get<double>(), 4),
             " | ", fixed(b["sensitivity"].get<double>(), 5), " | ", b["class"].get<std::string>(),
             " | ", b["rank"].get<int>(), " | ", b["selected"].get<bool>() ? "yes" : "no", " |\n");
  o += "\n## Distillations\n\n| block | head grouping | MSE zero-shot | MSE distilled | steps | "
       "seconds | KV-head order |\n|---|---|---|---|---|---|---|\n";
  for (const auto& j : rep.at("jobs"))
    o += cat("| ", j["layer"].get<int>(), " | ", j["head_grouping"].get<bool>() ? "yes" : "no",
             " | ", j["mse_zero_shot"].get<double>(), " | ", j["mse_distilled"].get<double>(),
             " | ", j["steps"].get<int64_t>(), " | ", fixed(j["seconds"].get<double>(), 1), " | ",
             j.contains("head_order") ? j["head_order"].dump() : "-", " |\n");
  // Perplexity against the budget, one column per variant.
  std::vector<std::string> variants;
  for (const auto& row : rep.at("sweep")) {
    const std::string v = row["variant"].get<std::string>();
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  const bool text = !rep.at("sweep").empty() && rep["sweep"][0].contains("ppl");
  o += cat("\n## Perplexity against the budget (", text ? "held-out text" : "calibration windows",
           ")\n\n| blocks in SPD | % |");
  for (const auto& v : variants) o += " " + v + " |";
  o += "\n|---|---|";
  for (size_t k = 0; k < variants.size(); ++k) o += "---|";
  o += "\n";
  for (int n = 0; n <= rep.at("budget").get<int>(); ++n) {
    std::string line = cat("| ", n, " | ", fixed(100.0 * n / L, 0), " |");
    bool any = false;
    for (const auto& v : variants) {
      std::string cell = " |";
      for (const auto& row : rep["sweep"])
        if (row["n"].get<int>() == n && (row["variant"] == v || n == 0)) {
          cell = " " + fixed(row[text ? "ppl" : "calibration_ppl"].get<double>(), 4) + " |";
          any = true;
        }
      line += cell;
    }
    if (any) o += line + "\n";
  }
  // Tasks where they were scored.
  bool header = false;
  for (const auto& row : rep.at("sweep")) {
    if (!row.contains("tasks")) continue;
    if (!header) {
      o += "\n## Tasks\n\n| blocks in SPD | variant |";
      for (auto it = row["tasks"].begin(); it != row["tasks"].end(); ++it)
        o += cat(" ", it.key(), " (", it.value()["metric"].get<std::string>(), ") |");
      o += "\n|---|---|";
      for (size_t k = 0; k < row["tasks"].size(); ++k) o += "---|";
      o += "\n";
      header = true;
    }
    o += cat("| ", row["n"].get<int>(), " | ",
             row["n"].get<int>() == 0 ? "standard" : row["variant"].get<std::string>(), " |");
    for (auto it = row["tasks"].begin(); it != row["tasks"].end(); ++it)
      o += " " + fixed(it.value()["value"].get<double>(), 4) + " |";
    o += "\n";
  }
  const auto& st = rep.at("stages");
  o += cat("\n## Time\n\nsensitivity ", fixed(st["sensitivity_seconds"].get<double>(), 0),
           " s, distillation ", fixed(st["distillation_seconds"].get<double>(), 0),
           " s, evaluation ", fixed(st["evaluation_seconds"].get<double>(), 0),
           " s\n\nSPD checkpoint: ", rep["spd_checkpoint"].get<std::string>(), " (plan ",
           rep["plan"].get<std::string>(), ")\n");
  return o;
}

int spd_pipeline(int argc, char** argv, int first) {
  RecipeCommand rc;
  bool quiet = false, dry_run = false;
  int threads = 0;
  int64_t device_bytes = 0;
  auto own = [&](const std::string& a, int& i) {
    if (a == "--quiet") return quiet = true;
    if (a == "--dry-run") return dry_run = true;
    if (a == "--plan-memory") {
      STRATA_USAGE_CHECK(i + 1 < argc, "strata spd: --plan-memory needs a value");
      device_bytes = parse_bytes(argv[++i], "--plan-memory");
      STRATA_USAGE_CHECK(device_bytes > 0, "strata spd: --plan-memory must be > 0");
      return true;
    }
    if (a != "--threads") return false;
    STRATA_CHECK(i + 1 < argc, "strata spd: --threads needs a value");
    threads = int_arg(argv[++i], "--threads");
    return true;
  };
  if (!parse_recipe_command("strata spd", kUsage, spd_schema(), argc, argv, first, rc, own))
    return 0;
  STRATA_USAGE_CHECK(dry_run || device_bytes == 0, "strata spd: --plan-memory goes with --dry-run");
  const Recipe r = Recipe::load(rc.recipe, rc.sets, spd_schema());
  apply_threads(threads);
  ProcessGrid grid = make_grid(1, 0);
  Communicator& world = *grid.world;
  const bool root = grid.is_root(), progress = !quiet && root;
  auto say = [&](const std::string& s) {
    if (progress) std::fprintf(stderr, "spd: %s\n", s.c_str());
  };

  // ---- settings, checked before any work
  const std::string ckpt = r.get_string("spd.checkpoint");
  const int g = int(r.get_int("spd.degree"));
  if (g < 2) r.fail("spd.degree", cat("must be at least 2, got ", g));
  const double tau1 = r.get_float("spd.tau1"), tau2 = r.get_float("spd.tau2");
  if (!(tau1 < tau2)) r.fail("spd.tau2", cat("must exceed spd.tau1 (", tau1, "), got ", tau2));
  const uint64_t seed = uint64_t(r.get_int("spd.seed"));
  const int n_cal = int(r.get_int("calibration.samples"));
  const int seq = int(r.get_int("calibration.seq_len"));
  const int cal_batch = int(r.get_int("calibration.batch_size"));
  if (n_cal < 1) r.fail("calibration.samples", "must be at least 1");
  if (cal_batch < 1) r.fail("calibration.batch_size", "must be at least 1");
  spd::DistillConfig dc;
  dc.lr = r.get_float("b2b.lr");
  dc.epochs = int(r.get_int("b2b.epochs"));
  dc.batch = int(r.get_int("b2b.batch_size"));
  dc.progress = progress;
  if (!(dc.lr > 0)) r.fail("b2b.lr", "must be positive");
  if (dc.epochs < 0) r.fail("b2b.epochs", "must be at least 0");
  if (dc.batch < 1) r.fail("b2b.batch_size", "must be at least 1");
  const int restarts = int(r.get_int("hg.restarts"));
  if (restarts < 1) r.fail("hg.restarts", "must be at least 1");
  const bool ablation = r.get_bool("report.ablation");
  const std::string out_dir = r.get_string("spd.out_dir");
  for (const std::string& t : r.get_strings("report.tasks"))
    if (t != "all" && !fs::exists("eval/" + t + ".toml"))
      r.fail("report.tasks", cat("no task '", t, "' (eval/", t, ".toml; run from the repository)"));

  const int64_t capture_bytes =
      [&] {
        try {
          return parse_bytes(r.get_string("calibration.capture_memory"),
                             "calibration.capture_memory");
        } catch (const Error& e) {
          r.fail("calibration.capture_memory", e.what());
        }
      }();
  // The model's shape first (the checkpoint's header; spd.config when
  // planning without the checkpoint), checked before anything is allocated.
  LlamaConfig shape;
  if (fs::exists(ckpt)) {
    const CheckpointReader reader(ckpt);
    const CheckpointInfo head = read_checkpoint_info(reader);
    STRATA_CHECK(head.plan.plain(), ckpt, ": runs plan '", head.plan.to_string(),
                 "'; strata spd needs a standard model");
    shape = head.config;
  } else {
    if (!(dry_run && device_bytes > 0) || r.get_string("spd.config").empty())
      r.fail("spd.checkpoint", cat("no such checkpoint: ", ckpt,
                                   dry_run && device_bytes > 0
                                       ? " (to plan without it, give the model's shape in spd.config)"
                                       : ""));
    shape = read_model_config(r, "spd.config");
    say(cat("plan: ", ckpt, " is not on this machine; the model's shape comes from ",
            r.get_string("spd.config")));
  }
  shape.finalize(ckpt);
  const int L = shape.num_hidden_layers;
  if (seq < 1 || seq > shape.max_position_embeddings)
    r.fail("calibration.seq_len",
           cat("must be 1..", shape.max_position_embeddings, " (the model's context), got ", seq));
  try {  // the degree against the heads and the MLP
    check_spd_degree(shape, g, 1, spd_plan(L, std::vector<bool>(size_t(L), true), g));
  } catch (const Error& e) {
    r.fail("spd.degree", cat(e.what(), " of ", ckpt));
  }
  int budget = int(r.get_int("spd.budget"));
  if (budget < 0) {
    const double pct = r.get_float("spd.budget_percent");
    if (pct < 0 || pct > 100) r.fail("spd.budget_percent", cat("must be 0..100, got ", pct));
    budget = int(std::lround(pct / 100.0 * L));
  }
  if (budget > L) r.fail("spd.budget", cat("must be at most the ", L, " layers, got ", budget));
  std::vector<int> task_budgets;
  for (const std::string& s : r.get_strings("report.task_budgets")) {
    int b = 0;
    if (!parse_int(s, &b))
      r.fail("report.task_budgets", cat("expected block counts, got '", s, "'"));
    if (b < 0 || b > budget)
      r.fail("report.task_budgets", cat("budget ", b, " is outside 0..", budget));
    task_budgets.push_back(b);
  }
  if (task_budgets.empty()) task_budgets = {0, budget};
  for (const char* key : {"calibration.text", "report.text"}) {
    const std::string path = r.get_string(key);
    if (path.empty() || fs::exists(path)) continue;
    if (!(dry_run && device_bytes > 0)) r.fail(key, cat("no such file: ", path));
    say(cat("plan: ", key, " ", path, " is not on this machine"));
  }
  // Memory (strata spd runs on the CPU backend, load_model's default).
  const spd::PipelineMemory pm =
      spd::pipeline_memory(shape, g, n_cal, seq, cal_batch, dc.batch, budget, capture_bytes);
  const std::string device = "cpu";
  const MemoryEstimate& need = pm.memory;
  const std::string what = cat(rc.recipe, ": strata spd on ", ckpt, " (",
                               fixed(double(shape.num_parameters()) / 1e9, 2), "B parameters)");
  const std::string hint =
      "lower calibration.capture_memory (blocks are then captured fewer at a time), "
      "calibration.batch_size or calibration.samples";
  if (dry_run) {
    std::fputs(r.to_toml().c_str(), stdout);
    std::printf("# memory per process (estimate): %s (%d block%s captured per pass over the %d "
                "calibration windows)\n",
                need.to_string().c_str(), pm.capture_layers, pm.capture_layers == 1 ? "" : "s",
                n_cal);
    if (device_bytes > 0) {
      if (need.total() > device_bytes)
        fail_one_line(what, " needs ", human_bytes(double(need.total())),
                      " per process, more than ", human_bytes(double(device_bytes)), "; ", hint);
      std::printf("# fits %s per process: %s to spare\n", human_bytes(double(device_bytes)).c_str(),
                  human_bytes(double(device_bytes - need.total())).c_str());
    } else {
      const MemoryLimit limit = ops::memory_available(device);
      check_memory(need, limit, 1, what, hint);
      if (limit.bytes >= 0)
        std::printf("# memory available: %s (%s)\n", human_bytes(double(limit.bytes)).c_str(),
                    limit.source.c_str());
    }
    return 0;
  }
  check_memory(need, ops::memory_available(device), processes_on_this_node(), what, hint);
  say(cat("memory: ", need.to_string(), " per process"));
  const int64_t runtime_rss = process_rss_bytes();  // the program's own, before the model

  CheckpointInfo info;
  std::unique_ptr<Model<float>> model = load_model(ckpt, &info);
  Model<float>& m = *model;
  STRATA_CHECK(!info.tokenizer.empty(), ckpt, ": has no tokenizer");
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, ckpt);
  const LlamaConfig& cfg = m.config();
  STRATA_CHECK(cfg.num_hidden_layers == L, ckpt, ": changed while it was read");
  // Forward passes keep only the residual streams (and norm statistics): the
  // scan, the capture and the evaluations need no backward, and the same
  // kernels give the same numbers.
  m.set_recompute(Recompute::Full);
  const std::string cal_text =
      read_text_sample(r.get_string("calibration.text"), r.get_int("calibration.limit_bytes"));
  std::string eval_text;
  if (!r.get_string("report.text").empty())
    eval_text = read_text_sample(r.get_string("report.text"), r.get_int("report.limit_bytes"));
  std::vector<int32_t> ids = tok.encode(cal_text);
  if (tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  STRATA_CHECK(ids.size() > size_t(seq), r.get_string("calibration.text"), ": ", ids.size(),
               " tokens, fewer than one calibration window of ", seq + 1);
  const std::vector<int32_t> windows = spd::calibration_windows(ids, n_cal, seq, seed);

  // Results of earlier runs are reused only for the same inputs and settings.
  const std::string fingerprint = hex_of(
      cat(fs::absolute(ckpt).string(), "|", fs::file_size(ckpt), "|", g, "|", n_cal, "|", seq, "|",
          seed, "|", hex_of(cal_text), "|", dc.lr, "|", dc.epochs, "|", dc.batch, "|", restarts));
  if (root) fs::create_directories(out_dir + "/blocks");
  world.barrier();
  const std::string stamp_path = out_dir + "/fingerprint";
  const std::string old_stamp = read_or_empty(stamp_path);
  if (!old_stamp.empty() && old_stamp != fingerprint + "\n")
    fail(cat(out_dir,
             ": holds results of other settings (checkpoint, degree, calibration or "
             "distillation); remove it or set spd.out_dir to a new directory"));
  if (root) write_file_atomic(stamp_path, fingerprint + "\n");
  nlohmann::json report = {
      {"recipe", rc.recipe},
      {"checkpoint", ckpt},
      {"degree", g},
      {"layers", L},
      {"tau1", tau1},
      {"tau2", tau2},
      {"budget", budget},
      {"calibration",
       {{"text", r.get_string("calibration.text")}, {"samples", n_cal}, {"seq_len", seq}}}};
  nlohmann::json stages = nlohmann::json::object();
  say(cat(ckpt, ": ", L, " layers; degree ", g, ", budget ", budget, " blocks; ", n_cal,
          " calibration windows of ", seq, " tokens; results in ", out_dir));

  // ---- 1. sensitivity (M^(k): blocks k..L-1 in SPD, zero-shot)
  Timer t_stage;
  std::vector<double> ppl_from(size_t(L) + 1), sens(size_t(L), 0.0);
  const std::string sens_path = out_dir + "/sensitivity.json";
  const std::string sens_saved = read_or_empty(sens_path);
  if (!sens_saved.empty()) {
    const nlohmann::json j = parse_saved(sens_saved, sens_path);
    ppl_from = j.at("ppl_from").get<std::vector<double>>();
    sens = j.at("sensitivity").get<std::vector<double>>();
    say("sensitivity: reusing " + sens_path);
  } else {
    for (int k = L; k >= 0; --k) {
      std::vector<bool> on(size_t(L), false);
      for (int l = k; l < L; ++l) on[size_t(l)] = true;
      m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
      ppl_from[size_t(k)] = spd::window_perplexity(m, windows, n_cal, seq, cal_batch);
      if (k < L)
        sens[size_t(k)] = (ppl_from[size_t(k)] - ppl_from[size_t(k) + 1]) / ppl_from[size_t(k) + 1];
      say(cat("sensitivity: blocks ", k, "..", L - 1, " in SPD: ppl ",
              fixed(ppl_from[size_t(k)], 4),
              k < L ? cat(", S_", k, " = ", fixed(sens[size_t(k)], 5)) : "", " (",
              fixed(t_stage.seconds(), 0), " s)"));
    }
    m.set_plan(info.plan);
    if (root)
      write_file_atomic(sens_path,
                        nlohmann::json({{"ppl_from", ppl_from}, {"sensitivity", sens}}).dump(2));
  }
  stages["sensitivity_seconds"] = t_stage.seconds();

  // ---- 2. ranking and classes
  std::vector<int> ranking(static_cast<size_t>(L));
  std::iota(ranking.begin(), ranking.end(), 0);
  std::stable_sort(ranking.begin(), ranking.end(),
                   [&](int a, int b) { return sens[size_t(a)] < sens[size_t(b)]; });
  std::vector<Cls> cls(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l)
    cls[size_t(l)] = sens[size_t(l)] <= tau1   ? Cls::Isb
                     : sens[size_t(l)] <= tau2 ? Cls::Sb
                                               : Cls::Esb;
  std::vector<int> selected(ranking.begin(), ranking.begin() + budget);
  nlohmann::json blocks = nlohmann::json::array();
  for (int l = 0; l < L; ++l)
    blocks.push_back(
        {{"layer", l},
         {"sensitivity", sens[size_t(l)]},
         {"ppl_blocks_from", ppl_from[size_t(l)]},
         {"class", cls_name(cls[size_t(l)])},
         {"rank", int(std::find(ranking.begin(), ranking.end(), l) - ranking.begin())},
         {"selected", std::find(selected.begin(), selected.end(), l) != selected.end()}});
  {
    std::string line;
    for (int l : ranking) line += cat(" ", l, "(", cls_name(cls[size_t(l)]), ")");
    say("ranking, least sensitive first:" + line);
  }

  // ---- 3. distillation jobs: SB -> B2B; ESB -> HG + B2B (and B2B alone for the ablation)
  std::vector<Job> jobs;
  for (int l : selected) {
    if (cls[size_t(l)] == Cls::Isb) continue;
    if (cls[size_t(l)] == Cls::Sb || ablation) jobs.push_back({l, false});
    if (cls[size_t(l)] == Cls::Esb) jobs.push_back({l, true});
  }
  t_stage = Timer();
  std::vector<JobResult> results(jobs.size());
  std::vector<bool> have(jobs.size(), false);
  auto weights_path = [&](size_t j) { return out_dir + "/blocks/" + jobs[j].name() + ".f32"; };
  auto layer_bytes = [&](int l) { return spd::layer_numel(m, l) * int64_t(sizeof(float)); };
  for (size_t j = 0; j < jobs.size(); ++j) {
    const std::string base = out_dir + "/blocks/" + jobs[j].name();
    const std::string js = read_or_empty(base + ".json");
    std::error_code ec;
    const auto size = fs::file_size(weights_path(j), ec);
    if (js.empty() || ec) continue;
    results[j].info = parse_saved(js, base + ".json");
    have[j] = int64_t(size) == layer_bytes(jobs[j].layer);
    if (have[j]) say("distillation: reusing " + base + ".json");
  }
  std::vector<int> todo_layers;
  for (size_t j = 0; j < jobs.size(); ++j)
    if (!have[j] && int(j) % world.size() == world.rank()) todo_layers.push_back(jobs[j].layer);
  std::sort(todo_layers.begin(), todo_layers.end());
  todo_layers.erase(std::unique(todo_layers.begin(), todo_layers.end()), todo_layers.end());
  // Teacher: the original model's block inputs and outputs, captured for as
  // many blocks at a time as calibration.capture_memory holds.
  for (size_t g0 = 0; g0 < todo_layers.size(); g0 += size_t(pm.capture_layers)) {
    const std::vector<int> group(
        todo_layers.begin() + ptrdiff_t(g0),
        todo_layers.begin() + ptrdiff_t(std::min(todo_layers.size(), g0 + size_t(pm.capture_layers))));
    m.set_plan(info.plan);
    if (todo_layers.size() > group.size())
      say(cat("capturing blocks ", nlohmann::json(group).dump(), " (", g0 + group.size(), " of ",
              todo_layers.size(), ")"));
    const std::vector<spd::BlockIO> io =
        spd::capture_blocks(m, windows, n_cal, seq, cal_batch, group);
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (have[j] || int(j) % world.size() != world.rank()) continue;
      const Job& job = jobs[j];
      const auto at = std::find(group.begin(), group.end(), job.layer);
      if (at == group.end()) continue;  // in another group
      const spd::BlockIO& bio = io[size_t(at - group.begin())];
      const std::vector<float> original = spd::layer_snapshot(m, job.layer);
      JobResult& res = results[j];
      Timer t_job;
      if (job.hg) {
        spd::HeadGrouping hg = spd::group_heads(m, job.layer, g, bio.x, n_cal, seq,
                                                seed + uint64_t(job.layer), restarts);
        spd::permute_heads(m, job.layer, hg.unit_order);
        res.info["head_order"] = hg.unit_order;
        res.info["head_groups"] = hg.groups;
        res.info["group_slice"] = hg.slice_of_group;
        res.info["head_distance"] = hg.distance;
        res.info["group_mlp_score"] = hg.score;
        res.info["spread_before"] = hg.spread_before;
        res.info["spread_after"] = hg.spread_after;
        say(cat("head grouping block ", job.layer, ": KV-head order ",
                nlohmann::json(hg.unit_order).dump(), ", within-group distance ",
                fixed(hg.spread_before, 3), " -> ", fixed(hg.spread_after, 3)));
      }
      std::vector<bool> on(size_t(L), false);
      on[size_t(job.layer)] = true;
      m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
      dc.seed = seed + 1000 + uint64_t(job.layer);
      say(cat("distilling block ", job.layer, job.hg ? " (after head grouping)" : "", " for ",
              dc.epochs, " epochs of ", n_cal, " windows"));
      const spd::DistillResult d = spd::distill_block(m, job.layer, bio, n_cal, seq, dc);
      res.info["mse_zero_shot"] = d.initial_mse;
      res.info["mse_distilled"] = d.final_mse;
      res.info["epoch_mse"] = d.epoch_mse;
      res.info["steps"] = d.steps;
      res.info["seconds"] = t_job.seconds();
      const std::vector<float> trained = spd::layer_snapshot(m, job.layer);
      spd::restore_layer(m, job.layer, original);
      m.set_plan(info.plan);
      say(cat("block ", job.layer, job.hg ? " hg+b2b" : " b2b", ": mse ", d.initial_mse, " -> ",
              d.final_mse, " (", fixed(t_job.seconds(), 0), " s)"));
      const std::string base = out_dir + "/blocks/" + job.name();
      write_file_atomic(base + ".f32", std::string(reinterpret_cast<const char*>(trained.data()),
                                                   trained.size() * sizeof(float)));
      write_file_atomic(base + ".json", res.info.dump(2));
      have[j] = true;
    }
  }
  if (world.size() > 1) {
    // Process 0 gets every job's result (its out_dir may be another
    // machine's), evaluates and writes; the others are done.
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int owner = int(j) % world.size();
      std::vector<float> w(size_t(spd::layer_numel(m, jobs[j].layer)), 0.f);
      if (world.rank() == owner) {
        const std::string bin = read_file(weights_path(j), "distilled block");
        STRATA_CHECK(bin.size() == w.size() * sizeof(float), weights_path(j), ": ", bin.size(),
                     " bytes, not the block's ", w.size() * sizeof(float));
        std::memcpy(w.data(), bin.data(), bin.size());
      }
      world.broadcast(w.data(), int64_t(w.size()), owner);
      std::string info = results[j].info.dump();
      world.broadcast_bytes(info, owner);
      results[j].info = nlohmann::json::parse(info);
      if (root && world.rank() != owner && !fs::exists(weights_path(j)))
        write_file_atomic(weights_path(j), std::string(reinterpret_cast<const char*>(w.data()),
                                                       w.size() * sizeof(float)));
    }
    world.barrier();
    if (!root) return 0;
  }
  stages["distillation_seconds"] = t_stage.seconds();

  // ---- 4. models per variant and budget, evaluated
  // variant 0: zero-shot; 1: + B2B (SBs and ESBs); 2: + HG (ESBs grouped first).
  const char* variant_names[] = {"zero-shot", "+B2B", "+HG"};
  auto job_of = [&](int l, bool hg) {
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].layer == l && jobs[j].hg == hg) return int(j);
    return -1;
  };
  auto treatment = [&](int l, int variant) -> int {  // job index, or -1: original weights
    if (variant == 0 || cls[size_t(l)] == Cls::Isb) return -1;
    if (cls[size_t(l)] == Cls::Sb) return job_of(l, false);
    return variant == 2 ? job_of(l, true) : job_of(l, false);
  };
  // Each layer holds its original weights or one job's; a variant changes
  // only the layers that differ from the last one (read back from the
  // checkpoint or the job's file), so no copy of the model is kept.
  std::vector<int> current(size_t(L), -1);  // -1: the checkpoint's weights
  const CheckpointReader original(ckpt);
  auto apply = [&](int l, int j) {
    if (current[size_t(l)] == j) return;
    if (j >= 0) {
      const std::string bin = read_file(weights_path(size_t(j)), "distilled block");
      STRATA_CHECK(int64_t(bin.size()) == layer_bytes(l), weights_path(size_t(j)), ": ",
                   bin.size(), " bytes, not the block's ", layer_bytes(l));
      std::vector<float> w(bin.size() / sizeof(float));
      std::memcpy(w.data(), bin.data(), bin.size());
      spd::restore_layer(m, l, w);
    } else {
      const auto& P = m.layout().layers[size_t(l)];
      std::vector<int> tensors;
      for (int t = P.input_norm; t <= P.down; ++t) tensors.push_back(t);
      read_tensor_parts(
          original, "params", m.layout(), tensors, [&](int t) { return m.param(t); },
          &m.backend());
    }
    current[size_t(l)] = j;
  };
  auto assemble = [&](int n, int variant) {
    std::vector<bool> on(size_t(L), false);
    std::vector<int> want(size_t(L), -1);
    for (int k = 0; k < n; ++k) {
      const int l = ranking[size_t(k)];
      on[size_t(l)] = true;
      want[size_t(l)] = treatment(l, variant);
    }
    for (int l = 0; l < L; ++l) apply(l, want[size_t(l)]);
    m.set_plan(LayerPlan::parse(spd_plan(L, on, g), L));
  };
  EvalOptions eo;
  eo.tasks = r.get_strings("report.tasks");
  eo.limit = r.get_int("report.task_limit");
  eo.progress = false;
  t_stage = Timer();
  std::vector<int> variants = {0};
  if (ablation) {
    variants.push_back(1);
    variants.push_back(2);
  } else {
    variants.push_back(2);
  }
  nlohmann::json sweep = nlohmann::json::array();
  for (int v : variants) {
    for (int n = 0; n <= budget; ++n) {
      const bool tasks =
          std::find(task_budgets.begin(), task_budgets.end(), n) != task_budgets.end();
      if (!ablation && n != 0 && n != budget && !tasks) continue;
      if (v > 0 && n == 0) continue;  // the standard model is variant 0's n = 0
      assemble(n, v);
      nlohmann::json row = {{"variant", variant_names[v]},
                            {"n", n},
                            {"percent", 100.0 * n / L},
                            {"plan", m.plan().to_string()}};
      row["calibration_ppl"] = spd::window_perplexity(m, windows, n_cal, seq, cal_batch);
      if (!eval_text.empty())
        row["ppl"] =
            text_perplexity(m, tok, eval_text, r.get_string("report.text"), 0, 0, 8, {L}, false)
                .back()
                .ppl();
      if (tasks && !eo.tasks.empty()) {
        nlohmann::json tj = nlohmann::json::object();
        const std::vector<std::vector<TaskResult>> res = evaluate_tasks(m, tok, eo);
        for (const TaskResult& t : res.back()) {
          // Text tasks report bits per byte, choice tasks accuracy.
          const Metric* mt = &t.metrics.at(0);
          for (const Metric& x : t.metrics)
            if (x.name == "bits_per_byte" || (x.name == "acc" && mt->name != "bits_per_byte"))
              mt = &x;
          tj[t.task] = {
              {"metric", mt->name}, {"value", mt->value}, {"stderr", mt->stderr_}, {"n", t.n}};
        }
        row["tasks"] = tj;
      }
      say(cat("eval ", variant_names[v], " with ", n, " blocks in SPD: calibration ppl ",
              fixed(row["calibration_ppl"].get<double>(), 4),
              row.contains("ppl") ? cat(", text ppl ", fixed(row["ppl"].get<double>(), 4)) : "",
              " (", fixed(t_stage.seconds(), 0), " s)"));
      sweep.push_back(row);
    }
  }
  stages["evaluation_seconds"] = t_stage.seconds();

  // ---- 5. the SPD checkpoint: the full algorithm at the budget
  assemble(budget, 2);
  nlohmann::json spd_meta = {
      {"degree", g}, {"budget", budget}, {"tau1", tau1}, {"tau2", tau2}, {"source", ckpt}};
  nlohmann::json meta_blocks = nlohmann::json::array();
  for (int k = 0; k < budget; ++k) {
    const int l = ranking[size_t(k)];
    const int j = treatment(l, 2);
    nlohmann::json b = {{"layer", l},
                        {"class", cls_name(cls[size_t(l)])},
                        {"sensitivity", sens[size_t(l)]},
                        {"treatment", cls[size_t(l)] == Cls::Isb  ? "zero-shot"
                                      : cls[size_t(l)] == Cls::Sb ? "b2b"
                                                                  : "hg+b2b"}};
    if (j >= 0) {
      const nlohmann::json& ji = results[size_t(j)].info;
      b["mse_zero_shot"] = ji.at("mse_zero_shot");
      b["mse_distilled"] = ji.at("mse_distilled");
      if (ji.contains("head_order")) b["head_order"] = ji.at("head_order");
    }
    meta_blocks.push_back(b);
  }
  spd_meta["blocks"] = meta_blocks;
  const std::string ckpt_out = out_dir + "/spd.h5";
  if (root) {
    nlohmann::json state = info.state.is_object() ? info.state : nlohmann::json::object();
    state["spd"] = spd_meta;
    save_model(ckpt_out, m, info.tokenizer, state);
  }

  // ---- 6. report
  report["blocks"] = blocks;
  report["ranking"] = ranking;
  report["jobs"] = nlohmann::json::array();
  for (size_t j = 0; j < jobs.size(); ++j) {
    nlohmann::json ji = results[j].info;
    ji["layer"] = jobs[j].layer;
    ji["head_grouping"] = jobs[j].hg;
    report["jobs"].push_back(ji);
  }
  report["sweep"] = sweep;
  report["stages"] = stages;
  report["spd_checkpoint"] = ckpt_out;
  report["plan"] = m.plan().to_string();
  if (root) {
    write_file_atomic(out_dir + "/report.json", report.dump(2) + "\n");
    // Sensitivity plot and the budget curves.
    SvgChart sc;
    sc.title = cat("SPD sensitivity at degree ", g, " (", ckpt, ")");
    sc.x_label = "block";
    sc.y_label = "S_k (relative perplexity change)";
    SvgSeries ss;
    ss.label = "S_k";
    for (int l = 0; l < L; ++l) ss.points.push_back({double(l), sens[size_t(l)]});
    sc.series = {ss};
    sc.hlines = {{"tau1", tau1}};
    write_file_atomic(out_dir + "/sensitivity.svg", render_svg(sc));
    SvgChart bc;
    bc.title = cat("SPD at degree ", g, ": perplexity against the budget");
    bc.x_label = "blocks in SPD (least sensitive first)";
    bc.y_label = eval_text.empty() ? "calibration perplexity" : "perplexity";
    bc.log_y = true;
    for (int v : variants) {
      SvgSeries s;
      s.label = variant_names[v];
      for (const auto& row : sweep)
        if (row["variant"] == variant_names[v] || (row["n"] == 0 && v > 0))
          s.points.push_back({row["n"].get<double>(),
                              row[eval_text.empty() ? "calibration_ppl" : "ppl"].get<double>()});
      std::sort(s.points.begin(), s.points.end());
      bc.series.push_back(s);
    }
    write_file_atomic(out_dir + "/budget.svg", render_svg(bc));
    write_file_atomic(out_dir + "/report.md", spd_report_markdown(report));
  }
  if (root) std::fputs(spd_report_markdown(report).c_str(), stdout);
  const int64_t peak = peak_rss_bytes(), estimate = need.total() + runtime_rss;
  if (peak > 0)
    say(cat("memory: peak resident ", human_bytes(double(peak)), "; estimate ",
            human_bytes(double(estimate)), " (", human_bytes(double(runtime_rss)),
            " before the model + ", human_bytes(double(need.total())), "), ",
            fixed(100.0 * (double(estimate) / double(peak) - 1), 1), "% of the peak"));
  return 0;
}

}  // namespace strata::cli
