// Models built from other models for tests: the same weights without one
// layer (what a skipped layer must equal).
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "model/model.h"

namespace strata::testing {

// Tensor `name` of layer `from` renamed to layer `to` ("" when from == skip).
inline std::string layer_renamed(const std::string& name, int skip) {
  const std::string pre = "model.layers.";
  if (name.rfind(pre, 0) != 0) return name;
  const size_t dot = name.find('.', pre.size());
  const int l = std::stoi(name.substr(pre.size(), dot - pre.size()));
  if (l == skip) return "";
  return pre + std::to_string(l > skip ? l - 1 : l) + name.substr(dot);
}

// The model with layer `skip` removed: its tensors (this rank's parts under
// tp) copied by name, layers above `skip` moved down by one.
inline std::unique_ptr<Model<float>> without_layer(Model<float>& m, int skip,
                                                   Communicator* tp = nullptr) {
  LlamaConfig c = m.config();
  c.num_hidden_layers -= 1;
  auto r = std::make_unique<Model<float>>(c, LayerPlan::standard(c.num_hidden_layers),
                                          ops::make_backend<float>(), tp);
  for (size_t t = 0; t < m.layout().tensors().size(); ++t) {
    const std::string name = layer_renamed(m.layout()[int(t)].name, skip);
    for (size_t u = 0; !name.empty() && u < r->layout().tensors().size(); ++u)
      if (r->layout()[int(u)].name == name)
        std::copy_n(m.param(int(t)), m.layout()[int(t)].numel, r->param(int(u)));
  }
  return r;
}

}  // namespace strata::testing
