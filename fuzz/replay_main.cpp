// A main() for the fuzz harnesses without libFuzzer: runs every file of the
// given directories (recursively, in name order) and files through
// LLVMFuzzerTestOneInput once. The ordinary build links each harness with it
// (fuzz_replay_<target>), so the seed corpus and every committed crash
// reproducer run in the normal test suite without clang. A harness aborts on
// a finding, which fails the test; a missing directory is skipped (a target
// without reproducers has none).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <dir or file>...\n", argv[0]);
    return 2;
  }
  size_t count = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<fs::path> files;
    std::error_code ec;
    if (fs::is_directory(argv[a], ec)) {
      for (fs::recursive_directory_iterator it(argv[a], ec), end; !ec && it != end;
           it.increment(ec))
        if (it->is_regular_file()) files.push_back(it->path());
      std::sort(files.begin(), files.end());
    } else if (fs::is_regular_file(argv[a], ec)) {
      files.emplace_back(argv[a]);
    } else {
      std::printf("%s: no such file or directory (nothing to replay)\n", argv[a]);
      continue;
    }
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "%s: read error\n", f.c_str());
        return 1;
      }
      std::printf("replay %s (%zu bytes)\n", f.c_str(), bytes.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  std::printf("replayed %zu inputs: no finding\n", count);
  return 0;
}
