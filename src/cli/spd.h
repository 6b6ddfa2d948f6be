// `strata spd <recipe.toml>` (cli/spd_pipeline.cpp), which `strata spd`
// (cli/spd_cmd.cpp) hands a recipe to.
#pragma once

namespace strata::cli {

// `strata spd <recipe.toml>` (cli/spd_pipeline.cpp).
int spd_pipeline(int argc, char** argv, int first);

}  // namespace strata::cli
