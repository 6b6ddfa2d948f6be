// Model surgery: checkpoints made from checkpoints, without training.
//
// Each file-to-file operation reads checkpoint `in` and writes `out` (another
// file: writing over the input is refused) with the tokenizer, step and state
// of `in`, state.converted_from saying what was done, and no optimizer state.
// Errors are one line starting with `what`, the caller's name for itself
// ("strata convert plan"), then ": ".
//   strata convert plan     convert_plan
//   strata convert weights  write_weights
//   strata lp merge         merge_layers
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "io/model_io.h"
#include "model/model.h"

namespace strata {

// Refuses (one line) an output path equal to the input's; every operation
// below checks it first, and a command may call it before parsing the rest.
void check_not_input(const std::string& in, const std::string& out, const std::string& what);

// Writes `model` to `out` as a checkpoint derived from `from` (read with
// load_model): its tokenizer, and its state with converted_from = `note`;
// weights rounded to bfloat16 where asked, its recipe where asked.
void save_converted(const std::string& out, Model<float>& model, const CheckpointInfo& from,
                    const std::string& note, bool bf16 = false, bool keep_recipe = false);

// The weights of `in` under another layer plan (a Hybrid Ladder model from a
// standard one, ...): the weights are unchanged, only the computation
// differs. Plans of benchmark-only kinds are refused.
struct PlanConversion {
  std::string plan;        // the plan written
  std::string saved_plan;  // the plan `in` was saved with
};
PlanConversion convert_plan(const std::string& in, const std::string& out, const std::string& plan,
                            const std::string& what);

// The weights of `in` alone (config, plan, tokenizer, recipe and step, no
// optimizer state), in float32 or rounded to bfloat16. Returns the size of
// `out` in bytes.
uint64_t write_weights(const std::string& in, const std::string& out, bool bf16,
                       const std::string& what);

// Layer Parallelism's merge (the study's section 3, c): layers [begin, end)
// of a standard model replaced by one layer whose every tensor (norms and
// biases included) is the element-wise mean of theirs; the layers above move
// down. The result has end - begin - 1 fewer layers and a standard plan.
std::unique_ptr<Model<float>> merge_layers(Model<float>& src, int begin, int end);

// The same from checkpoint to checkpoint. `range` names [begin, end) in
// errors (the caller's words, e.g. "--range 2:5"; default "layers B:E").
// Returns the layer count of `in`.
int merge_layers(const std::string& in, const std::string& out, int begin, int end,
                 const std::string& what, const std::string& range = "");

}  // namespace strata
