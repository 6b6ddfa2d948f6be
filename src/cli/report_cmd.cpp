// strata report: the HTML page comparing runs and evaluations (train/report.h),
// and the charts as PNG files with --png.
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "train/report.h"

namespace strata::cli {

int cmd_report(int argc, char** argv, int first) {
  namespace fs = std::filesystem;
  Args args("strata report",
            "Writes one self-contained HTML page (inline SVG charts, no script, nothing fetched) "
            "comparing training runs and evaluations: loss, validation loss, learning rate, "
            "throughput and gradient norm over steps with a line per run; LayerSkip's per-exit "
            "losses; task metrics logged in training; the results of strata eval --out files as "
            "tables and, where they have several exits, as charts by exit layer; and the runs' "
            "recipes side by side with the settings that differ first. Open it in any browser.");
  args.positionals("run_dir", "run directories (each with metrics.jsonl; recipe.toml is shown)")
      .repeated("eval", "[LABEL=]FILE",
                "a strata eval --out file (strata or lm-eval layout) to tabulate; may repeat")
      .option("out", "FILE", "the HTML file to write", "report.html")
      .flag("png",
            "also write each chart as a PNG next to the page (OUT minus .html + "
            "_<chart>.png), drawn without a browser");
  if (!args.parse(argc, argv, first)) return 0;
  std::vector<RunLog> runs;
  for (const std::string& d : args.get_all("run_dir")) {
    runs.push_back(load_run_log(d));
    for (const std::string& w : runs.back().warnings) log::warn(w);
  }
  std::vector<EvalLog> evals;
  for (const std::string& e : args.get_all("eval")) evals.push_back(load_eval_log(e));
  std::string command = "strata report";
  for (int i = first; i < argc; ++i) command += std::string(" ") + argv[i];
  const Report rep = build_report(runs, evals, command);
  const std::string out = args.get("out");
  write_file_atomic(out, rep.html);
  std::printf("wrote %s: %zu run(s), %zu evaluation file(s), %zu chart(s)\n", out.c_str(),
              runs.size(), evals.size(), rep.charts.size());
  if (args.has("png")) {
    std::string base = out;
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".html") == 0)
      base.resize(base.size() - 5);
    for (const ReportChart& c : rep.charts) {
      const std::string path = base + "_" + c.id + ".png";
      write_file_atomic(path, render_png(c.chart));
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace strata::cli
