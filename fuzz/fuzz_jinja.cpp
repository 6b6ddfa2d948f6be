// Fuzz target: Jinja templates, as `strata eval --include-path` renders a task
// YAML's doc_to_* fields and `strata train` / `generate --chat` render a
// model's chat template (src/core/jinja.h).
//
// Input: the template text. The first byte picks the environment (even:
// lm-evaluation-harness's, strict; odd: transformers' chat environment); the
// rest is parsed and rendered with a conversation, a document and the chat
// globals, then evaluated as a lone expression. One-line strata::Errors are
// the expected way out; hangs and runaway memory are bounded by the
// interpreter itself (nesting, recursion, text size).
#include <cstdint>
#include <string>

#include "core/jinja.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  using jinja::Value;
  if (size == 0) return 0;
  const jinja::Options o = data[0] % 2 ? jinja::chat_options() : jinja::harness_options();
  const std::string source(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const Value vars = [] {
    Value v = Value::dict();
    v.set("messages",
          Value::list({Value::dict({{"role", Value("system")}, {"content", Value(" Be brief. ")}}),
                       Value::dict({{"role", Value("user")}, {"content", Value("Hi \xc3\xa9")}})}));
    v.set("bos_token", Value("<s>"));
    v.set("eos_token", Value("</s>"));
    v.set("add_generation_prompt", Value(true));
    v.set("question", Value("What is 2 + 2?"));
    v.set("choices", Value::dict({{"text", Value::list({Value("3"), Value("4")})},
                                  {"label", Value::list({Value("A"), Value("B")})}}));
    v.set("answer", Value(int64_t(1)));
    v.set("raise_exception", jinja::raise_exception_function());
    return v;
  }();
  guarded([&] {
    const jinja::Template t(source, "fuzz", o);
    t.render(vars);
    t.evaluate(vars);
  });
  return 0;
}
