// Core utilities: Philox known-answer tests, buffers, errors, the layer plan,
// the model config and the command-line parser.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/targets.h"
#include "core/text.h"
#include "core/threads.h"
#include "model/config.h"
#include "model/params.h"
#include "model/plan.h"
#include "ops/types.h"
#include "testing.h"

namespace strata {
namespace {

// Known-answer vectors of Philox-4x32-10 from the Random123 distribution
// (kat_vectors): counter, key -> output.
// Busy: other runnable threads and ours exceed the CPUs. A serial test
// suite (ours alone) and MPI ranks of one thread each on their own cores are
// not busy; more threads of our own than CPUs, with nothing else running,
// are not either (that is the user's choice, not a shared machine).
// bench model/train: a step faster than the peak measured before it measures
// the peak again and keeps the larger; otherwise the first stands, unmeasured.
TEST(BenchPeak, ARateAboveTheFirstPeakMeasuresItAgain) {
  int calls = 0;
  auto again = [&](double v) {
    return [&calls, v] {
      ++calls;
      return v;
    };
  };
  EXPECT_DOUBLE_EQ(strata::cli::settled_peak(206.0, 137.0, again(500.0)), 206.0);
  EXPECT_EQ(calls, 0);
  EXPECT_DOUBLE_EQ(strata::cli::settled_peak(103.6, 136.9, again(206.0)), 206.0);
  EXPECT_EQ(calls, 1);
  // A second measurement lower still (busy again) keeps the first.
  EXPECT_DOUBLE_EQ(strata::cli::settled_peak(103.6, 136.9, again(90.0)), 103.6);
  EXPECT_EQ(calls, 2);
}

TEST(Threads, MachineBusyMeansOversubscribed) {
  EXPECT_FALSE(machine_busy(0, 2, 2));  // alone
  EXPECT_TRUE(machine_busy(2, 2, 2));   // another 2-thread process running
  EXPECT_TRUE(machine_busy(1, 2, 2));   // another thread beside our two
  EXPECT_FALSE(machine_busy(1, 1, 2));  // two 1-thread ranks on two cores
  EXPECT_FALSE(machine_busy(10, 16, 64));
  EXPECT_FALSE(machine_busy(0, 4, 2));  // only our own oversubscription
  EXPECT_TRUE(machine_busy(1, 1, 0));   // cpus 0 counts as 1
}

TEST(Philox, KnownAnswerVectors) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 r =
        philox4x32_10(Philox4x32{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i;
  }
}

TEST(Philox, StreamsAreDeterministicAndDistinct) {
  const PhiloxStream a(123, 1, 2), b(123, 1, 2), c(123, 1, 3), d(124, 1, 2);
  EXPECT_EQ(a.uniform(5), b.uniform(5));
  EXPECT_NE(a.uniform(5), c.uniform(5));
  EXPECT_NE(a.uniform(5), d.uniform(5));
  double mean = 0, var = 0, umin = 1, umax = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = a.normal(uint64_t(i));
    mean += z;
    var += z * z;
    const double u = a.uniform(uint64_t(i));
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_GT(umin, 0.0);
  EXPECT_LT(umax, 1.0);
}

// Text measured as Python measures str (the evaluation harness's len,
// strip and re.split(r"\s+")); expected values computed with Python 3.11.
TEST(Text, PythonStringRules) {
  EXPECT_EQ(utf8_length("abc"), 3);
  EXPECT_EQ(utf8_length("caf\xc3\xa9"), 4);                   // café: 5 bytes
  EXPECT_EQ(utf8_length("\xe2\x80\x94\xf0\x9f\x99\x82"), 2);  // em dash, emoji
  EXPECT_EQ(utf8_length("a\xff"
                        "b"),
            3);                           // a stray byte counts once
  EXPECT_EQ(utf8_length("\xe2\x80"), 2);  // a cut sequence: two stray bytes
  EXPECT_EQ(python_strip("  x y\t\n"), "x y");
  EXPECT_EQ(python_strip("\xc2\xa0x\xc2\x85"), "x");  // NBSP and NEL are whitespace
  EXPECT_EQ(python_strip("\xe3\x80\x80q\x1f"), "q");  // ideographic space, unit separator
  EXPECT_EQ(python_strip(" \t "), "");
  EXPECT_EQ(python_strip_end("Answer:\n\xc2\xa0 "), 7u);
  EXPECT_EQ(python_strip_end("  "), 0u);
  EXPECT_EQ(python_split_count("a b  c"), 3);
  EXPECT_EQ(python_split_count(" a b "), 4);  // ['', 'a', 'b', '']
  EXPECT_EQ(python_split_count(""), 1);       // ['']
  EXPECT_EQ(python_split_count("a\xe2\x80\x89"
                               "b"),
            2);  // thin space splits
  EXPECT_EQ(python_split_count("a\xc3\xa9"
                               "b"),
            1);
  using V = std::vector<std::string>;
  EXPECT_EQ(python_split("a/b//c", "/"), (V{"a", "b", "", "c"}));
  EXPECT_EQ(python_split("", "/"), (V{""}));
  EXPECT_EQ(python_split("x***", "**"), (V{"x", "*"}));
  EXPECT_EQ(python_replace("aaa", "aa", "b"), "ba");  // left to right, no overlaps
  EXPECT_EQ(python_replace("a.b.", ".", ".<stop>"), "a.<stop>b.<stop>");
  EXPECT_EQ(python_replace("abc", "x", "y"), "abc");
}

// The shared helpers of core/text.h: one trim, one edit distance, counts.
TEST(Text, TrimEditDistanceAndCounts) {
  EXPECT_EQ(trim(" \t x y \r\n\f\v"), "x y");
  EXPECT_EQ(trim(" \n x \n", " \t"), "\n x \n");  // only the characters asked for
  EXPECT_EQ(trim("  "), "");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim("\xc2\xa0x"), "\xc2\xa0x");  // ASCII only (python_strip does Unicode)
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("stpes", "steps"), 1u);  // a swap of neighbours is one edit
  EXPECT_EQ(edit_distance("summry", "summary"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);  // optimal string alignment, not Damerau's 2
  EXPECT_EQ(human_count(42), "42");
  EXPECT_EQ(human_count(7849), "7.8k");
  EXPECT_EQ(human_count(4.561e6), "4.56M");
  EXPECT_EQ(human_count(1.234e9), "1.23B");
  EXPECT_EQ(strprintf("%-6s|%8.3f|%d", "ab", 3.14159, 42), "ab    |   3.142|42");
  EXPECT_EQ(strprintf("%s", std::string(5000, 'x').c_str()).size(), 5000u);
  EXPECT_EQ(strprintf("%s", ""), "");
}

TEST(Buffer, AlignedZeroedAndMovable) {
  Buffer<float> b(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], 0.0f);
  b[3] = 2.0f;
  Buffer<float> c = std::move(b);
  EXPECT_EQ(c[3], 2.0f);
  EXPECT_EQ(b.size(), 0u);
  Buffer<double> big(size_t(5) << 20);  // huge-page path
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % (2 << 20), 0u);
}

TEST(Error, CheckMacroFormatsMessage) {
  try {
    STRATA_CHECK(1 + 1 == 3, "file ", "x.toml", ": line ", 7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "file x.toml: line 7");
  }
}

TEST(LayerPlan, ParseAndPrint) {
  const LayerPlan p = LayerPlan::parse("standard*3, standard", 4);
  EXPECT_EQ(p.num_layers(), 4);
  EXPECT_EQ(p.to_string(), "standard*4");
  EXPECT_TRUE(p.plain());
  EXPECT_EQ(LayerPlan::standard(1).to_string(), "standard");
  const LayerPlan q = LayerPlan::parse("standard*2,skip,standard", 4);
  EXPECT_EQ(q.to_string(), "standard*2,skip,standard");
  EXPECT_FALSE(q.plain());
  EXPECT_EQ(q.kinds[2], LayerKind::Skip);
  EXPECT_EQ(LayerPlan::parse(q.to_string(), 4).kinds, q.kinds);  // round trip
}

TEST(LayerPlan, UnitsAndExits) {
  const LayerPlan p = LayerPlan::parse("skip,standard*2", 3);
  const auto u = p.units();
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].kind, LayerKind::Skip);
  EXPECT_EQ(u[0].first, 0);
  EXPECT_EQ(u[2].first, 2);
  EXPECT_EQ(u[2].size, 1);
  for (int e = 0; e <= 3; ++e) EXPECT_TRUE(p.unit_boundary(e)) << e;
  EXPECT_FALSE(p.unit_boundary(4));
  p.check_exit(2, "exit layer");
  EXPECT_ERROR(p.check_exit(0, "exit layer"), "exit layer 0 is outside 1..3");
  EXPECT_ERROR(p.check_exit(4, "exit layer"), "exit layer 4 is outside 1..3");
}

TEST(LayerPlan, OneLineErrors) {
  EXPECT_ERROR(LayerPlan::parse("standard*3", 4), "layer plan 'standard*3' has 3 layers",
               "the model has 4");
  EXPECT_ERROR(LayerPlan::parse("pairs*4", 4), "unknown layer kind 'pairs'",
               "known: standard, skip, ladder");
  EXPECT_ERROR(LayerPlan::parse("standard*x", 1), "bad repeat count 'x'");
  EXPECT_ERROR(LayerPlan::parse("standard*0,standard", 1), "repeat count of 'standard*0'");
  EXPECT_ERROR(LayerPlan::parse("standard,,standard", 2), "empty entry");
  EXPECT_ERROR(LayerPlan::parse("", 2), "no layers");
  EXPECT_ERROR(LayerPlan::parse("standard*2;", 2), "empty option");
  EXPECT_ERROR(LayerPlan::parse("standard*2;spd_degree", 2),
               "option 'spd_degree' is not key=value");
  EXPECT_ERROR(LayerPlan::parse("standard*2;spd_degree=", 2), "needs a key and a value");
  EXPECT_ERROR(LayerPlan::parse("standard*2;frobnicate=1", 2), "unknown option 'frobnicate'");
  EXPECT_ERROR(LayerPlan::parse("standard*99999999", 2), "bad repeat count");
}

nlohmann::json tiny_config_json() {
  return {{"vocab_size", 32},       {"hidden_size", 16},        {"intermediate_size", 40},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"rope_theta", 500000.0}, {"rms_norm_eps", 1e-6},     {"tie_word_embeddings", true}};
}

TEST(LlamaConfig, FromJsonFillsDefaultsAndRoundTrips) {
  const LlamaConfig c = LlamaConfig::from_json(tiny_config_json(), "config.json");
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.qkv_dim(), 16 + 2 * 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  const LlamaConfig d = LlamaConfig::from_json(c.to_json(), "round trip");
  EXPECT_EQ(d.to_json(), c.to_json());
}

// transformers 4 (rope_theta + rope_scaling) and 5 (rope_parameters) spell
// the same RoPE settings differently; both read the same.
TEST(LlamaConfig, RopeScalingInBothTransformersForms) {
  auto v4 = tiny_config_json();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"rope_type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  auto v5 = tiny_config_json();
  v5.erase("rope_theta");
  v5["rope_parameters"] = v4["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  const LlamaConfig a = LlamaConfig::from_json(v4, "v4"), b = LlamaConfig::from_json(v5, "v5");
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.rope_scaling.type, "llama3");
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(b.rope_theta, 500000.0);
  EXPECT_EQ(a.rope_inv_freq(), b.rope_inv_freq());
  EXPECT_EQ(LlamaConfig::from_json(a.to_json(), "round trip").to_json(), a.to_json());
  v4["rope_scaling"].erase("low_freq_factor");
  EXPECT_THROW(LlamaConfig::from_json(v4, "v4"), Error);
}

TEST(LlamaConfig, ErrorsNameTheFileAndField) {
  auto expect_error = [](nlohmann::json j, const std::string& needle) {
    try {
      LlamaConfig::from_json(j, "cfg.json");
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  auto j = tiny_config_json();
  j.erase("hidden_size");
  expect_error(j, "hidden_size");
  j = tiny_config_json();
  j["num_key_value_heads"] = 3;
  expect_error(j, "num_key_value_heads");
  j = tiny_config_json();
  j["vocab_size"] = "many";
  expect_error(j, "vocab_size");
  j = tiny_config_json();
  j["rope_scaling"] = {{"rope_type", "dynamic"}};
  expect_error(j, "rope_scaling");
  j = tiny_config_json();
  j["hidden_act"] = "gelu";
  expect_error(j, "hidden_act");
}

TEST(ParamLayout, NamesCountsAndFusedGroups) {
  LlamaConfig c = LlamaConfig::from_json(tiny_config_json(), "t");
  for (bool tied : {true, false})
    for (bool bias : {false, true}) {
      c.tie_word_embeddings = tied;
      c.attention_bias = bias;
      const ParamLayout L(c);
      int64_t total = 0;
      for (const auto& t : L.tensors()) total += t.numel;
      EXPECT_EQ(total, c.num_parameters());
      EXPECT_EQ(L.lm_head >= 0, !tied);
      EXPECT_GE(L.find("model.layers.1.mlp.down_proj.weight"), 0);
      EXPECT_EQ(L.find("model.layers.2.mlp.down_proj.weight"), -1);
      for (const auto& layer : L.layers) {
        // q|k|v and gate|up are single matrices in memory.
        EXPECT_EQ(L[layer.k].offset, L[layer.q].offset + L[layer.q].numel);
        EXPECT_EQ(L[layer.v].offset, L[layer.k].offset + L[layer.k].numel);
        EXPECT_EQ(L[layer.up].offset, L[layer.gate].offset + L[layer.gate].numel);
        if (bias) {
          EXPECT_EQ(L[layer.k_bias].offset, L[layer.q_bias].offset + L[layer.q_bias].numel);
          EXPECT_EQ(L[layer.v_bias].offset, L[layer.k_bias].offset + L[layer.k_bias].numel);
        }
      }
      for (size_t i = 1; i < L.tensors().size(); ++i)
        EXPECT_GE(L[int(i)].offset, L[int(i) - 1].offset + L[int(i) - 1].numel);
    }
}

// One vocabulary: dashes and underscores alike, other names (aliases) for an
// option, --checkpoint in place of a positional checkpoint (the other
// positionals keep their order), a near miss answered with the option, one
// default per option in help.
TEST(Args, AliasesCheckpointOptionAndSuggestions) {
  cli::Args a("strata x", "test");
  a.positional("in.h5", "in").positional("out.h5", "out").checkpoint_option("in.h5");
  a.option("batch-size", "N", "batch", "8")
      .option("shots", "N", "shots (default: the task's)", "-1");
  a.alias("num_fewshot", "shots");
  const std::string help = a.help();
  const char* argv[] = {"strata",       "x",    "o.h5",           "--batch_size", "3",
                        "--checkpoint", "i.h5", "--num_fewshot=5"};
  ASSERT_TRUE(a.parse(8, const_cast<char**>(argv), 2));
  EXPECT_EQ(a.get("in.h5"), "i.h5");
  EXPECT_EQ(a.get("out.h5"), "o.h5");
  EXPECT_EQ(a.get_int("batch-size"), 3);
  EXPECT_EQ(a.get_int("shots"), 5);
  EXPECT_NE(help.find("(also --num_fewshot)"), std::string::npos) << help;
  EXPECT_EQ(help.find("(default: -1)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default: 8)"), std::string::npos) << help;
  cli::Args b("strata x", "test");
  b.option("max-new-tokens", "N", "tokens", "64");
  const char* near[] = {"strata", "x", "--max-new-token", "3"};
  try {
    b.parse(4, const_cast<char**>(near), 2);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "strata x: unknown option '--max-new-token' (did you mean --max-new-tokens? see "
                 "strata x --help)");
  }
  cli::Args c("strata x", "test");
  c.option("max-new-tokens", "N", "tokens", "64");
  const char* far[] = {"strata", "x", "--zzz", "3"};
  try {
    c.parse(4, const_cast<char**>(far), 2);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "strata x: unknown option '--zzz' (see strata x --help)");
  }
  EXPECT_EQ(canonical_dtype("Float32"), "fp32");
  EXPECT_EQ(canonical_dtype("bfloat16"), "bf16");
  EXPECT_EQ(canonical_dtype("f16"), "fp16");
  EXPECT_EQ(canonical_dtype("int8"), "int8");
}

TEST(Args, ParsesOptionsFlagsAndPositionals) {
  cli::Args a("strata x", "test");
  a.option("steps", "N", "steps", "10").flag("fast", "go fast").positional("recipe", "file");
  const char* argv[] = {"strata", "x", "r.toml", "--steps=7", "--fast"};
  ASSERT_TRUE(a.parse(5, const_cast<char**>(argv), 2));
  EXPECT_EQ(a.get("recipe"), "r.toml");
  EXPECT_EQ(a.get_int("steps"), 7);
  EXPECT_TRUE(a.has("fast"));
  cli::Args b("strata x", "test");
  b.option("steps", "N", "steps", "10");
  const char* bad[] = {"strata", "x", "--stpes", "3"};
  EXPECT_THROW(b.parse(4, const_cast<char**>(bad), 2), Error);
  const char* nonint[] = {"strata", "x", "--steps", "ten"};
  ASSERT_TRUE(b.parse(4, const_cast<char**>(nonint), 2));
  EXPECT_THROW(b.get_int("steps"), Error);
}

}  // namespace
}  // namespace strata
