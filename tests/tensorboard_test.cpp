// TensorBoard event files (core/tensorboard.h), read back by an independent
// reader (tb_reader.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensorboard.h"
#include "tb_reader.h"
#include "testing.h"

namespace strata {
namespace {

using namespace tb_reader;

TEST(TensorBoard, Crc32cKnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string s(1000, 'x');
  EXPECT_EQ(crc32c(s.data(), s.size()), slow_crc32c(s));
  EXPECT_EQ(masked_crc32c(s.data(), s.size()), slow_masked(s));
}

TEST(TensorBoard, ScalarsAndTextReadBackByAnIndependentReader) {
  const testing::TempDir tmp;
  const std::string dir = tmp / "tb";
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.scalar("train/loss", 4.25, 10);
    w.scalar("train/lr", 3e-4, 10);
    w.scalar("val/loss", -1.5, 1234567890123LL);
    w.text("recipe", "[model]\nhidden_size = 288", 0);
  }
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir));
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto recs = records(path);
  ASSERT_EQ(recs.size(), 5u);
  // The first event names the format version.
  const auto first = decode(recs[0]);
  ASSERT_NE(find(first, 3), nullptr);
  EXPECT_EQ(find(first, 3)->bytes, "brain.Event:2");
  ASSERT_NE(find(first, 1), nullptr);
  double wall;
  std::memcpy(&wall, &find(first, 1)->num, 8);
  EXPECT_GT(wall, 1.7e9);  // seconds since 1970, after 2023
  struct Want {
    std::string tag;
    float value;
    int64_t step;
  };
  const std::vector<Want> want = {
      {"train/loss", 4.25f, 10}, {"train/lr", 3e-4f, 10}, {"val/loss", -1.5f, 1234567890123LL}};
  for (size_t r = 0; r < want.size(); ++r) {
    const auto e = decode(recs[r + 1]);
    ASSERT_NE(find(e, 2), nullptr);
    EXPECT_EQ(int64_t(find(e, 2)->num), want[r].step);
    ASSERT_NE(find(e, 5), nullptr);
    const auto summary = decode(find(e, 5)->bytes);
    ASSERT_EQ(summary.size(), 1u);
    const auto value = decode(summary[0].bytes);
    ASSERT_NE(find(value, 1), nullptr);
    EXPECT_EQ(find(value, 1)->bytes, want[r].tag);
    ASSERT_NE(find(value, 2), nullptr);
    EXPECT_EQ(find(value, 2)->wire, 5);
    float v;
    std::memcpy(&v, &find(value, 2)->num, 4);
    EXPECT_EQ(v, want[r].value);
  }
  // Text: plugin "text", a DT_STRING scalar tensor holding the text.
  const auto e = decode(recs[4]);
  const auto value = decode(decode(find(e, 5)->bytes)[0].bytes);
  EXPECT_EQ(find(value, 1)->bytes, "recipe");
  const auto metadata = decode(find(value, 9)->bytes);
  EXPECT_EQ(find(decode(find(metadata, 1)->bytes), 1)->bytes, "text");
  const auto tensor = decode(find(value, 8)->bytes);
  EXPECT_EQ(find(tensor, 1)->num, 7u);
  EXPECT_EQ(find(tensor, 8)->bytes, "[model]\nhidden_size = 288");
}

TEST(TensorBoard, ASecondWriterMakesANewFile) {
  const testing::TempDir tmp;
  const std::string dir = tmp.path();
  std::string a, b;
  {
    TensorBoardWriter w1(dir);
    TensorBoardWriter w2(dir);
    a = w1.path(), b = w2.path();
    w1.scalar("x", 1, 1);
    w2.scalar("x", 2, 2);
  }
  EXPECT_NE(a, b);
  EXPECT_EQ(records(a).size(), 2u);
  EXPECT_EQ(records(b).size(), 2u);
}

TEST(TensorBoard, AnUnwritableDirectoryIsAOneLineError) {
  try {
    TensorBoardWriter w("/proc/strata-no-such-dir/tb");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/proc/strata-no-such-dir/tb"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace strata
