// The main of every GoogleTest binary: as strata's own main, it first
// settles how OpenMP threads wait (core/threads.h), so a test binary that
// starts on a busy machine (ctest -j2 on two cores) waits passively instead
// of spinning against the other tests.
#include <gtest/gtest.h>

#include "core/threads.h"

int main(int argc, char** argv) {
  strata::settle_threads(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
