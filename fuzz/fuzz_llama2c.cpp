// Fuzz target: llama2.c model files (legacy and version 1), as
// `strata convert llama2c <model.bin> <out.h5>` reads them (src/cli/convert.cpp).
//
// Input: the model.bin. It is read with read_llama2c, which checks the header
// and the file size and returns every tensor; each must have as many values as
// the config's parameter layout says (what convert copies into the model).
#include <cstdint>
#include <set>
#include <string>

#include "fuzz_util.h"
#include "io/llama2c.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path =
      scratch.write("model.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  return guarded([&] {
    const Llama2cModel m = read_llama2c(path);
    const ParamLayout layout(m.config);
    std::set<std::string> seen;
    for (const auto& [name, values] : m.tensors) {
      check(seen.insert(name).second, "tensor " + name + " returned twice");
      const int i = layout.find(name);
      check(i >= 0 && size_t(layout[i].numel) == values.size(),
            "tensor " + name + " does not match the config's layout");
    }
    check(seen.size() == layout.tensors().size(), "tensors missing from the result");
  });
}
