#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {
int cmd_inspect(int, char**, int) { fail("strata inspect: not implemented yet"); }
}  // namespace strata::cli
