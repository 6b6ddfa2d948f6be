// The layer plan: how the residual-stream executor runs each decoder layer.
// Module i = 1..2L (odd: attention, even: MLP), x_0 = embedding output.
//   standard: x_i = x_{i-1} + h_i(x_{i-1})
// The LayerSkip, Ladder, SPD and Layer-Parallel kinds are added to this plan
// (DESIGN.md, "The layer plan and the residual-stream executor"); a plan made
// only of standard layers is the plain Llama model.
#pragma once

#include <string>
#include <vector>

namespace strata {

enum class LayerKind { Standard };

struct LayerPlan {
  std::vector<LayerKind> kinds;  // one per decoder layer

  static LayerPlan standard(int num_layers);
  // Text form: one token per layer separated by commas ("standard,standard"),
  // or "<kind>*<n>" runs ("standard*6"). Throws strata::Error on bad input.
  static LayerPlan parse(const std::string& text, int num_layers);
  std::string to_string() const;  // compact run-length form
  int num_layers() const { return static_cast<int>(kinds.size()); }
};

const char* layer_kind_name(LayerKind k);

}  // namespace strata
