// Safetensors: bit-exact F32 round trips; F16 and BF16 conversion (every half
// value, ties to even, overflow, subnormals, NaN); metadata; a file encoded by
// hand byte by byte; one-line errors naming file and tensor/field for every
// malformed header; sharded model directories, their index and its errors;
// atomic writes and stale-file cleanup.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::TempDir;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file as bytes, encoded here independently of the writer.
std::string encode(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The data bytes of tensor `name` as stored in `path`, from the header length
// in the first 8 bytes and the tensor's offsets.
std::string raw_tensor(const std::string& path, const std::string& name) {
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  const auto f = SafetensorsFile::open(path);
  const SafeTensorInfo* t = f->find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return "";
  return bytes.substr(size_t(8 + n + t->begin), size_t(t->end - t->begin));
}

std::vector<uint16_t> raw_u16(const std::string& path, const std::string& name) {
  const std::string r = raw_tensor(path, name);
  std::vector<uint16_t> out(r.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = uint16_t(uint8_t(r[2 * i]) | (uint16_t(uint8_t(r[2 * i + 1])) << 8));
  return out;
}

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const SafeTensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> out(size_t(t->numel()));
  f.read_f32(*t, out.data());
  return out;
}

// Reference decoding of IEEE binary16, written from the format definition
// with ldexp (independent of the bit manipulation in the library).
float half_reference(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  double v;
  if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(double(1024 + mant), exp - 25);
  return float(sign ? -v : v);
}

// Writes `values` as one tensor "x" in `dtype` and returns the stored 16-bit
// patterns.
std::vector<uint16_t> stored16(const TempDir& dir, const std::vector<float>& values,
                               const std::string& dtype) {
  const std::string path = dir / ("conv_" + dtype + ".safetensors");
  write_safetensors(path, {{"x", {int64_t(values.size())}, values.data()}}, dtype);
  return raw_u16(path, "x");
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

TEST(Safetensors, F32RoundTripIsBitExact) {
  TempDir dir;
  std::vector<float> a = testing::random_vec<float>(6 * 7, 1, 3.0);
  const std::vector<float> special = {0.0f,
                                      -0.0f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      from_bits(0x7FC00001u),  // NaN with a payload
                                      from_bits(0xFF800123u),  // signalling NaN, negative
                                      FLT_MAX,
                                      -FLT_MIN,
                                      from_bits(0x00000001u),  // smallest subnormal
                                      1e-40f};
  const float scalar = 42.5f;
  const std::vector<SafeTensorWrite> ws = {{"model.embed_tokens.weight", {6, 7}, a.data()},
                                           {"special", {2, 5}, special.data()},
                                           {"scalar", {}, &scalar},
                                           {"empty", {0, 3}, nullptr}};
  const std::string path = dir / "f32.safetensors";
  write_safetensors(path, ws, "F32");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "data area not 8-byte aligned";
  EXPECT_EQ(bytes.size(), 8 + n + (42 + 10 + 1) * 4);
  // Padding is trailing spaces after the JSON object.
  const std::string header = bytes.substr(8, size_t(n));
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));

  const auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 4u);
  std::vector<std::string> names;
  for (const auto& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"empty", "model.embed_tokens.weight", "scalar",
                                             "special"}));  // sorted
  // Laid out in the given order, back to back.
  EXPECT_EQ(f->find("model.embed_tokens.weight")->begin, 0u);
  EXPECT_EQ(f->find("special")->begin, 42u * 4);
  EXPECT_EQ(f->find("scalar")->begin, 52u * 4);
  EXPECT_EQ(f->find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(f->find("scalar")->numel(), 1);
  EXPECT_EQ(f->find("empty")->numel(), 0);
  EXPECT_EQ(f->find("empty")->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(f->find("special")->dtype, "F32");
  EXPECT_EQ(f->find("nope"), nullptr);
  EXPECT_TRUE(f->metadata().is_object());
  EXPECT_TRUE(f->metadata().empty());

  for (const auto& [name, want] : std::vector<std::pair<std::string, const std::vector<float>*>>{
           {"model.embed_tokens.weight", &a}, {"special", &special}}) {
    const std::vector<float> got = read_all(*f, name);
    ASSERT_EQ(got.size(), want->size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(bits_of(got[i]), bits_of((*want)[i])) << name << "[" << i << "]";
  }
  EXPECT_EQ(read_all(*f, "scalar"), std::vector<float>{42.5f});
  EXPECT_TRUE(read_all(*f, "empty").empty());
}

TEST(Safetensors, LargeTensorsAreReadAndWrittenInChunks) {
  TempDir dir;
  const int64_t n = 3'000'000;  // 12 MB in F32, 6 MB in BF16: several chunks
  std::vector<float> v = testing::random_vec<float>(n, 2);
  for (auto& x : v) x = from_bits(bits_of(x) & 0xFFFF0000u);  // exact in bf16
  for (const std::string dtype : {"F32", "BF16"}) {
    const std::string path = dir / (dtype + ".safetensors");
    write_safetensors(path, {{"a", {1000, 3000}, v.data()}, {"b", {7}, v.data() + 11}}, dtype);
    const auto f = SafetensorsFile::open(path);
    const std::vector<float> got = read_all(*f, "a");
    ASSERT_EQ(got.size(), v.size());
    EXPECT_EQ(std::memcmp(got.data(), v.data(), v.size() * 4), 0) << dtype;
    EXPECT_EQ(read_all(*f, "b"), std::vector<float>(v.begin() + 11, v.begin() + 18)) << dtype;
  }
}

TEST(Safetensors, MetadataRoundTrip) {
  TempDir dir;
  const float x = 1;
  const json md = {{"format", "pt"}, {"note", "h\u00e9llo\nworld \"quoted\""}, {"empty", ""}};
  const std::string path = dir / "md.safetensors";
  write_safetensors(path, {{"x", {1}, &x}}, "F32", md);
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata(), md);
  // An empty metadata object writes no "__metadata__" entry.
  write_safetensors(path, {{"x", {1}, &x}}, "F32", json::object());
  EXPECT_EQ(read_bytes(path).find("__metadata__"), std::string::npos);
  EXPECT_TRUE(SafetensorsFile::open(path)->metadata().empty());
}

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

TEST(Safetensors, F16EveryValueRoundTrips) {
  TempDir dir;
  // Every half bit pattern, encoded by hand, read as float32 exactly.
  std::string data;
  for (uint32_t h = 0; h < 65536; ++h) data += char(h & 0xFF), data += char(h >> 8);
  const std::string path = dir / "all.safetensors";
  write_bytes(path,
              encode(R"({"h":{"dtype":"F16","shape":[65536],"data_offsets":[0,131072]}})", data));
  const std::vector<float> got = read_all(*SafetensorsFile::open(path), "h");
  ASSERT_EQ(got.size(), 65536u);
  std::vector<float> finite;
  std::vector<uint16_t> finite_bits;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = half_reference(uint16_t(h));
    if (std::isnan(want)) {
      // NaN stays NaN with its sign and payload.
      EXPECT_EQ(bits_of(got[h]), ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13)) << h;
      continue;
    }
    ASSERT_EQ(bits_of(got[h]), bits_of(want)) << "half 0x" << std::hex << h;
    finite.push_back(want);
    finite_bits.push_back(uint16_t(h));
  }
  // And every non-NaN half value written as F16 gives back its bit pattern.
  EXPECT_EQ(stored16(dir, finite, "F16"), finite_bits);
}

TEST(Safetensors, F16RoundsToNearestEven) {
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float in;
    uint16_t want;
  };
  const std::vector<Case> cases = {
      {1.0f, 0x3C00},
      {1.0f + 0x1p-11f, 0x3C00},                // tie: to even (down)
      {1.0f + 3 * 0x1p-11f, 0x3C02},            // tie: to even (up)
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},     // just above the tie
      {-(1.0f + 0x1p-11f + 0x1p-20f), 0xBC01},  // same, negative
      {65504.0f, 0x7BFF},                       // largest half
      {from_bits(0x477FEFFFu), 0x7BFF},         // just below 65520
      {65520.0f, 0x7C00},                       // tie above the largest: overflows to inf
      {1e10f, 0x7C00},                          // overflow
      {-1e10f, 0xFC00},                         // overflow, negative
      {FLT_MAX, 0x7C00},                        // overflow from the largest float
      {inf, 0x7C00},                            // infinities
      {-inf, 0xFC00},                           //
      {0.0f, 0x0000},                           // zeros keep their sign
      {-0.0f, 0x8000},                          //
      {0x1p-14f, 0x0400},                       // smallest normal
      {0x1p-24f, 0x0001},                       // smallest subnormal
      {0x1p-25f, 0x0000},                       // tie between 0 and 2^-24: to even (0)
      {from_bits(0x33000001u), 0x0001},         // just above: rounds up
      {-0x1p-25f, 0x8000},                      // negative tie: -0
      {3 * 0x1p-25f, 0x0002},                   // tie between 1 and 2 (x 2^-24): to even
      {5 * 0x1p-25f, 0x0002},                   // tie between 2 and 3: to even
      {0x1p-14f - 0x1p-25f, 0x0400},            // tie between 0x3FF and 0x400: to even
      {0x1p-14f - 3 * 0x1p-25f, 0x03FE},        // tie between 0x3FE and 0x3FF: to even
      {1023 * 0x1p-24f, 0x03FF},                // largest subnormal
      {0x1p-26f, 0x0000},                       // underflow
      {from_bits(0x00000001u), 0x0000},         // float subnormal: underflow
      {0.1f, 0x2E66},                           // 0.0999755859375 (0.1f is just below the tie)
      {-2.5f, 0xC100},                          //
  };
  std::vector<float> in;
  for (const auto& c : cases) in.push_back(c.in);
  const std::vector<uint16_t> got = stored16(dir, in, "F16");
  ASSERT_EQ(got.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(got[i], cases[i].want)
        << "case " << i << ": " << cases[i].in << " -> 0x" << std::hex << got[i];
  // NaN stays NaN.
  const std::vector<uint16_t> nan = stored16(
      dir, {from_bits(0x7FC00000u), from_bits(0x7F800001u), from_bits(0xFFFFFFFFu)}, "F16");
  for (const uint16_t h : nan) EXPECT_TRUE((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) << std::hex << h;
}

#ifdef __FLT16_MAX__
// Against the compiler's own float -> _Float16 conversion (round to nearest
// even) on a spread of float bit patterns covering every exponent.
TEST(Safetensors, F16MatchesCompilerConversion) {
  TempDir dir;
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float f = from_bits(uint32_t(u));
    if (!std::isnan(f)) in.push_back(f);
  }
  const std::vector<uint16_t> got = stored16(dir, in, "F16");
  ASSERT_EQ(got.size(), in.size());
  int bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const _Float16 h = static_cast<_Float16>(in[i]);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    if (got[i] != want && bad++ < 5)
      ADD_FAILURE() << "0x" << std::hex << bits_of(in[i]) << " -> 0x" << got[i] << ", compiler 0x"
                    << want;
  }
  EXPECT_EQ(bad, 0);
}
#endif

TEST(Safetensors, BF16RoundTripAndRounding) {
  TempDir dir;
  // Values exact in bfloat16 come back exactly (subnormals, inf, -0 included).
  std::vector<float> exact = testing::random_vec<float>(1000, 3, 100.0);
  for (auto& x : exact) x = from_bits(bits_of(x) & 0xFFFF0000u);
  for (const uint32_t b :
       {0x00010000u, 0x807F0000u, 0x7F800000u, 0xFF800000u, 0x80000000u, 0x7F7F0000u, 0x00800000u})
    exact.push_back(from_bits(b));
  const std::string path = dir / "bf16.safetensors";
  write_safetensors(path, {{"x", {int64_t(exact.size())}, exact.data()}}, "BF16");
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->find("x")->dtype, "BF16");
  const std::vector<float> back = read_all(*f, "x");
  for (size_t i = 0; i < exact.size(); ++i) ASSERT_EQ(bits_of(back[i]), bits_of(exact[i])) << i;

  struct Case {
    uint32_t in;
    uint16_t want;
  };
  const std::vector<Case> cases = {
      {bits_of(1.0f + 0x1p-8f), 0x3F80},             // tie: to even (down)
      {bits_of(1.0f + 3 * 0x1p-8f), 0x3F82},         // tie: to even (up)
      {bits_of(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81},  // above the tie
      {bits_of(-(1.0f + 0x1p-8f)), 0xBF80},          // negative tie
      {0x7F7FFFFFu, 0x7F80},                         // FLT_MAX overflows to inf
      {0x7F7F7FFFu, 0x7F7F},                         // just below the largest tie
      {0x00008000u, 0x0000},                         // subnormal tie: to even (0)
      {0x00018000u, 0x0002},                         // subnormal tie: to even (2)
      {0x00008001u, 0x0001},                         // subnormal above the tie
      {0x007FFFFFu, 0x0080},                         // largest subnormal rounds to FLT_MIN
      {bits_of(0.1f), 0x3DCD},                       //
  };
  std::vector<float> in;
  for (const auto& c : cases) in.push_back(from_bits(c.in));
  const std::vector<uint16_t> got = stored16(dir, in, "BF16");
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(got[i], cases[i].want)
        << "case " << i << ": 0x" << std::hex << cases[i].in << " -> 0x" << got[i];
  // NaN stays NaN, even where plain rounding would carry into inf or -0.
  const std::vector<uint16_t> nan = stored16(
      dir, {from_bits(0x7F800001u), from_bits(0x7FFFFFFFu), from_bits(0xFFC00000u)}, "BF16");
  for (const uint16_t h : nan) EXPECT_TRUE((h & 0x7F80) == 0x7F80 && (h & 0x7F)) << std::hex << h;
}

// ---------------------------------------------------------------------------
// A file encoded by hand
// ---------------------------------------------------------------------------

TEST(Safetensors, ReadsAHandEncodedFile) {
  TempDir dir;
  // Unpadded header, keys in no particular order, tensors not in name order.
  const std::string header = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("__metadata__":{"k":"v"},)"
                             R"("a":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
                             R"("h":{"dtype":"F16","shape":[],"data_offsets":[12,14]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[14,22]}})";
  const std::string data = std::string("\x00\x00\xC0\x3F", 4) +  // 1.5f
                           std::string("\x00\x00\x00\xC0", 4) +  // -2.0f
                           std::string("\x80\x3F", 2) +          // bf16 1.0
                           std::string("\x00\xBF", 2) +          // bf16 -0.5
                           std::string("\x55\x35", 2) +          // f16 0.333251953125
                           std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);  // int64 7
  ASSERT_EQ(data.size(), 22u);
  ASSERT_NE(header.size() % 8, 0u);
  const std::string path = dir / "hand.safetensors";
  write_bytes(path, encode(header, data));

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->tensors()[1].name, "b");
  EXPECT_EQ(f->tensors()[2].name, "h");
  EXPECT_EQ(f->tensors()[3].name, "i");
  EXPECT_EQ(f->find("a")->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f->find("a")->begin, 8u);
  EXPECT_EQ(f->find("a")->end, 12u);
  EXPECT_EQ(f->find("i")->dtype, "I64");
  EXPECT_EQ(f->metadata(), json({{"k", "v"}}));
  EXPECT_EQ(read_all(*f, "b"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(read_all(*f, "a"), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(read_all(*f, "h"), std::vector<float>{0.333251953125f});
  float out = 0;
  testing::expect_one_line(testing::thrown_message([&] { f->read_f32(*f->find("i"), &out); }),
                           {path, "'i'", "I64", "cannot be read as float32"});

  // Through SafetensorsModel (model.safetensors in a directory).
  fs::copy_file(path, dir / "model.safetensors");
  const SafetensorsModel m = SafetensorsModel::open_dir(dir.path());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "h", "i"}));
  EXPECT_EQ(m.file_of("h"), dir / "model.safetensors");
  std::vector<float> b(2);
  m.read_f32("b", {2}, b.data());
  EXPECT_EQ(b, (std::vector<float>{1.5f, -2.0f}));
  testing::expect_one_line(testing::thrown_message([&] { m.read_f32("i", {1}, &out); }),
                           {"'i'", "I64"});
}

// Model weights read for conversion must be finite (issue 19, B7): a NaN or
// inf is an error naming file, tensor and index; the file-level reader still
// returns special values as stored (the round-trip tests above).
TEST(Safetensors, ModelWeightsMustBeFinite) {
  TempDir dir;
  for (const float bad : {std::nanf(""), INFINITY}) {
    const std::vector<float> ok = {1, 2, 3}, poisoned = {0.5f, bad, 1};
    write_safetensors(dir / "model.safetensors",
                      {{"fine", {3}, ok.data()}, {"poisoned", {3}, poisoned.data()}}, "F32");
    const SafetensorsModel m = SafetensorsModel::open_dir(dir.path());
    std::vector<float> out(3);
    m.read_f32("fine", {3}, out.data());
    EXPECT_EQ(out, ok);
    testing::expect_one_line(
        testing::thrown_message([&] { m.read_f32("poisoned", {3}, out.data()); }),
        {dir / "model.safetensors", "'poisoned'", "non-finite", "index 1"});
  }
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

// Writes `bytes` to a fresh file and returns the error opening it gives.
std::string open_error(const TempDir& dir, const std::string& bytes) {
  static int count = 0;
  const std::string path = dir / ("bad" + std::to_string(count++) + ".safetensors");
  write_bytes(path, bytes);
  return testing::thrown_message([&] { SafetensorsFile::open(path); });
}

TEST(Safetensors, ValidationErrorsNameFileAndField) {
  TempDir dir;
  const std::string dir_prefix = dir / "bad";
  const std::string ok_entry = R"("ok":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');
  // Each: header, data, expected parts (besides the file name).
  struct Case {
    std::string header, data;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"not json", "", {"not valid JSON"}},
      {R"({"a": )", "", {"not valid JSON"}},
      {"[1,2]", "", {"not a JSON object"}},
      {R"({"w":5})", "", {"'w'", "not a JSON object"}},
      {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", data8, {"'w'", "missing field 'dtype'"}},
      {R"({"w":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", data8, {"'w'", "'dtype'"}},
      {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", data8, {"'w'", "missing field 'shape'"}},
      {R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", data8, {"'w'", "'shape'"}},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       data8,
       {"'w'", "'shape'", "non-negative integer"}},
      {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", data8, {"'w'", "'shape'"}},
      {R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", data8, {"'w'", "'shape'"}},
      {R"({"w":{"dtype":"F32","shape":[1]}})", data8, {"'w'", "missing field 'data_offsets'"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", data8, {"'w'", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
       data8,
       {"'w'", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
       data8,
       {"'w'", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})", data8, {"'w'", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
       data8,
       {"'w'", "data_offsets", "[8, 4]", "ends before it begins"}},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       data8,
       {"'w'", "data_offsets", "beyond the data area (8 bytes"}},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       data8,
       {"'w'", "data_offsets", "spans 8 bytes", "F32 [3] needs 12"}},
      {R"({"w":{"dtype":"I64","shape":[2,2],"data_offsets":[0,8]}})",
       data8,
       {"'w'", "I64 [2, 2] needs 32"}},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
       data8,
       {"'w'", "'shape'", "too many elements"}},
      {"{" + ok_entry + R"(,"v":{"dtype":"F16","shape":[2],"data_offsets":[6,10]}})",
       data8 + data8,
       {"'ok' [0, 8)", "'v' [6, 10)", "overlap"}},
      {"{" + ok_entry + R"(,"v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
       data8,
       {"'ok'", "'v'", "overlap"}},
      {"{" + ok_entry + R"(,"__metadata__":[1]})", data8, {"'__metadata__'", "not a JSON object"}},
      {"{" + ok_entry + R"(,"__metadata__":{"n":1}})",
       data8,
       {"'__metadata__'", "'n'", "not a string"}},
      {"{" + ok_entry + "," + ok_entry + "}", data8, {"'ok'", "twice"}},
      {R"({"new\nline":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
       data8,
       {"'new\\nline'", "spans 8 bytes"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].header);
    const std::string msg = open_error(dir, encode(cases[i].header, cases[i].data));
    testing::expect_one_line(msg, {dir_prefix});
    for (const auto& p : cases[i].parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
  }
  // Framing: too short, header length past the end of the file, absurd.
  testing::expect_one_line(open_error(dir, "\x01\x02\x03"), {dir_prefix, "3 bytes", "too short"});
  testing::expect_one_line(open_error(dir, ""), {dir_prefix, "0 bytes", "too short"});
  testing::expect_one_line(open_error(dir, le64(100) + "{}"),
                           {dir_prefix, "header length 100", "past the end of the file (10 bytes"});
  testing::expect_one_line(open_error(dir, le64(uint64_t(1) << 40) + "{}"),
                           {dir_prefix, "over the 100 MB limit"});
  testing::expect_one_line(open_error(dir, le64(0xFFFFFFFFFFFFFFFFull)), {dir_prefix, "100 MB"});
  // Missing file, directory.
  testing::expect_one_line(
      testing::thrown_message([&] { SafetensorsFile::open(dir / "nope.safetensors"); }),
      {dir / "nope.safetensors", "no such file"});
  testing::expect_one_line(testing::thrown_message([&] { SafetensorsFile::open(dir.path()); }),
                           {dir.path(), "directory"});
}

TEST(Safetensors, AcceptsUnknownDtypesEmptyTensorsAndGaps) {
  TempDir dir;
  // An unknown dtype is listed (no size check possible); an empty tensor may
  // sit anywhere; gaps between tensors are tolerated; extra fields ignored.
  const std::string header =
      R"({"q":{"dtype":"F4","shape":[5],"data_offsets":[0,3]},)"
      R"("e":{"dtype":"F32","shape":[0,2],"data_offsets":[1,1]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8],"extra":true}})";
  const std::string path = dir / "odd.safetensors";
  write_bytes(path, encode(header, std::string(3, '\0') + "\x7F" + std::string("\0\0\x80\x3F", 4)));
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->find("q")->dtype, "F4");
  EXPECT_EQ(read_all(*f, "x"), std::vector<float>{1.0f});
  EXPECT_TRUE(read_all(*f, "e").empty());
  float out[5];
  testing::expect_one_line(testing::thrown_message([&] { f->read_f32(*f->find("q"), out); }),
                           {path, "'q'", "F4"});
  // A SafeTensorInfo that does not belong to the file is refused, not read.
  SafeTensorInfo foreign = *f->find("x");
  foreign.shape = {100};
  foreign.end = 400;
  testing::expect_one_line(testing::thrown_message([&] { f->read_f32(foreign, out); }),
                           {path, "'x'", "do not fit"});
}

TEST(Safetensors, ReadsTheValidatedFileEvenAfterItIsReplaced) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  const std::vector<float> a = {1, 2, 3}, b = {4, 5, 6};
  write_safetensors(path, {{"x", {3}, a.data()}}, "F32");
  const auto f = SafetensorsFile::open(path);
  write_safetensors(path, {{"x", {3}, b.data()}}, "F32");  // rename over it
  EXPECT_EQ(read_all(*f, "x"), a);
  EXPECT_EQ(read_all(*SafetensorsFile::open(path), "x"), b);
}

// ---------------------------------------------------------------------------
// Writer errors and atomicity
// ---------------------------------------------------------------------------

TEST(Safetensors, WriterErrorsLeaveThePreviousFile) {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  const std::vector<float> v = {1, 2, 3, 4};
  write_safetensors(path, {{"x", {4}, v.data()}}, "F32");
  const std::string before = read_bytes(path);
  struct Case {
    std::vector<SafeTensorWrite> ws;
    std::string dtype;
    json md;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{{"x", {4}, v.data()}}, "F64", {}, {"dtype 'F64'", "F32, BF16, F16"}},
      {{{"x", {4}, v.data()}, {"x", {2}, v.data()}}, "F32", {}, {"'x'", "twice"}},
      {{{"", {4}, v.data()}}, "F32", {}, {"empty name"}},
      {{{"__metadata__", {4}, v.data()}}, "F32", {}, {"reserved"}},
      {{{"x", {-1, 4}, v.data()}}, "F32", {}, {"'x'", "negative"}},
      {{{"x", {4}, nullptr}}, "BF16", {}, {"'x'", "no data"}},
      {{{"x", {4}, v.data()}}, "F32", json::array({1}), {"metadata", "not a JSON object"}},
      {{{"x", {4}, v.data()}}, "F32", {{"n", 1}}, {"metadata", "'n'", "not a string"}},
      {{{std::string("bad\xFFutf8"), {4}, v.data()}}, "F32", {}, {"UTF-8"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const std::string msg = testing::thrown_message(
        [&] { write_safetensors(path, cases[i].ws, cases[i].dtype, cases[i].md); });
    testing::expect_one_line(msg, {path});
    for (const auto& p : cases[i].parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
    EXPECT_EQ(read_bytes(path), before);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
  // A directory in the way of the rename: the temporary is cleaned up.
  fs::create_directories(dir / "occupied.safetensors/inner");
  testing::expect_one_line(
      testing::thrown_message([&] {
        write_safetensors(dir / "occupied.safetensors", {{"x", {4}, v.data()}}, "F32");
      }),
      {"occupied.safetensors", "rename"});
  EXPECT_FALSE(fs::exists(dir / "occupied.safetensors.tmp"));
}

// ---------------------------------------------------------------------------
// Model directories
// ---------------------------------------------------------------------------

struct ModelTensors {
  std::vector<std::vector<float>> data;
  std::vector<SafeTensorWrite> ws;
};

// Five F32 tensors of 40, 40, 120, 20 and 20 bytes.
ModelTensors five_tensors() {
  ModelTensors m;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"model.embed_tokens.weight", {2, 5}},
      {"model.layers.0.input_layernorm.weight", {10}},
      {"model.layers.0.mlp.down_proj.weight", {3, 10}},
      {"model.norm.weight", {5}},
      {"lm_head.weight", {5, 1}}};
  m.data.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = 1;
    for (const int64_t d : specs[i].second) n *= d;
    m.data.push_back(testing::random_vec<float>(n, uint32_t(10 + i)));
  }
  for (size_t i = 0; i < specs.size(); ++i)
    m.ws.push_back({specs[i].first, specs[i].second, m.data[i].data()});
  return m;
}

void expect_model_reads_back(const std::string& dir, const ModelTensors& m) {
  const SafetensorsModel model = SafetensorsModel::open_dir(dir);
  std::vector<std::string> want;
  for (const auto& w : m.ws) want.push_back(w.name);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(model.names(), want);
  for (size_t i = 0; i < m.ws.size(); ++i) {
    const SafeTensorInfo* info = model.find(m.ws[i].name);
    ASSERT_NE(info, nullptr) << m.ws[i].name;
    EXPECT_EQ(info->shape, m.ws[i].shape);
    std::vector<float> got(m.data[i].size());
    model.read_f32(m.ws[i].name, m.ws[i].shape, got.data());
    EXPECT_EQ(std::memcmp(got.data(), m.data[i].data(), got.size() * 4), 0) << m.ws[i].name;
  }
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(SafetensorsModel, ShardedWriteAndReadBack) {
  TempDir dir;
  const ModelTensors m = five_tensors();
  const std::string d = dir / "model";
  // Limit 100 bytes: {40, 40} | {120: larger than the limit, alone} | {20, 20}.
  const std::vector<std::string> files =
      write_safetensors_model(d, m.ws, "F32", 100, {{"format", "pt"}});
  const std::string s1 = d + "/model-00001-of-00003.safetensors",
                    s2 = d + "/model-00002-of-00003.safetensors",
                    s3 = d + "/model-00003-of-00003.safetensors",
                    index = d + "/model.safetensors.index.json";
  EXPECT_EQ(files, (std::vector<std::string>{s1, s2, s3, index}));
  EXPECT_EQ(files_in(d), (std::set<std::string>{
                             "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                             "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const json idx = json::parse(read_bytes(index));
  EXPECT_EQ(idx["metadata"]["total_size"], 240);
  EXPECT_EQ(idx["weight_map"],
            json({{"model.embed_tokens.weight", "model-00001-of-00003.safetensors"},
                  {"model.layers.0.input_layernorm.weight", "model-00001-of-00003.safetensors"},
                  {"model.layers.0.mlp.down_proj.weight", "model-00002-of-00003.safetensors"},
                  {"model.norm.weight", "model-00003-of-00003.safetensors"},
                  {"lm_head.weight", "model-00003-of-00003.safetensors"}}));
  EXPECT_EQ(SafetensorsFile::open(s2)->tensors().size(), 1u);
  EXPECT_EQ(SafetensorsFile::open(s3)->find("lm_head.weight")->begin, 20u);  // offsets per shard
  EXPECT_EQ(SafetensorsFile::open(s1)->metadata(), json({{"format", "pt"}}));
  expect_model_reads_back(d, m);
  const SafetensorsModel model = SafetensorsModel::open_dir(d);
  EXPECT_EQ(model.file_of("model.norm.weight"), s3);
  EXPECT_EQ(model.file_of("model.embed_tokens.weight"), s1);

  // Shape mismatch and unknown names: one line, naming tensor, file, shapes.
  std::vector<float> buf(30);
  testing::expect_one_line(
      testing::thrown_message([&] {
        model.read_f32("model.layers.0.mlp.down_proj.weight", {10, 3}, buf.data());
      }),
      {s2, "'model.layers.0.mlp.down_proj.weight'", "has shape [3, 10]", "expected [10, 3]"});
  testing::expect_one_line(
      testing::thrown_message([&] { model.read_f32("nope", {1}, buf.data()); }), {index, "'nope'"});
  testing::expect_one_line(testing::thrown_message([&] { model.file_of("nope"); }),
                           {index, "'nope'"});
  EXPECT_EQ(model.find("nope"), nullptr);

  // BF16 halves the bytes: 20, 20, 60, 10, 10 under a limit of 50 gives
  // {20, 20} | {60} | {10, 10}, again 3 shards.
  const std::string d16 = dir / "bf16";
  EXPECT_EQ(write_safetensors_model(d16, m.ws, "BF16", 50).size(), 4u);
  const SafetensorsModel m16 = SafetensorsModel::open_dir(d16);
  EXPECT_EQ(m16.find("lm_head.weight")->dtype, "BF16");
  EXPECT_EQ(m16.file_of("model.layers.0.mlp.down_proj.weight"),
            d16 + "/model-00002-of-00003.safetensors");
  std::vector<float> got(5);
  m16.read_f32("lm_head.weight", {5, 1}, got.data());
  for (size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(got[i], m.data[4][i], std::fabs(m.data[4][i]) * 0x1p-8 + 1e-30);
}

TEST(SafetensorsModel, ReExportReplacesEarlierFiles) {
  TempDir dir;
  const ModelTensors m = five_tensors();
  const std::string d = dir.path();
  write_bytes(d + "/config.json", "{}");         // not ours: left alone
  write_safetensors_model(d, m.ws, "F32", 100);  // 3 shards
  // Everything fits: one model.safetensors, the index and shards go.
  EXPECT_EQ(write_safetensors_model(d, m.ws, "F32", 1000),
            std::vector<std::string>{d + "/model.safetensors"});
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model.safetensors"}));
  expect_model_reads_back(d, m);
  // Sharded again, now 2 shards ({40, 40, 120} | {20, 20}): the single file
  // goes, so readers do not keep preferring it.
  write_safetensors_model(d, m.ws, "F32", 200);
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors",
                                                "model.safetensors.index.json"}));
  expect_model_reads_back(d, m);
  // From 2 shards to 3: the old "-of-00002" shards go.
  write_safetensors_model(d, m.ws, "F32", 100);
  EXPECT_EQ(files_in(d).size(), 5u);
  EXPECT_FALSE(fs::exists(d + "/model-00001-of-00002.safetensors"));
  expect_model_reads_back(d, m);
  // An empty model.
  TempDir empty;
  write_safetensors_model(empty.path(), {}, "F32", 100);
  EXPECT_TRUE(SafetensorsModel::open_dir(empty.path()).names().empty());
  // Writer errors come before anything is touched.
  testing::expect_one_line(
      testing::thrown_message([&] { write_safetensors_model(d, m.ws, "F32", 0); }),
      {d, "max_shard_bytes"});
  std::vector<SafeTensorWrite> dup = m.ws;
  dup.push_back(m.ws[0]);
  testing::expect_one_line(
      testing::thrown_message([&] { write_safetensors_model(d, dup, "F32", 100); }),
      {d, "'model.embed_tokens.weight'", "twice"});
  testing::expect_one_line(
      testing::thrown_message([&] { write_safetensors_model(d, m.ws, "I8", 100); }), {d, "'I8'"});
  EXPECT_EQ(files_in(d).size(), 5u);
  expect_model_reads_back(d, m);
}

TEST(SafetensorsModel, IndexErrors) {
  TempDir dir;
  const ModelTensors m = five_tensors();
  const std::string d = dir / "model";
  write_safetensors_model(d, m.ws, "F32", 100);
  const std::string index = d + "/model.safetensors.index.json";
  const std::string good = read_bytes(index);
  const auto with_index = [&](const std::string& text) {
    write_bytes(index, text);
    return testing::thrown_message([&] { SafetensorsModel::open_dir(d); });
  };
  testing::expect_one_line(with_index("{\"weight_map\": {"), {index, "not valid JSON"});
  testing::expect_one_line(with_index("[]"), {index, "not a JSON object"});
  testing::expect_one_line(with_index("{}"), {index, "missing field 'weight_map'"});
  testing::expect_one_line(with_index(R"({"weight_map": []})"),
                           {index, "'weight_map'", "not an object"});
  testing::expect_one_line(with_index(R"({"metadata": 3, "weight_map": {}})"),
                           {index, "'metadata'"});
  testing::expect_one_line(with_index(R"({"weight_map": {"a": 1}})"),
                           {index, "'a'", "not a string"});
  testing::expect_one_line(with_index(R"({"weight_map": {"a": "../x.safetensors"}})"),
                           {index, "'a'", "'../x.safetensors'", "not a file name inside"});
  testing::expect_one_line(with_index(R"({"weight_map": {"a": "/etc/x.safetensors"}})"),
                           {index, "'a'", "not a file name inside"});
  // A name its shard lacks.
  json j = json::parse(good);
  j["weight_map"]["ghost.weight"] = "model-00002-of-00003.safetensors";
  testing::expect_one_line(
      with_index(j.dump()),
      {index, "'ghost.weight'", d + "/model-00002-of-00003.safetensors", "has no such tensor"});
  // A shard that does not exist.
  j = json::parse(good);
  j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  testing::expect_one_line(with_index(j.dump()), {index, "'model-00009-of-00009.safetensors'",
                                                  "'model.norm.weight'", "no such file"});
  write_bytes(index, good);
  fs::remove(d + "/model-00003-of-00003.safetensors");
  testing::expect_one_line(testing::thrown_message([&] { SafetensorsModel::open_dir(d); }),
                           {index, "model-00003-of-00003.safetensors", "does not exist"});
  // A corrupt shard: the shard's own error.
  write_bytes(d + "/model-00003-of-00003.safetensors", "garbage!!");
  testing::expect_one_line(testing::thrown_message([&] { SafetensorsModel::open_dir(d); }),
                           {d + "/model-00003-of-00003.safetensors", "header length"});
  // No model files at all; no directory.
  const std::string empty = dir / "empty";
  fs::create_directories(empty);
  testing::expect_one_line(testing::thrown_message([&] { SafetensorsModel::open_dir(empty); }),
                           {empty, "neither model.safetensors nor model.safetensors.index.json"});
  testing::expect_one_line(
      testing::thrown_message([&] { SafetensorsModel::open_dir(dir / "nope"); }),
      {dir / "nope", "no such directory"});
}

}  // namespace
}  // namespace strata
