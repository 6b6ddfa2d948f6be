// strata's Jinja interpreter (core/jinja.h) against Python's jinja2: every
// template of lm-evaluation-harness 0.4.13's ARC, PIQA, MMLU, HellaSwag,
// WinoGrande, GSM8K and LAMBADA task folders rendered on documents in each
// dataset's schema, the Llama-2, Llama-3 and Llama-3.2 chat templates on
// conversations (with tools, tool calls, role errors), and targeted cases of
// the language, all rendered once by jinja2 (tests/fixtures/jinja/
// make_jinja_fixtures.py) and checked in: strata's text must equal jinja2's
// byte for byte, and where jinja2 raised, strata must raise too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <ctime>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/file.h"
#include "core/jinja.h"
#include "testing.h"

namespace strata::jinja {
namespace {

using strata::testing::error_of;

using json = nlohmann::ordered_json;

json fixture(const std::string& name) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/jinja/" + name;
  return json::parse(read_file(path, "jinja fixture"));
}

// The records of a fixture file: its top-level array, or the array under
// "records".
const json& records(const json& j) { return j.is_array() ? j : j.at("records"); }

// strftime_now as the fixtures' generator defines it: the date 2026-11-26.
Value fixed_strftime() {
  return Value::function([](Args& a) {
    std::tm t{};
    t.tm_year = 2026 - 1900;
    t.tm_mon = 10;
    t.tm_mday = 26;
    t.tm_wday = 4;
    char buf[128];
    const std::string f = a.positional.empty() ? "%d %b %Y" : a.positional[0].str();
    return Value(std::string(buf, std::strftime(buf, sizeof buf, f.c_str(), &t)));
  });
}

struct Outcome {
  int passed = 0;
  std::vector<std::string> failures;
};

// Renders one record and compares it with jinja2's text or error.
void check(const json& rec, const std::string& what, const Options& o, Value vars, Outcome& out) {
  std::string got;
  bool raised = false;
  try {
    got = Template(rec.at("template").get<std::string>(), what, o).render(vars);
  } catch (const Error& e) {
    got = e.what();
    raised = true;
  }
  if (rec.contains("error")) {
    if (raised)
      ++out.passed;
    else
      out.failures.push_back(what + ": jinja2 raised " + rec["error"].dump() + ", strata gave " +
                             json(got).dump());
    return;
  }
  const std::string want = rec.at("expected").get<std::string>();
  if (!raised && got == want) {
    ++out.passed;
    return;
  }
  out.failures.push_back(what + ": template " + rec["template"].dump() + "\n  want " +
                         json(want).dump() + "\n  got  " + json(got).dump());
}

void report(const Outcome& out, size_t expected_at_least) {
  for (size_t i = 0; i < out.failures.size() && i < 25; ++i) ADD_FAILURE() << out.failures[i];
  EXPECT_EQ(out.failures.size(), 0u) << out.passed << " passed";
  EXPECT_GE(size_t(out.passed), expected_at_least);
}

TEST(Jinja, EveryHarnessTaskTemplateRendersAsJinja2Does) {
  const json j = fixture("harness_templates.json");
  Outcome out;
  size_t k = 0;
  for (const json& rec : records(j)) {
    const std::string where = rec.contains("places") && !rec["places"].empty()
                                  ? rec["places"][0].get<std::string>()
                                  : "record " + std::to_string(k);
    Value doc = Value::from_json(rec.at("doc"));
    check(rec, where + " #" + std::to_string(k++), harness_options(), doc, out);
  }
  report(out, 100);
}

TEST(Jinja, LlamaChatTemplatesRenderAsTransformersDoes) {
  const json j = fixture("chat_templates.json");
  Outcome out;
  size_t k = 0;
  for (const json& rec : records(j)) {
    Value vars = Value::from_json(rec.at("variables"));
    vars.set("raise_exception", raise_exception_function());
    vars.set("strftime_now", fixed_strftime());
    check(rec, rec.value("name", "chat") + " #" + std::to_string(k++), chat_options(), vars, out);
  }
  report(out, 10);
}

TEST(Jinja, TargetedCasesRenderAsJinja2Does) {
  const json j = fixture("basics.json");
  Outcome out;
  size_t k = 0;
  for (const json& rec : records(j)) {
    const json o = rec.value("options", json::object());
    Options opt;
    opt.trim_blocks = o.value("trim_blocks", false);
    opt.lstrip_blocks = o.value("lstrip_blocks", false);
    opt.keep_trailing_newline = o.value("keep_trailing_newline", false);
    opt.strict_undefined = o.value("strict", false);
    opt.tojson_unsorted = o.value("tojson", std::string()) == "transformers";
    Value vars = Value::from_json(rec.value("variables", json::object()));
    vars.set("raise_exception", raise_exception_function());
    check(rec, "basics #" + std::to_string(k++), opt, vars, out);
  }
  report(out, 50);
}

TEST(Jinja, ErrorsNameTheTemplateLineAndColumn) {
  const Value none = Value::dict();
  EXPECT_EQ(error_of([&] { Template("a\n{{ x | nosuch }}", "t.yaml: doc_to_text").render(none); }),
            "t.yaml: doc_to_text:2:8: unknown filter 'nosuch'");
  EXPECT_EQ(error_of([] { Template("{% include 'x.j2' %}", "t"); }),
            "t:1:4: {% include %} is not supported (strata's Jinja has no template loader)");
  EXPECT_EQ(error_of([] { Template("{% for x in y %}", "t"); }),
            "t:1:4: unclosed 'for': expected 'else' before the end of the template");
  EXPECT_EQ(error_of([] { Template("{{ 'abc }}", "t"); }), "t:1:4: unterminated string literal");
  EXPECT_EQ(error_of([&] { Template("{{ x }}", "t", harness_options()).render(none); }),
            "t:1:4: 'x' is undefined");
  EXPECT_EQ(Template("[{{ x }}]", "t").render(none), "[]");  // lenient: undefined prints ""
  Value vars = Value::dict();
  vars.set("raise_exception", raise_exception_function());
  EXPECT_EQ(error_of([&] {
              Template("{{ raise_exception('roles must alternate') }}", "chat").render(vars);
            }),
            "chat:1:4: roles must alternate");
}

TEST(Jinja, HostileTemplatesAreErrorsNotCrashes) {
  for (const char* t :
       {"{{ 9223372036854775807 + 1 }}", "{{ 3 ** 64 }}", "{{ -(-9223372036854775807 - 1) }}",
        "{{ (-9223372036854775807 - 1) // -1 }}", "{{ [9223372036854775807, 1] | sum }}"})
    EXPECT_NE(error_of([&] { Template(t, "int").render(Value::dict()); }).find("overflow"),
              std::string::npos)
        << t;
  EXPECT_EQ(Template("{{ (-9223372036854775807 - 1) % 3 }}", "mod").render(Value::dict()), "1");
  const Value none = Value::dict();
  EXPECT_NE(error_of([] {
              Template("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}",
                       "deep");
            }).find("nested more than 200 levels deep"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of([&] { Template(ifs, "ifs"); }).find("nested more than"), std::string::npos);
  EXPECT_NE(
      error_of([&] {
        Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "loop").render(none);
      }).find("nested more than 100 deep"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { Template("{{ 'x' * 1000000000000 }}", "big").render(none); }).find("MiB"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] {
        Template("{% for i in range(100000) %}{{ 'x' * 4000 }}{% endfor %}", "long").render(none);
      }).find("passes 256 MiB"),
      std::string::npos);
}

TEST(Jinja, EvaluateKeepsTheValueOfALoneExpression) {
  Value doc = Value::dict();
  doc.set("sol1", Value("it's"));
  doc.set("sol2", Value("b"));
  const Value v = Template("{{[sol1, sol2]}}", "piqa", harness_options()).evaluate(doc);
  ASSERT_TRUE(v.is_list());
  EXPECT_EQ(v.items()[0].as_string(), "it's");
  EXPECT_EQ(Template("{{[sol1, sol2]}}", "piqa", harness_options()).render(doc), "[\"it's\", 'b']");
  EXPECT_TRUE(Template("x{{ sol1 }}", "t").evaluate(doc).is_string());
}

TEST(Jinja, PrintsNumbersAndStringsAsPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(float_repr(-2.5), "-2.5");
  EXPECT_EQ(string_repr("a'b"), "\"a'b\"");
  EXPECT_EQ(string_repr("a'b\""), "'a\\'b\"'");
  EXPECT_EQ(string_repr("tab\there\n"), "'tab\\there\\n'");
  EXPECT_EQ(string_repr("caf\xc3\xa9"), "'caf\xc3\xa9'");
  JsonStyle st;
  st.indent = 2;
  Value d = Value::dict();
  d.set("b", Value::list({Value(1), Value(2.5), Value(nullptr)}));
  d.set("a", Value("\xc3\xa9"));
  EXPECT_EQ(dump_json(d, st),
            "{\n  \"b\": [\n    1,\n    2.5,\n    null\n  ],\n  \"a\": \"\xc3\xa9\"\n}");
  st = {};
  st.sort_keys = true;
  st.ensure_ascii = true;
  EXPECT_EQ(dump_json(d, st), "{\"a\": \"\\u00e9\", \"b\": [1, 2.5, null]}");
}

}  // namespace
}  // namespace strata::jinja

namespace strata::jinja {
namespace {

// literal_eval reads what Python's ast.literal_eval reads (the values below
// are what Python prints for each), and nothing else.
TEST(JinjaLiteralEval, ReadsPythonLiterals) {
  EXPECT_EQ(literal_eval("[{'answer': 'A', 'options': ['x', \"it's\"]}, (1, -2.5)]").repr(),
            "[{'answer': 'A', 'options': ['x', \"it's\"]}, (1, -2.5)]");
  EXPECT_EQ(literal_eval("'a\\nb\\t\\x41\\u00e9\\\\\\''").str(), "a\nb\tA\xc3\xa9\\'");
  EXPECT_EQ(literal_eval("r'a\\n' 'b'").str(), "a\\nb");  // raw, then adjacent strings joined
  EXPECT_EQ(literal_eval("'''x\ny'''").str(), "x\ny");
  EXPECT_EQ(literal_eval("'\\d'").str(), "\\d");  // unknown escapes kept
  EXPECT_EQ(literal_eval(" (True, False, None, 1_000, 2e3) ").repr(),
            "(True, False, None, 1000, 2000.0)");
  EXPECT_EQ(literal_eval("(1,)").repr(), "(1,)");
  EXPECT_EQ(literal_eval("(1)").repr(), "1");
  EXPECT_EQ(literal_eval("{'a': 1, 'a': 2}").repr(), "{'a': 2}");
  EXPECT_EQ(literal_eval("[]").repr(), "[]");
  for (const char* bad : {"", "[1, 2", "x", "[1 2]", "{'a' 1}", "{1: 2}", "'abc", "'a\nb'", "1 2",
                          "99999999999999999999", "'\\x4'", "--1", "'\\U00110000'"})
    EXPECT_THROW(literal_eval(bad), Error) << bad;
  EXPECT_ERROR(literal_eval("[1, oops]"), "literal_eval: not a Python literal at offset 4");
  EXPECT_THROW(literal_eval(std::string(300, '[')), Error);  // nesting bound
}

TEST(JinjaLiteralEval, IsAFilterThatPassesStructuresThrough) {
  const Template t("{{ (p | literal_eval)[-1].q }}|{{ (l | literal_eval)[0] }}", "t",
                   harness_options());
  EXPECT_EQ(t.render(Value::from_json(nlohmann::json{{"p", "[{'q': 'one'}, {'q': 'two'}]"},
                                                     {"l", nlohmann::json::array({"x"})}})),
            "two|x");
}

}  // namespace
}  // namespace strata::jinja
