// The run report (train/report.h) and the chart back ends (core/svg_plot.h):
// metrics.jsonl and eval-file parsing with their errors, what the page holds,
// and the PNG drawing read back with an independent decoder (png_reader.h).
// The page in a real browser: tests/report_chromium.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/svg_plot.h"
#include "png_reader.h"
#include "testing.h"
#include "train/report.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A run directory: `steps` log lines (loss falling), validation every 4th,
// per-exit losses when `exits`, and a recipe.
std::string make_run(const TempDir& dir, const std::string& name, int steps, int exits, double lr,
                     const std::string& extra = "") {
  const std::string d = dir / name;
  std::string lines;
  for (int s = 1; s <= steps; ++s) {
    nlohmann::json j = {{"step", s * 10},       {"loss", 8.0 - 0.3 * s}, {"lr", lr},
                        {"grad_norm", 1.0 / s}, {"tokens", s * 4096},    {"tokens_per_s", 1000 + s},
                        {"elapsed_s", 2.0 * s}};
    if (exits) {
      for (int e = 1; e <= exits; ++e) j["exit_loss"][std::to_string(e)] = 9.0 - 0.2 * s - 0.1 * e;
    }
    lines += j.dump() + "\n";
    if (s % 4 == 0)
      lines += nlohmann::json{{"step", s * 10}, {"val_loss", 7.5 - 0.2 * s}}.dump() + "\n";
  }
  write(d + "/metrics.jsonl", lines + extra);
  write(d + "/recipe.toml", "[run]\nname = \"" + name +
                                "\"\n\n[optim]\nlr = " + std::to_string(lr) +
                                "\n\n[training]\nsteps = " + std::to_string(steps * 10) + "\n");
  return d;
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST(Report, LoadsMetricsMergingLinesOfOneStep) {
  TempDir dir;
  const RunLog r = load_run_log(make_run(dir, "base", 8, 0, 1e-3));
  EXPECT_EQ(r.name, "base");
  ASSERT_EQ(r.rows.size(), 8u);
  EXPECT_DOUBLE_EQ(r.rows.at(40).at("loss"), 8.0 - 1.2);
  EXPECT_DOUBLE_EQ(r.rows.at(40).at("val_loss"), 7.5 - 0.8);  // the validation line joins its step
  EXPECT_EQ(r.rows.at(30).count("val_loss"), 0u);
  EXPECT_NE(r.recipe.find("lr = 0.001"), std::string::npos);
  const RunLog ls = load_run_log(make_run(dir, "ls", 3, 4, 1e-3));
  EXPECT_DOUBLE_EQ(ls.rows.at(20).at("exit_loss/3"), 9.0 - 0.4 - 0.3);
}

TEST(Report, BadRunDirectoriesGiveOneLineErrors) {
  TempDir dir;
  testing::expect_one_line(testing::thrown_message([&] { load_run_log(dir / "nope"); }),
                           {"nope", "not a directory"});
  fs::create_directories(dir / "empty");
  testing::expect_one_line(testing::thrown_message([&] { load_run_log(dir / "empty"); }),
                           {"empty", "no metrics.jsonl"});
  const std::string d = make_run(dir, "bad", 3, 0, 1e-3);
  write(d + "/metrics.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"loss\": 3}\n");
  testing::expect_one_line(testing::thrown_message([&] { load_run_log(d); }),
                           {"metrics.jsonl:2", "integer \"step\""});
  write(d + "/metrics.jsonl", "{\"step\": 1, \"loss\": 2}\nnot json\n{\"step\": 3}\n");
  testing::expect_one_line(testing::thrown_message([&] { load_run_log(d); }),
                           {"metrics.jsonl:2", "not JSON"});
  // A run still writing: its torn last line is skipped with a warning.
  write(d + "/metrics.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"lo");
  const RunLog r = load_run_log(d);
  EXPECT_EQ(r.rows.size(), 1u);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("metrics.jsonl:2: incomplete last line"), std::string::npos);
}

TEST(Report, ReadsEvalFilesInEveryLayout) {
  TempDir dir;
  // strata layout, tasks, with exits.
  write(dir / "tasks.json", R"({"checkpoint": "a.h5", "results": {"piqa": {"metrics": {
      "acc": {"value": 0.6, "stderr": 0.01}, "acc_norm": {"value": 0.62, "stderr": null}}}},
      "per_exit": {"2": {"piqa": {"metrics": {"acc": {"value": 0.55, "stderr": 0.02}}}},
                   "4": {"piqa": {"metrics": {"acc": {"value": 0.6, "stderr": 0.01}}}}}})");
  const EvalLog t = load_eval_log("mine=" + (dir / "tasks.json"));
  EXPECT_EQ(t.label, "mine");
  EXPECT_EQ(t.checkpoint, "a.h5");
  EXPECT_DOUBLE_EQ(t.final.at("piqa/acc").value, 0.6);
  EXPECT_DOUBLE_EQ(t.final.at("piqa/acc").stderr_, 0.01);
  EXPECT_LT(t.final.at("piqa/acc_norm").stderr_, 0);
  EXPECT_DOUBLE_EQ(t.per_exit.at(2).at("piqa/acc").value, 0.55);
  // strata layout, perplexity of a file.
  write(dir / "ppl.json", R"({"checkpoint": "b.h5", "perplexity_file": "data/x.txt", "ppl": 64.1,
      "nll": 4.16, "per_exit": {"1": {"ppl": 128.8, "nll": 4.86}, "6": {"ppl": 64.1, "nll": 4.16}}})");
  const EvalLog p = load_eval_log(dir / "ppl.json");
  EXPECT_EQ(p.label, "ppl");
  EXPECT_DOUBLE_EQ(p.final.at("perplexity:x.txt/ppl").value, 64.1);
  EXPECT_DOUBLE_EQ(p.per_exit.at(1).at("perplexity:x.txt/ppl").value, 128.8);
  // lm-evaluation-harness layout, exits as task_exitE.
  write(dir / "lm.json", R"({"results": {"arc_easy_exit3": {"alias": "arc_easy",
      "acc,none": 0.4, "acc_stderr,none": 0.03}, "arc_easy_exit6": {"acc,none": 0.5,
      "acc_stderr,none": 0.02}}, "versions": {}, "config": {"model_args": "checkpoint=c.h5"}})");
  const EvalLog l = load_eval_log(dir / "lm.json");
  EXPECT_EQ(l.checkpoint, "checkpoint=c.h5");
  EXPECT_DOUBLE_EQ(l.per_exit.at(3).at("arc_easy/acc").value, 0.4);
  EXPECT_DOUBLE_EQ(l.per_exit.at(3).at("arc_easy/acc").stderr_, 0.03);
  EXPECT_DOUBLE_EQ(l.final.at("arc_easy/acc").value, 0.5);  // the last exit
  // Errors.
  testing::expect_one_line(testing::thrown_message([&] { load_eval_log(dir / "none.json"); }),
                           {"none.json", "no such evaluation file"});
  write(dir / "junk.json", "{");
  testing::expect_one_line(testing::thrown_message([&] { load_eval_log(dir / "junk.json"); }),
                           {"junk.json", "not JSON"});
  write(dir / "other.json", R"({"hello": 1})");
  testing::expect_one_line(testing::thrown_message([&] { load_eval_log(dir / "other.json"); }),
                           {"other.json", "no results found"});
}

TEST(Report, PageHoldsTheChartsTablesAndRecipes) {
  TempDir dir;
  const std::vector<RunLog> runs = {load_run_log(make_run(dir, "baseline", 8, 0, 1e-3)),
                                    load_run_log(make_run(dir, "layerskip", 8, 6, 2e-3))};
  write(dir / "e.json", R"({"checkpoint": "b.h5", "perplexity_file": "x.txt", "ppl": 64.1,
      "per_exit": {"1": {"ppl": 128.8}, "6": {"ppl": 64.1}}})");
  const Report rep = build_report(runs, {load_eval_log(dir / "e.json")}, "strata report test");
  std::vector<std::string> ids;
  for (const auto& c : rep.charts) ids.push_back(c.id);
  const std::vector<std::string> want = {"loss",
                                         "val_loss",
                                         "lr",
                                         "tokens_per_s",
                                         "grad_norm",
                                         "exit_loss_layerskip",
                                         "exit_loss_last",
                                         "eval_by_exit_perplexity_x.txt_ppl"};
  EXPECT_EQ(ids, want);
  const std::string& h = rep.html;
  EXPECT_EQ(count(h, "<svg "), want.size());
  EXPECT_EQ(h.find("<script"), std::string::npos);  // nothing runs, nothing is fetched
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(h.find("https://"), std::string::npos);
  // The loss chart: one line per run, each run in its colour everywhere.
  const ReportChart& loss = rep.charts[0];
  ASSERT_EQ(loss.chart.series.size(), 2u);
  EXPECT_EQ(loss.chart.series[1].label, "layerskip");
  EXPECT_EQ(loss.chart.series[1].points.size(), 8u);
  EXPECT_EQ(rep.charts[1].chart.series[0].points.size(), 2u);  // validation at steps 40 and 80
  EXPECT_EQ(rep.charts[5].chart.series.size(), 6u);            // exits 1..6 of layerskip
  EXPECT_EQ(rep.charts[6].chart.series[0].points.back(),
            (std::pair<double, double>{6, 9.0 - 1.6 - 0.6}));
  // Summary, evaluation table, recipes with the differing settings first.
  EXPECT_NE(h.find("<td>5.6000</td>"), std::string::npos);  // last loss 8 - 0.3 * 8
  EXPECT_NE(h.find("perplexity:x.txt/ppl"), std::string::npos);
  EXPECT_NE(h.find("<td>128.8</td>"), std::string::npos);
  const size_t diff = h.find("<tr class=\"diff\"><td class=\"l\"><code>optim.lr</code>");
  const size_t same = h.find("<code>training.steps</code>");
  ASSERT_NE(diff, std::string::npos);
  ASSERT_NE(same, std::string::npos);
  EXPECT_LT(diff, same);
  EXPECT_NE(h.find("run.name"), std::string::npos);
}

TEST(Report, SvgAndPngDrawTheSameChart) {
  SvgChart c;
  c.title = "Loss by step";
  c.x_label = "step", c.y_label = "loss";
  c.series = {{"a", {{0, 1}, {10, 2}, {20, 1.5}}}, {"b <&>", {{0, 2}, {20, 0.5}}, true}};
  c.hlines = {{"reference", 1.2}};
  const std::string svg = render_svg(c);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("b &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"6 4\""), std::string::npos);
  const auto im = testing::read_png(render_png(c, 2));
  EXPECT_EQ(im.width, 1440);
  EXPECT_EQ(im.height, 880);
  // Both series are drawn, the dashed one with gaps, and there is text.
  const int64_t blue = testing::count_color(im, palette_color(0), 0),
                red = testing::count_color(im, palette_color(1), 0);
  EXPECT_GT(blue, 2000);
  EXPECT_GT(red, 1000);
  EXPECT_GT(testing::count_color(im, "#000000", 0), 1500);  // title, labels, ticks
  // The first point of series a is at the plot's left edge, bottom third:
  // (left + 0, top + (1 - (1 - y0) / (y1 - y0)) * ph) in SVG units, times 2.
  const double y0 = 0.5 - 0.075, y1 = 2 + 0.075, ph = 440 - 40 - 55;
  const int px = 70 * 2, py = int((40 + (1 - (1 - y0) / (y1 - y0)) * ph) * 2);
  const uint8_t* p = im.at(px + 1, py);
  EXPECT_EQ(p[0], 0x1f);
  EXPECT_EQ(p[1], 0x77);
  EXPECT_EQ(p[2], 0xb4);
  // The background is white.
  EXPECT_EQ(im.at(3, 3)[0], 255);
  // Colours given per series win over the palette.
  c.colors = {"#00ff00", "#0000ff"};
  const auto im2 = testing::read_png(render_png(c, 1));
  EXPECT_EQ(testing::count_color(im2, palette_color(0), 0), 0);
  EXPECT_GT(testing::count_color(im2, "#00ff00", 0), 300);
}

TEST(Report, PngEncoderRoundTrips) {
  RgbImage im;
  im.width = 7, im.height = 3;
  for (int i = 0; i < 21 * 3; ++i) im.rgb.push_back(uint8_t(i * 37));
  const auto back = testing::read_png(encode_png(im));
  EXPECT_EQ(back.width, 7);
  EXPECT_EQ(back.height, 3);
  EXPECT_EQ(back.rgb, im.rgb);
  im.rgb.pop_back();
  testing::expect_one_line(testing::thrown_message([&] { encode_png(im); }), {"encode_png"});
}

}  // namespace
}  // namespace strata
