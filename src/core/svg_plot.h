// A small line chart (series of points, axes with ticks, a legend, optional
// horizontal reference lines) for the figures strata writes: the run report
// (strata report), the LP scan and the SPD sensitivity and budget plots.
//
// The chart is laid out once into a list of primitives (lines, polylines,
// discs, rectangles, text), which two back ends draw: SVG text, and a raster
// image written as PNG (zlib for the compression, a built-in 5x7 bitmap font
// for the text), so a picture file needs no browser or image library.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct SvgSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool dashed = false;
};

struct SvgChart {
  std::string title, x_label, y_label;
  std::vector<SvgSeries> series;
  std::vector<std::pair<std::string, double>> hlines;  // labelled reference lines at y
  bool log_y = false;
  int width = 720, height = 440;
  // Colour of each series by position; empty: the default palette. A report
  // gives a run the same colour in every chart.
  std::vector<std::string> colors;
};

// The chart as a standalone SVG document.
std::string render_svg(const SvgChart& chart);

// The chart as a PNG file, `scale` device pixels per SVG unit.
std::string render_png(const SvgChart& chart, int scale = 2);

// The default palette's colour number k ("#rrggbb").
std::string palette_color(size_t k);

// An RGB image and its PNG encoding (8-bit RGB, zlib-compressed rows).
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
};
std::string encode_png(const RgbImage& image);

}  // namespace strata
