#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {
int cmd_data(int, char**, int) { fail("strata data: not implemented yet"); }
}  // namespace strata::cli
