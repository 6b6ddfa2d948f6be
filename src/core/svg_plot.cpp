#include "core/svg_plot.h"

#if defined(STRATA_HAVE_ZLIB)
#include <zlib.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.h"

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
    else if (c == '"')
      out += "&quot;";
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
  if (std::abs(v) >= 1e6 || (std::abs(v) > 0 && std::abs(v) < 1e-3)) {
    std::snprintf(b, sizeof b, "%.2g", v);
  } else if (std::abs(v) >= 1000 || (std::abs(v - std::round(v)) < 1e-9)) {
    std::snprintf(b, sizeof b, "%.0f", v);
  } else {
    std::snprintf(b, sizeof b, "%.3g", v);
  }
  return b;
}

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

// ---------------------------------------------------------------------------
// The chart as drawing primitives, in SVG user units.

struct Prim {
  enum Kind { Rect, Line, Polyline, Disc, Text } kind = Line;
  std::vector<double> xy;  // Rect: x y w h; Line: x1 y1 x2 y2; Polyline: points; Disc: cx cy r
  std::string fill = "none", stroke = "none";
  double width = 1;
  bool dashed = false;
  std::string text;
  int anchor = 0;  // Text: 0 start, 1 middle, 2 end
  double size = 12;
  bool vertical = false;  // Text rotated -90 degrees about its anchor
};

Prim mk(Prim::Kind kind, std::vector<double> xy) {
  Prim p;
  p.kind = kind;
  p.xy = std::move(xy);
  return p;
}

std::vector<Prim> layout(const SvgChart& c) {
  std::vector<Prim> d;
  auto line = [&](double x1, double y1, double x2, double y2, const std::string& stroke,
                  double width = 1, bool dashed = false) {
    Prim p = mk(Prim::Line, {x1, y1, x2, y2});
    p.stroke = stroke, p.width = width, p.dashed = dashed;
    d.push_back(std::move(p));
  };
  auto text = [&](double x, double y, const std::string& s, int anchor, double size = 12,
                  bool vertical = false) {
    Prim p = mk(Prim::Text, {x, y});
    p.text = s, p.anchor = anchor, p.size = size, p.vertical = vertical;
    d.push_back(std::move(p));
  };
  auto color = [&](size_t k) {
    return k < c.colors.size() && !c.colors[k].empty() ? c.colors[k] : palette_color(k);
  };
  const double left = 70, right = 170, top = 40, bottom = 55;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  auto ty = [&](double y) { return c.log_y ? std::log10(y) : y; };
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(ty(y))) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, ty(y)), y1 = std::max(y1, ty(y));
    }
  for (const auto& h : c.hlines) y0 = std::min(y0, ty(h.second)), y1 = std::max(y1, ty(h.second));
  if (x0 > x1) x0 = 0, x1 = 1;
  if (y0 > y1) y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 1, y1 += 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (ty(y) - y0) / (y1 - y0)) * ph; };

  Prim bg = mk(Prim::Rect, {0, 0, double(c.width), double(c.height)});
  bg.fill = "#ffffff";
  d.push_back(bg);
  text(left + pw / 2, 22, c.title, 1, 14);
  for (double t : ticks(x0, x1)) {
    line(px(t), top + ph, px(t), top + ph + 5, "#333333");
    text(px(t), top + ph + 18, label_of(t), 1);
  }
  // Round values for the y ticks (on a log axis: round values of the data's
  // range, placed at their logarithms).
  std::vector<double> yt = c.log_y ? ticks(std::pow(10, y0), std::pow(10, y1)) : ticks(y0, y1);
  for (double v : yt) {
    if (c.log_y && v <= 0) continue;
    const double t = c.log_y ? std::log10(v) : v;
    const double y = top + (1 - (t - y0) / (y1 - y0)) * ph;
    line(left - 5, y, left + pw, y, "#dddddd");
    text(left - 8, y + 4, label_of(v), 2);
  }
  Prim frame = mk(Prim::Rect, {left, top, pw, ph});
  frame.stroke = "#333333";
  d.push_back(frame);
  text(left + pw / 2, c.height - 12, c.x_label, 1);
  text(16, top + ph / 2, c.y_label, 1, 12, true);
  double ly = top + 10;
  for (const auto& [label, y] : c.hlines) {
    line(left, py(y), left + pw, py(y), "#000000", 1, true);
    line(left + pw + 12, ly, left + pw + 36, ly, "#000000", 1, true);
    text(left + pw + 42, ly + 4, label, 0);
    ly += 18;
  }
  for (size_t k = 0; k < c.series.size(); ++k) {
    const SvgSeries& s = c.series[k];
    const std::string col = color(k);
    Prim pl = mk(Prim::Polyline, {});
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(ty(y))) continue;
      pl.xy.push_back(px(x));
      pl.xy.push_back(py(y));
    }
    pl.stroke = col, pl.width = 2, pl.dashed = s.dashed;
    // Many points: the line alone; a few: a dot at each.
    const bool dots = pl.xy.size() / 2 <= 40;
    d.push_back(pl);
    if (dots)
      for (size_t i = 0; i + 1 < pl.xy.size(); i += 2) {
        Prim p = mk(Prim::Disc, {pl.xy[i], pl.xy[i + 1], 3});
        p.fill = col;
        d.push_back(p);
      }
    line(left + pw + 12, ly, left + pw + 36, ly, col, 2, s.dashed);
    text(left + pw + 42, ly + 4, s.label, 0);
    ly += 18;
  }
  return d;
}

// ---------------------------------------------------------------------------
// Raster back end.

// A 5x7 bitmap font for printable ASCII, one glyph per line: the character,
// then seven rows of five cells ('#' lit) above the baseline, and two more
// below it for the letters with descenders.
constexpr std::string_view kFont =
    "  ..... ..... ..... ..... ..... ..... .....\n"
    "! ..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..\n"
    "\" .#.#. .#.#. ..... ..... ..... ..... .....\n"
    "# .#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.\n"
    "$ ..#.. .#### #.#.. .###. ..#.# ####. ..#..\n"
    "% ##... ##..# ...#. ..#.. .#... #..## ...##\n"
    "& .##.. #..#. #.#.. .#... #.#.# #..#. .##.#\n"
    "' ..#.. ..#.. ..... ..... ..... ..... .....\n"
    "( ...#. ..#.. .#... .#... .#... ..#.. ...#.\n"
    ") .#... ..#.. ...#. ...#. ...#. ..#.. .#...\n"
    "* ..... ..#.. #.#.# .###. #.#.# ..#.. .....\n"
    "+ ..... ..#.. ..#.. ##### ..#.. ..#.. .....\n"
    ", ..... ..... ..... ..... .##.. ..#.. .#...\n"
    "- ..... ..... ..... ##### ..... ..... .....\n"
    ". ..... ..... ..... ..... ..... .##.. .##..\n"
    "/ ..... ....# ...#. ..#.. .#... #.... .....\n"
    "0 .###. #...# #..## #.#.# ##..# #...# .###.\n"
    "1 ..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.\n"
    "2 .###. #...# ....# ...#. ..#.. .#... #####\n"
    "3 ##### ...#. ..#.. ...#. ....# #...# .###.\n"
    "4 ...#. ..##. .#.#. #..#. ##### ...#. ...#.\n"
    "5 ##### #.... ####. ....# ....# #...# .###.\n"
    "6 ..##. .#... #.... ####. #...# #...# .###.\n"
    "7 ##### ....# ...#. ..#.. .#... .#... .#...\n"
    "8 .###. #...# #...# .###. #...# #...# .###.\n"
    "9 .###. #...# #...# .#### ....# ...#. .##..\n"
    ": ..... .##.. .##.. ..... .##.. .##.. .....\n"
    "; ..... .##.. .##.. ..... .##.. ..#.. .#...\n"
    "< ...#. ..#.. .#... #.... .#... ..#.. ...#.\n"
    "= ..... ..... ##### ..... ##### ..... .....\n"
    "> .#... ..#.. ...#. ....# ...#. ..#.. .#...\n"
    "? .###. #...# ....# ...#. ..#.. ..... ..#..\n"
    "@ .###. #...# ....# .##.# #.#.# #.#.# .###.\n"
    "A .###. #...# #...# ##### #...# #...# #...#\n"
    "B ####. #...# #...# ####. #...# #...# ####.\n"
    "C .###. #...# #.... #.... #.... #...# .###.\n"
    "D ###.. #..#. #...# #...# #...# #..#. ###..\n"
    "E ##### #.... #.... ####. #.... #.... #####\n"
    "F ##### #.... #.... ####. #.... #.... #....\n"
    "G .###. #...# #.... #.### #...# #...# .####\n"
    "H #...# #...# #...# ##### #...# #...# #...#\n"
    "I .###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.\n"
    "J ..### ...#. ...#. ...#. ...#. #..#. .##..\n"
    "K #...# #..#. #.#.. ##... #.#.. #..#. #...#\n"
    "L #.... #.... #.... #.... #.... #.... #####\n"
    "M #...# ##.## #.#.# #.#.# #...# #...# #...#\n"
    "N #...# #...# ##..# #.#.# #..## #...# #...#\n"
    "O .###. #...# #...# #...# #...# #...# .###.\n"
    "P ####. #...# #...# ####. #.... #.... #....\n"
    "Q .###. #...# #...# #...# #.#.# #..#. .##.#\n"
    "R ####. #...# #...# ####. #.#.. #..#. #...#\n"
    "S .#### #.... #.... .###. ....# ....# ####.\n"
    "T ##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..\n"
    "U #...# #...# #...# #...# #...# #...# .###.\n"
    "V #...# #...# #...# #...# #...# .#.#. ..#..\n"
    "W #...# #...# #...# #.#.# #.#.# #.#.# .#.#.\n"
    "X #...# #...# .#.#. ..#.. .#.#. #...# #...#\n"
    "Y #...# #...# .#.#. ..#.. ..#.. ..#.. ..#..\n"
    "Z ##### ....# ...#. ..#.. .#... #.... #####\n"
    "[ .###. .#... .#... .#... .#... .#... .###.\n"
    "\\ ..... #.... .#... ..#.. ...#. ....# .....\n"
    "] .###. ...#. ...#. ...#. ...#. ...#. .###.\n"
    "^ ..#.. .#.#. #...# ..... ..... ..... .....\n"
    "_ ..... ..... ..... ..... ..... ..... #####\n"
    "` .#... ..#.. ..... ..... ..... ..... .....\n"
    "a ..... ..... .###. ....# .#### #...# .####\n"
    "b #.... #.... #.##. ##..# #...# #...# ####.\n"
    "c ..... ..... .###. #.... #.... #...# .###.\n"
    "d ....# ....# .##.# #..## #...# #...# .####\n"
    "e ..... ..... .###. #...# ##### #.... .###.\n"
    "f ..##. .#..# .#... ###.. .#... .#... .#...\n"
    "g ..... ..... .#### #...# #...# #...# .#### ....# .###.\n"
    "h #.... #.... #.##. ##..# #...# #...# #...#\n"
    "i ..#.. ..... .##.. ..#.. ..#.. ..#.. .###.\n"
    "j ...#. ..... ..##. ...#. ...#. ...#. ...#. #..#. .##..\n"
    "k #.... #.... #..#. #.#.. ##... #.#.. #..#.\n"
    "l .##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###.\n"
    "m ..... ..... ##.#. #.#.# #.#.# #...# #...#\n"
    "n ..... ..... #.##. ##..# #...# #...# #...#\n"
    "o ..... ..... .###. #...# #...# #...# .###.\n"
    "p ..... ..... ####. #...# #...# #...# ####. #.... #....\n"
    "q ..... ..... .#### #...# #...# #...# .#### ....# ....#\n"
    "r ..... ..... #.##. ##..# #.... #.... #....\n"
    "s ..... ..... .###. #.... .###. ....# ####.\n"
    "t .#... .#... ###.. .#... .#... .#..# ..##.\n"
    "u ..... ..... #...# #...# #...# #..## .##.#\n"
    "v ..... ..... #...# #...# #...# .#.#. ..#..\n"
    "w ..... ..... #...# #...# #.#.# #.#.# .#.#.\n"
    "x ..... ..... #...# .#.#. ..#.. .#.#. #...#\n"
    "y ..... ..... #...# #...# #...# #...# .#### ....# .###.\n"
    "z ..... ..... ##### ...#. ..#.. .#... #####\n"
    "{ ...#. ..#.. ..#.. .#... ..#.. ..#.. ...#.\n"
    "| ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..\n"
    "} .#... ..#.. ..#.. ...#. ..#.. ..#.. .#...\n"
    "~ ..... ..... .#... #.#.# ...#. ..... .....\n";

// Glyph rows as 5-bit masks (bit 4 = leftmost cell), for characters 32..126;
// rows 7 and 8 are below the baseline.
const std::array<std::array<uint8_t, 9>, 95>& glyphs() {
  static const auto table = [] {
    std::array<std::array<uint8_t, 9>, 95> g{};
    size_t pos = 0;
    while (pos < kFont.size()) {
      const size_t end = kFont.find('\n', pos);
      const std::string_view line = kFont.substr(pos, end - pos);
      const int ch = uint8_t(line[0]);
      const int rows = int(line.size() + 1) / 6;  // "c" then " xxxxx" per row
      for (int r = 0; r < rows; ++r) {
        uint8_t mask = 0;
        for (int k = 0; k < 5; ++k)
          if (line[size_t(2 + r * 6 + k)] == '#') mask |= uint8_t(1 << (4 - k));
        g[size_t(ch - 32)][size_t(r)] = mask;
      }
      pos = end + 1;
    }
    return g;
  }();
  return table;
}

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

Rgb parse_color(const std::string& s) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
  };
  if (s.size() == 7 && s[0] == '#')
    return {uint8_t(hex(s[1]) * 16 + hex(s[2])), uint8_t(hex(s[3]) * 16 + hex(s[4])),
            uint8_t(hex(s[5]) * 16 + hex(s[6]))};
  if (s.size() == 4 && s[0] == '#')
    return {uint8_t(hex(s[1]) * 17), uint8_t(hex(s[2]) * 17), uint8_t(hex(s[3]) * 17)};
  if (s == "white") return {255, 255, 255};
  return {0, 0, 0};
}

class Canvas {
 public:
  Canvas(int w, int h, double scale) : scale_(scale) {
    img_.width = w, img_.height = h;
    img_.rgb.assign(size_t(w) * size_t(h) * 3, 255);
  }
  RgbImage& image() { return img_; }

  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height) return;
    uint8_t* p = &img_.rgb[(size_t(y) * size_t(img_.width) + size_t(x)) * 3];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
  // Rectangles in device pixels, [x0, x1) x [y0, y1).
  void fill(double x0, double y0, double x1, double y1, Rgb c) {
    for (int y = int(std::floor(y0)); y < int(std::ceil(y1)); ++y)
      for (int x = int(std::floor(x0)); x < int(std::ceil(x1)); ++x) set(x, y, c);
  }
  void rect(const Prim& p) {
    const double x = p.xy[0] * scale_, y = p.xy[1] * scale_, w = p.xy[2] * scale_,
                 h = p.xy[3] * scale_;
    if (p.fill != "none") fill(x, y, x + w, y + h, parse_color(p.fill));
    if (p.stroke != "none") {
      Prim l =
          mk(Prim::Polyline, {p.xy[0], p.xy[1], p.xy[0] + p.xy[2], p.xy[1], p.xy[0] + p.xy[2],
                              p.xy[1] + p.xy[3], p.xy[0], p.xy[1] + p.xy[3], p.xy[0], p.xy[1]});
      l.stroke = p.stroke, l.width = p.width;
      polyline(l);
    }
  }
  // A stroked path: square pens stamped every quarter pixel; dashes of 6 on,
  // 4 off (SVG units), continued across the vertices.
  void polyline(const Prim& p) {
    const Rgb c = parse_color(p.stroke);
    const double half = std::max(0.5, p.width * scale_ / 2);
    double along = 0;
    for (size_t i = 0; i + 3 < p.xy.size(); i += 2) {
      const double ax = p.xy[i] * scale_, ay = p.xy[i + 1] * scale_;
      const double bx = p.xy[i + 2] * scale_, by = p.xy[i + 3] * scale_;
      const double len = std::hypot(bx - ax, by - ay);
      const int n = std::max(1, int(len * 4));
      for (int k = 0; k <= n; ++k) {
        const double t = double(k) / n, dist = along + t * len;
        if (p.dashed && std::fmod(dist, 10 * scale_) >= 6 * scale_) continue;
        const double x = ax + t * (bx - ax), y = ay + t * (by - ay);
        fill(std::round(x - half), std::round(y - half), std::round(x + half), std::round(y + half),
             c);
      }
      along += len;
    }
  }
  void disc(const Prim& p) {
    const double cx = p.xy[0] * scale_, cy = p.xy[1] * scale_, r = p.xy[2] * scale_;
    const Rgb c = parse_color(p.fill);
    for (int y = int(std::floor(cy - r)); y <= int(std::ceil(cy + r)); ++y)
      for (int x = int(std::floor(cx - r)); x <= int(std::ceil(cx + r)); ++x)
        if ((x + 0.5 - cx) * (x + 0.5 - cx) + (y + 0.5 - cy) * (y + 0.5 - cy) <= r * r)
          set(x, y, c);
  }
  // Text with the bitmap font: a cell of 6 x 8 font pixels per character,
  // font pixels of size/12 SVG units; (x, y) is the baseline anchor, as in SVG.
  void text(const Prim& p) {
    const double u = p.size / 12 * scale_;  // device pixels per font pixel
    const int cells = int(p.text.size());
    const double w = cells * 6 * u - u;
    double along = p.anchor == 1 ? -w / 2 : p.anchor == 2 ? -w : 0;
    const double ox = p.xy[0] * scale_, oy = p.xy[1] * scale_;
    const Rgb black{0, 0, 0};
    for (unsigned char ch : p.text) {
      const auto& g = glyphs()[ch >= 32 && ch < 127 ? ch - 32 : '?' - 32];
      for (int r = 0; r < 9; ++r)
        for (int k = 0; k < 5; ++k) {
          if (!(g[size_t(r)] & (1 << (4 - k)))) continue;
          const double a = along + k * u, b = (r - 7) * u;  // along the text, below the top
          if (p.vertical)  // rotated -90 degrees: "along" runs up the page
            fill(ox + b, oy - a - u, ox + b + u, oy - a, black);
          else
            fill(ox + a, oy + b, ox + a + u, oy + b + u, black);
        }
      along += 6 * u;
    }
  }

 private:
  RgbImage img_;
  double scale_;
};

#if defined(STRATA_HAVE_ZLIB)
void put_u32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s += char((v >> (8 * i)) & 0xff);
}

void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}
#endif

}  // namespace

std::string palette_color(size_t k) { return kColors[k % (sizeof kColors / sizeof kColors[0])]; }

std::string render_svg(const SvgChart& c) {
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(c.width) +
                  "\" height=\"" + std::to_string(c.height) + "\" viewBox=\"0 0 " +
                  std::to_string(c.width) + " " + std::to_string(c.height) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  for (const Prim& p : layout(c)) {
    const std::string stroke = " stroke=\"" + p.stroke + "\"" +
                               (p.width != 1 ? " stroke-width=\"" + num(p.width) + "\"" : "") +
                               (p.dashed ? " stroke-dasharray=\"6 4\"" : "");
    switch (p.kind) {
      case Prim::Rect:
        o += "<rect x=\"" + num(p.xy[0]) + "\" y=\"" + num(p.xy[1]) + "\" width=\"" + num(p.xy[2]) +
             "\" height=\"" + num(p.xy[3]) + "\" fill=\"" + p.fill + "\"" +
             (p.stroke != "none" ? stroke : "") + "/>\n";
        break;
      case Prim::Line:
        o += "<line x1=\"" + num(p.xy[0]) + "\" y1=\"" + num(p.xy[1]) + "\" x2=\"" + num(p.xy[2]) +
             "\" y2=\"" + num(p.xy[3]) + "\"" + stroke + "/>\n";
        break;
      case Prim::Polyline: {
        std::string pts;
        for (size_t i = 0; i + 1 < p.xy.size(); i += 2)
          pts += num(p.xy[i]) + "," + num(p.xy[i + 1]) + " ";
        o += "<polyline fill=\"none\"" + stroke + " points=\"" + pts + "\"/>\n";
        break;
      }
      case Prim::Disc:
        o += "<circle cx=\"" + num(p.xy[0]) + "\" cy=\"" + num(p.xy[1]) + "\" r=\"" + num(p.xy[2]) +
             "\" fill=\"" + p.fill + "\"/>\n";
        break;
      case Prim::Text: {
        const char* anchor = p.anchor == 1 ? "middle" : p.anchor == 2 ? "end" : "start";
        o += p.vertical ? "<text transform=\"translate(" + num(p.xy[0]) + "," + num(p.xy[1]) +
                              ") rotate(-90)\""
                        : "<text x=\"" + num(p.xy[0]) + "\" y=\"" + num(p.xy[1]) + "\"";
        if (p.anchor) o += std::string(" text-anchor=\"") + anchor + "\"";
        if (p.size != 12) o += " font-size=\"" + num(p.size) + "\"";
        o += ">" + escape(p.text) + "</text>\n";
        break;
      }
    }
  }
  o += "</svg>\n";
  return o;
}

std::string render_png(const SvgChart& c, int scale) {
  STRATA_CHECK(scale >= 1 && scale <= 8, "render_png: scale ", scale, " is not 1..8");
  Canvas canvas(c.width * scale, c.height * scale, scale);
  for (const Prim& p : layout(c)) {
    switch (p.kind) {
      case Prim::Rect:
        canvas.rect(p);
        break;
      case Prim::Line:
      case Prim::Polyline:
        canvas.polyline(p);
        break;
      case Prim::Disc:
        canvas.disc(p);
        break;
      case Prim::Text:
        canvas.text(p);
        break;
    }
  }
  return encode_png(canvas.image());
}

std::string encode_png(const RgbImage& im) {
#if !defined(STRATA_HAVE_ZLIB)
  fail(cat("this build has no zlib (zlib1g-dev): the ", im.width, "x", im.height,
           " PNG picture cannot be written (the SVG charts and the HTML report can)"));
#else
  STRATA_CHECK(
      im.width > 0 && im.height > 0 && im.rgb.size() == size_t(im.width) * size_t(im.height) * 3,
      "encode_png: a ", im.width, "x", im.height, " image needs ",
      size_t(std::max(im.width, 0)) * size_t(std::max(im.height, 0)) * 3, " bytes, has ",
      im.rgb.size());
  // Each row: filter type 0 (none), then the pixels.
  std::string raw;
  raw.reserve(size_t(im.height) * (size_t(im.width) * 3 + 1));
  for (int y = 0; y < im.height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(&im.rgb[size_t(y) * size_t(im.width) * 3]),
               size_t(im.width) * 3);
  }
  uLongf n = compressBound(uLong(raw.size()));
  std::string z(n, '\0');
  STRATA_CHECK(
      compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(raw.data()),
                uLong(raw.size()), Z_BEST_COMPRESSION) == Z_OK,
      "encode_png: zlib failed");
  z.resize(n);
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, uint32_t(im.width));
  put_u32(ihdr, uint32_t(im.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
#endif
}

}  // namespace strata
