// The checkpoints of a run directory: names, listing, pruning (checkpoint.h).
// Plain files, so a build without HDF5 lists them too.
#include "io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string_view>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  STRATA_CHECK(step >= 0, "checkpoint: negative step ", step);
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  const std::string dir = run_dir + "/checkpoints";
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  fs::directory_iterator it(dir, ec);
  STRATA_CHECK(!ec, "checkpoints: cannot list ", dir, ": ", ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    STRATA_CHECK(!ec, "checkpoints: cannot list ", dir, ": ", ec.message());
    const std::string name = it->path().filename().string();
    constexpr std::string_view prefix = "step_", suffix = ".h5";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!it->is_regular_file(ec)) continue;
    out.emplace_back(std::stoll(digits), dir + "/" + name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  if (keep <= 0) return;
  const auto all = list_checkpoints(run_dir);
  if (int64_t(all.size()) <= keep) return;
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);
    STRATA_CHECK(!ec, "checkpoints: cannot delete ", all[i].second, ": ", ec.message());
  }
}

}  // namespace strata
