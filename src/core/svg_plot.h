// A small SVG line chart (series of points, axes with ticks, a legend,
// optional horizontal reference lines), for the figures that commands write
// next to their JSON (strata lp scan). No dependencies: the output is text.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata {

struct SvgSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
};

struct SvgChart {
  std::string title, x_label, y_label;
  std::vector<SvgSeries> series;
  std::vector<std::pair<std::string, double>> hlines;  // labelled reference lines at y
  bool log_y = false;
  int width = 720, height = 440;
};

// The chart as a standalone SVG document.
std::string render_svg(const SvgChart& chart);

}  // namespace strata
