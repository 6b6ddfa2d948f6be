// Fuzz target: Hugging Face config.json files, as `strata convert hf <dir>`
// reads them (import_hf in src/io/hf.cpp), and as model.config in a recipe
// and the config stored in a checkpoint are read (LlamaConfig::from_json).
//
// Input: the config.json. It is read and checked the way import_hf does
// before it opens the weights (valid JSON, model_type, LlamaConfig::from_json),
// then the config's parameter count is taken (what a memory estimate uses) and
// it is written back with to_json(): `strata convert` writes that into
// exported directories and checkpoints, so it must read back to the same
// config.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/text.h"
#include "fuzz_util.h"
#include "model/config.h"

namespace {

bool same(const strata::LlamaConfig& a, const strata::LlamaConfig& b) {
  return a.to_json().dump() == b.to_json().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::fuzz;
  const Scratch& scratch = Scratch::get();
  scratch.clear();
  const std::string path =
      scratch.write("config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  return guarded([&] {
    // import_hf, up to SafetensorsModel::open_dir
    const std::string text = read_file(path, "config");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      fail(cat(path, ": not valid JSON (", e.what(), ")"));
    }
    if (j.contains("model_type") && j["model_type"].is_string())
      STRATA_CHECK(j["model_type"] == "llama", path, ": model_type '",
                   one_line(j["model_type"].get<std::string>()), "' is not supported (llama)");
    const LlamaConfig cfg = LlamaConfig::from_json(j, path);
    (void)cfg.num_parameters();
    LlamaConfig back;
    try {
      back = LlamaConfig::from_json(cfg.to_json(), "to_json()");
    } catch (const Error& e) {
      finding(std::string("to_json() output does not read back: ") + e.what());
    }
    check(same(cfg, back), "to_json() round trip changed the config: " + cfg.to_json().dump());
  });
}
