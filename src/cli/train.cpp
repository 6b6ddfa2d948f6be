#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {
int cmd_train(int, char**, int) { fail("strata train: not implemented yet"); }
}  // namespace strata::cli
