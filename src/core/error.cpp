#include "core/error.h"

namespace strata {

void fail(const std::string& msg) { throw Error(msg); }

}  // namespace strata
