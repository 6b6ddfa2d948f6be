#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {
int cmd_tokenizer(int, char**, int) { fail("strata tokenizer: not implemented yet"); }
}  // namespace strata::cli
