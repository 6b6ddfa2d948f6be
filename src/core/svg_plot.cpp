#include "core/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace strata {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo > 0 ? hi - lo : 1;
  const double raw = span / 5, mag = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
  return t;
}

std::string label_of(double v) {
  char b[32];
  if (std::abs(v) >= 1000 || (std::abs(v - std::round(v)) < 1e-9)) {
    std::snprintf(b, sizeof b, "%.0f", v);
  } else {
    std::snprintf(b, sizeof b, "%.3g", v);
  }
  return b;
}

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

}  // namespace

std::string render_svg(const SvgChart& c) {
  const double left = 70, right = 170, top = 40, bottom = 55;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  auto ty = [&](double y) { return c.log_y ? std::log10(y) : y; };
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, ty(y)), y1 = std::max(y1, ty(y));
    }
  for (const auto& h : c.hlines) y0 = std::min(y0, ty(h.second)), y1 = std::max(y1, ty(h.second));
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 1, y1 += 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (ty(y) - y0) / (y1 - y0)) * ph; };
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(c.width) +
                  "\" height=\"" + std::to_string(c.height) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(left + pw / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" +
       escape(c.title) + "</text>\n";
  o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" +
       num(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (double t : ticks(x0, x1)) {
    o += "<line x1=\"" + num(px(t)) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(px(t)) +
         "\" y2=\"" + num(top + ph + 5) + "\" stroke=\"#333\"/>\n";
    o += "<text x=\"" + num(px(t)) + "\" y=\"" + num(top + ph + 18) + "\" text-anchor=\"middle\">" +
         label_of(t) + "</text>\n";
  }
  // Round values for the y ticks (on a log axis: round values of the data's
  // range, placed at their logarithms).
  std::vector<double> yt = c.log_y ? ticks(std::pow(10, y0), std::pow(10, y1)) : ticks(y0, y1);
  for (double v : yt) {
    if (c.log_y && v <= 0) continue;
    const double t = c.log_y ? std::log10(v) : v;
    const double y = top + (1 - (t - y0) / (y1 - y0)) * ph;
    o += "<line x1=\"" + num(left - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + pw) +
         "\" y2=\"" + num(y) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
         label_of(v) + "</text>\n";
  }
  o += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(c.height - 12) +
       "\" text-anchor=\"middle\">" + escape(c.x_label) + "</text>\n";
  o += "<text transform=\"translate(16," + num(top + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + escape(c.y_label) + "</text>\n";
  double ly = top + 10;
  for (const auto& [label, y] : c.hlines) {
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(left + pw) +
         "\" y2=\"" + num(py(y)) + "\" stroke=\"#000\" stroke-dasharray=\"6 4\"/>\n";
    o += "<line x1=\"" + num(left + pw + 12) + "\" y1=\"" + num(ly) + "\" x2=\"" +
         num(left + pw + 36) + "\" y2=\"" + num(ly) +
         "\" stroke=\"#000\" stroke-dasharray=\"6 4\"/>\n";
    o += "<text x=\"" + num(left + pw + 42) + "\" y=\"" + num(ly + 4) + "\">" + escape(label) +
         "</text>\n";
    ly += 18;
  }
  for (size_t k = 0; k < c.series.size(); ++k) {
    const SvgSeries& s = c.series[k];
    const char* color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    std::string pts;
    for (const auto& [x, y] : s.points) pts += num(px(x)) + "," + num(py(y)) + " ";
    o += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
         "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    for (const auto& [x, y] : s.points)
      o += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"3\" fill=\"" + color +
           "\"/>\n";
    o += "<line x1=\"" + num(left + pw + 12) + "\" y1=\"" + num(ly) + "\" x2=\"" +
         num(left + pw + 36) + "\" y2=\"" + num(ly) + "\" stroke=\"" + color +
         "\" stroke-width=\"2\"/>\n";
    o += "<text x=\"" + num(left + pw + 42) + "\" y=\"" + num(ly + 4) + "\">" + escape(s.label) +
         "</text>\n";
    ly += 18;
  }
  o += "</svg>\n";
  return o;
}

}  // namespace strata
