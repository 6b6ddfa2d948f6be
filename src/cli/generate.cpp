#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {
int cmd_generate(int, char**, int) { fail("strata generate: not implemented yet"); }
}  // namespace strata::cli
