// SPD, Sync-Point Drop (Han-Byul Kim et al., "SPD: Sync-Point Drop for
// Efficient Tensor Parallelism of Large Language Models"): the all-reduce after the attention is
// dropped. Each of the spd_degree ranks (real tp ranks, or virtual ones when
// one process simulates several) feeds its MLP columns its own attention
// output: h_j = x + P_j (+ b); P_j goes into the block's one reduction with
// the MLP partials, and x and the o bias are added once after it:
//   out = x + reduce_from_tp(sum_j [P_j + MLP_j(h_j)]) + b
// (the paper's Figure 3, with and without bias). Degree 1 is the standard
// layer. The block has no common mid stream: x_{2l+1} := x_{2l}. Backward,
// each rank knows the gradient through its own heads and MLP inputs only, so
// the block's one reduction sums that (with the norm and bias gradients it
// makes partial) instead of the attention's normed-input gradient.
#include <string>
#include <utility>

#include "core/error.h"
#include "model/config.h"
#include "model/kinds/kinds.h"

namespace strata {

void check_spd_degree(const LlamaConfig& cfg, int g, int tp, const std::string& plan_text) {
  STRATA_CHECK(g >= 1 && g % tp == 0, "layer plan '", plan_text, "': spd_degree = ", g,
               " is not a multiple of tp = ", tp,
               " (each process runs spd_degree / tp virtual ranks)");
  for (const auto& [n, what] :
       {std::pair<int, const char*>{cfg.num_attention_heads, "num_attention_heads"},
        {cfg.num_key_value_heads, "num_key_value_heads"},
        {cfg.intermediate_size, "intermediate_size"}})
    STRATA_CHECK(n % g == 0, "layer plan '", plan_text, "': spd_degree = ", g, " must divide ",
                 what, " (", n, ")");
}

std::string spd_plan_text(int L, const std::vector<bool>& spd, int g) {
  LayerPlan p = LayerPlan::standard(L);
  bool any = false;
  for (int l = 0; l < L; ++l)
    if (spd[size_t(l)]) {
      p.kinds[size_t(l)] = LayerKind::Spd;
      any = true;
    }
  if (any) p.options.emplace_back("spd_degree", std::to_string(g));
  return p.to_string();
}

}  // namespace strata

namespace strata::kinds {

namespace {
void check_spd_plan(const LayerPlan& plan, const LlamaConfig& cfg, int tp) {
  check_spd_degree(cfg, int(plan.number("spd_degree", 2)), tp, plan.to_string());
}
}  // namespace

template <typename T>
void spd_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  if (f.plan().number("spd_degree", 2) == 1) return standard_layer_forward(f, l, i);
  ops::ActIn<T> x = f.stream(i - 1);
  ops::Act<T> s = f.module_out(1);
  f.spd_block(l, x, s);
  f.add_o_bias(l, s);
  f.reduce_from_tp(s);
  f.copy(f.stream(i), f.stream(i - 1));
  f.residual(f.stream(i + 1), f.stream(i - 1), s);
}

template <typename T>
void spd_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  if (b.plan().number("spd_degree", 2) == 1) return standard_layer_backward(b, l, i);
  ops::Act<T> g = b.grad();  // dL/dout; becomes dL/dx
  b.settle(i);               // x_{2l+1} is x_{2l}: what read it joins dL/dx
  b.settle(i - 1);
  b.o_bias_backward(l, g);
  b.spd_block_backward(l, g, g);  // the residual x passes g; the block adds the rest
}

const KindInfo& spd_kind() {
  static const KindInfo info{
      .name = "spd",
      .kind = LayerKind::Spd,
      .unit_size = 1,
      .summary =
          "SPD (Sync-Point Drop): the attention all-reduce dropped at tensor-parallel degree "
          "spd_degree (default 2; simulated exactly on fewer processes); one all-reduce per layer",
      .example = "standard,spd*3;spd_degree=2",
      .options = {{"spd_degree", 1, 4096, true,
                   "the tensor-parallel degree whose attention sync is dropped (default 2)"}},
      .buffers = {.spd_block = true},
      .inner_stream = false,
      .unit_article = "an",
      .unit_noun = "spd layer",
      .cost = {.attention_sum = false, .needs_tp = true, .recovery = KindCost::Recovery::Distill},
      .check = check_spd_plan,
      .f32 = {spd_forward<float>, spd_backward<float>},
      .f64 = {spd_forward<double>, spd_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
