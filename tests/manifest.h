// Reads the first Markdown table of a MANIFEST.md (data/, checkpoints/): the
// cells of the named file column and of the "sha256" column, row by row, so
// a test can check every shipped file against its recorded checksum.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace strata::testing {

inline std::vector<std::pair<std::string, std::string>> manifest_checksums(
    const std::string& path, const std::string& file_column) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::string cur;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|') {
        const size_t a = cur.find_first_not_of(" `"), b = cur.find_last_not_of(" `");
        out.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
        cur.clear();
      } else {
        cur += line[i];
      }
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  int file_col = -1, sha_col = -1;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;  // the first table ended
      continue;
    }
    const auto c = cells(line);
    if (!in_table) {
      in_table = true;
      for (size_t i = 0; i < c.size(); ++i) {
        if (c[i] == file_column) file_col = int(i);
        if (c[i] == "sha256") sha_col = int(i);
      }
      if (file_col < 0 || sha_col < 0)
        throw std::runtime_error(path + ": the first table has no '" + file_column +
                                 "' or 'sha256' column: " + line);
      continue;
    }
    if (line.find("---") != std::string::npos) continue;
    if (int(c.size()) <= std::max(file_col, sha_col))
      throw std::runtime_error(path + ": short row: " + line);
    rows.emplace_back(c[size_t(file_col)], c[size_t(sha_col)]);
  }
  return rows;
}

}  // namespace strata::testing
