// A PNG reader for the tests (8-bit RGB or RGBA, not interlaced, any row
// filter), independent of the writer in core/svg_plot.cpp: it checks the
// pictures strata draws and the screenshots headless Chromium takes.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::testing {

struct PngImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 bytes per pixel (alpha dropped)
  const uint8_t* at(int x, int y) const {
    return &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  }
};

inline uint32_t png_u32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

inline PngImage read_png(const std::string& bytes) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0)
    throw std::runtime_error("not a PNG file");
  PngImage im;
  int channels = 0;
  std::string idat;
  for (size_t pos = 8; pos + 12 <= bytes.size();) {
    const uint32_t len = png_u32(bytes, pos);
    const std::string type = bytes.substr(pos + 4, 4);
    if (pos + 12 + len > bytes.size()) throw std::runtime_error("truncated chunk " + type);
    const std::string data = bytes.substr(pos + 8, len);
    const uint32_t crc = png_u32(bytes, pos + 8 + len);
    const std::string body = bytes.substr(pos + 4, 4 + len);
    if (crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())) != crc)
      throw std::runtime_error("bad CRC in chunk " + type);
    if (type == "IHDR") {
      im.width = int(png_u32(data, 0)), im.height = int(png_u32(data, 4));
      if (data[8] != 8 || data[12] != 0) throw std::runtime_error("not 8-bit non-interlaced");
      channels = data[9] == 2 ? 3 : data[9] == 6 ? 4 : 0;
      if (!channels) throw std::runtime_error("colour type not RGB or RGBA");
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + len;
  }
  const size_t stride = size_t(im.width) * size_t(channels);
  std::vector<uint8_t> raw((stride + 1) * size_t(im.height));
  uLongf n = uLongf(raw.size());
  if (uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())) !=
          Z_OK ||
      n != raw.size())
    throw std::runtime_error("bad image data");
  std::vector<uint8_t> cur(stride), prev(stride, 0);
  im.rgb.resize(size_t(im.width) * size_t(im.height) * 3);
  for (int y = 0; y < im.height; ++y) {
    const uint8_t* row = &raw[size_t(y) * (stride + 1)];
    const int filter = row[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= size_t(channels) ? cur[i - size_t(channels)] : 0, b = prev[i],
                c = i >= size_t(channels) ? prev[i - size_t(channels)] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      if (filter > 4) throw std::runtime_error("bad row filter");
      cur[i] = uint8_t(row[1 + i] + pred);
    }
    for (int x = 0; x < im.width; ++x)
      for (int k = 0; k < 3; ++k)
        im.rgb[(size_t(y) * size_t(im.width) + size_t(x)) * 3 + size_t(k)] =
            cur[size_t(x) * size_t(channels) + size_t(k)];
    prev.swap(cur);
  }
  return im;
}

// Pixels within `tol` (per channel) of the colour "#rrggbb".
inline int64_t count_color(const PngImage& im, const std::string& hex, int tol) {
  const int r = std::stoi(hex.substr(1, 2), nullptr, 16),
            g = std::stoi(hex.substr(3, 2), nullptr, 16),
            b = std::stoi(hex.substr(5, 2), nullptr, 16);
  int64_t n = 0;
  for (size_t i = 0; i + 2 < im.rgb.size(); i += 3)
    n += std::abs(im.rgb[i] - r) <= tol && std::abs(im.rgb[i + 1] - g) <= tol &&
         std::abs(im.rgb[i + 2] - b) <= tol;
  return n;
}

}  // namespace strata::testing
