// Fuzz target: safetensors weights of a Hugging Face model directory, as
// `strata convert hf <dir>` reads them (import_hf in src/io/hf.cpp).
//
// Input: one part (fuzz_util.h) is a model.safetensors; two or more are a
// model.safetensors.index.json followed by the shards
// model-00001-of-00002.safetensors and model-00002-of-00002.safetensors.
// The directory is opened with SafetensorsModel::open_dir, then every tensor
// is looked up and, when it has at most 1M elements, read as float32 with its
// own shape (import_hf reads each with the shape the config asks for).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  const std::vector<std::string> parts = split_parts(data, size, 3);
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  if (parts.size() == 1) {
    scratch.write("model.safetensors", parts[0]);
  } else {
    scratch.write("model.safetensors.index.json", parts[0]);
    scratch.write("model-00001-of-00002.safetensors", parts[1]);
    if (parts.size() > 2) scratch.write("model-00002-of-00002.safetensors", parts[2]);
  }
  return guarded([&] {
    const SafetensorsModel m = SafetensorsModel::open_dir(scratch.dir());
    std::vector<float> buf;
    for (const std::string& name : m.names()) {
      const SafeTensorInfo* t = m.find(name);
      check(t != nullptr, "names() lists '" + name + "' but find() does not know it");
      (void)m.file_of(name);
      if (t->numel() > (int64_t(1) << 20)) continue;
      buf.assign(size_t(t->numel()), 0.0f);
      m.read_f32(name, t->shape, buf.data());
    }
  });
}
