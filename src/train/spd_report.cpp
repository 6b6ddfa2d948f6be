// `strata spd`: the report of the pipeline (spd_pipeline.h): report.json,
// the sensitivity and budget plots, and report.md (also printed).
#include <algorithm>
#include <cstdio>

#include "core/file.h"
#include "core/svg_plot.h"
#include "core/text.h"
#include "train/spd_pipeline_state.h"

namespace strata {

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

}  // namespace strata

namespace strata::spd_pipeline {

void write_report(State& s) {
  const SpdConfig& c = s.c;
  nlohmann::json& report = s.report;
  report["blocks"] = s.blocks;
  report["ranking"] = s.ranking;
  report["jobs"] = nlohmann::json::array();
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    nlohmann::json ji = s.results[j];
    ji["layer"] = s.jobs[j].layer;
    ji["head_grouping"] = s.jobs[j].hg;
    report["jobs"].push_back(ji);
  }
  report["sweep"] = s.sweep;
  report["stages"] = s.stages;
  report["spd_checkpoint"] = c.out_dir + "/spd.h5";
  report["plan"] = s.model->plan().to_string();
  write_file_atomic(c.out_dir + "/report.json", report.dump(2) + "\n");
  // The sensitivity plot and the budget curves.
  SvgChart sc;
  sc.title = cat("SPD sensitivity at degree ", c.degree, " (", c.checkpoint, ")");
  sc.x_label = "block";
  sc.y_label = "S_k (relative perplexity change)";
  SvgSeries ss;
  ss.label = "S_k";
  for (int l = 0; l < s.L; ++l) ss.points.push_back({double(l), s.sens[size_t(l)]});
  sc.series = {ss};
  sc.hlines = {{"tau1", c.tau1}};
  write_file_atomic(c.out_dir + "/sensitivity.svg", render_svg(sc));
  SvgChart bc;
  bc.title = cat("SPD at degree ", c.degree, ": perplexity against the budget");
  bc.x_label = "blocks in SPD (least sensitive first)";
  bc.y_label = s.eval_text.empty() ? "calibration perplexity" : "perplexity";
  bc.log_y = true;
  for (int v : s.variants) {
    SvgSeries series;
    series.label = kVariantNames[v];
    for (const auto& row : s.sweep)
      if (row["variant"] == kVariantNames[v] || (row["n"] == 0 && v > 0))
        series.points.push_back(
            {row["n"].get<double>(),
             row[s.eval_text.empty() ? "calibration_ppl" : "ppl"].get<double>()});
    std::sort(series.points.begin(), series.points.end());
    bc.series.push_back(series);
  }
  write_file_atomic(c.out_dir + "/budget.svg", render_svg(bc));
  const std::string md = spd_report_markdown(report);
  write_file_atomic(c.out_dir + "/report.md", md);
  std::fputs(md.c_str(), stdout);
}

}  // namespace strata::spd_pipeline
