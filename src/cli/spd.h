// What `strata spd scan` and the `strata spd <recipe.toml>` pipeline share.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

// The plan with the layers in `spd` as spd blocks of degree g, the rest standard.
std::string spd_plan(int layers, const std::vector<bool>& spd, int g);

// `strata spd <recipe.toml>` (cli/spd_pipeline.cpp).
int spd_pipeline(int argc, char** argv, int first);
// The pipeline's report.json as Markdown tables.
std::string spd_report_markdown(const nlohmann::json& report);

}  // namespace strata::cli
