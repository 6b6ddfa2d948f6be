#include <gtest/gtest.h>
TEST(Core, Placeholder) { SUCCEED(); }
