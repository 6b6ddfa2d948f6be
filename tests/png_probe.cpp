// png_probe FILE COLOR...: prints the image size, then for each "#rrggbb" the
// number of pixels within 40 per channel of it; exits 1 when the file is not
// a readable PNG. Used by tests/report_chromium.sh on Chromium's screenshots.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "png_reader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: png_probe FILE [#rrggbb...]\n");
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    const auto im = strata::testing::read_png(ss.str());
    std::printf("size %dx%d\n", im.width, im.height);
    for (int i = 2; i < argc; ++i)
      std::printf("%s %lld\n", argv[i], (long long)strata::testing::count_color(im, argv[i], 40));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "png_probe: %s: %s\n", argv[1], e.what());
    return 1;
  }
  return 0;
}
