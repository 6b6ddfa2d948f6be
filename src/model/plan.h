// The layer plan: how the residual-stream executor runs each decoder layer.
// Module i = 1..2L (odd: attention, even: MLP), x_0 = embedding output.
//   standard: x_i = x_{i-1} + h_i(x_{i-1})
//   skip:     the layer is bypassed: x_{2l+2} = x_{2l} (its weights stay in
//             the checkpoint and get no gradient)
//   ladder:   x_i = x_{i-1} + h_i(x_{i-2}) with x_{-1} := x_0 (Ladder Residual:
//             each module reads the stream from two modules back, so its
//             all-reduce can overlap the next module's compute)
//   parallel: x_out = x_in + attn(n) + mlp(n), n = the attention's norm of
//             x_in (PaLM / GPT-J; one all-reduce per layer; the MLP's own
//             norm weights are unused); x_{2l+1} := x_out
//   nocomm:   a standard layer without its all-reduces (the communication-
//             free upper bound of the Ladder paper: benchmarks only)
//   lp:       Layer Parallelism, a pair (k, k+1) on one input x:
//             h = x + attn_k(x) + attn_{k+1}(x) (each with its own norm),
//             y = h + mlp_k(u) + mlp_{k+1}(u), u = h normed with
//             lp_alpha * g_k + (1 - lp_alpha) * g_{k+1} (the MLP norm weights);
//             x_{2k+1..2k+3} := h, x_{2k+4} = y
//   par:      the PAR approximation of Layer Parallelism's study (groups of
//             par_group layers, default 2, on one input x):
//             y = x + sum_i [A_i(x) + F_i(x + A_i(x))]; x_{2i+1} := x + A_i(x)
//             (layer i's MLP input), x_{2i+2} := x inside the group
//   spd:      SPD (Sync-Point Drop) block of degree g = spd_degree (default 2):
//             the attention's all-reduce dropped; each of g ranks (real, or
//             virtual within a process) runs its heads and MLP columns on its
//             own input: x_out = x + sum_j [P_j + MLP_j(x + P_j + b)] (+ b),
//             one all-reduce per layer; x_{2l+1} := x_in. Degree 1 is standard.
// The layers are grouped into units, the steps the executor takes: a unit is
// one layer, or (for kinds that couple layers) a pair. Early exits happen only
// at unit boundaries. Options after ';' apply to the whole plan
// ("standard*4,spd*28;spd_degree=8"); each belongs to a kind and is refused
// when no layer of that kind is in the plan. The Ladder, Layer-Parallel and
// SPD kinds are added as entries of kind_table() (plan.cpp) and files under
// model/kinds/ (DESIGN.md, "The layer plan and the residual-stream executor").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata {

enum class LayerKind { Standard, Skip, Ladder, Parallel, NoComm, Lp, Par, Shuffle, Spd };

// What the plan knows of a kind.
struct KindInfo {
  const char* name;
  LayerKind kind;
  int unit_size;  // layers per unit (0: the plan option par_group; -1: the whole run)
  std::vector<const char*> options;  // plan options this kind reads
  const char* summary;
  bool benchmark_only = false;  // computes nothing meaningful: only `strata bench` runs it
};
const std::vector<KindInfo>& kind_table();
const KindInfo& kind_info(LayerKind k);
const char* layer_kind_name(LayerKind k);

// Which ranks of a tensor-parallel group hold a layer's split tensors:
// `ranks` consecutive ranks from `first`, each holding 1/ranks of them.
struct TpShard {
  int first = 0, ranks = 1;
  bool operator==(const TpShard&) const = default;
};

// A step of the executor: `size` consecutive layers from `first`, one kind.
struct PlanUnit {
  LayerKind kind;
  int first = 0, size = 1;
  int end() const { return first + size; }
};

struct LayerPlan {
  std::vector<LayerKind> kinds;                              // one per decoder layer
  std::vector<std::pair<std::string, std::string>> options;  // in the order written

  static LayerPlan standard(int num_layers);
  // Text form: comma-separated entries "<kind>" or "<kind>*<n>", then
  // optionally ";key=value;key=value". Throws strata::Error with one line
  // naming the problem (unknown kind or option, bad count, layer total).
  static LayerPlan parse(const std::string& text, int num_layers);
  std::string to_string() const;  // run-length form, options included
  int num_layers() const { return static_cast<int>(kinds.size()); }

  std::vector<PlanUnit> units() const;
  // Layers per unit of kind k in this plan (-1: a unit is the whole run).
  int unit_size(LayerKind k) const;
  // Whether E (0..L) falls between units: the executor can stop after E
  // layers (early exit, self-speculative drafts, LayerSkip exit losses).
  bool unit_boundary(int E) const;
  // Throws a one-line error naming `what` when exit layer E is not allowed.
  void check_exit(int E, const std::string& what) const;
  // Every layer standard and no options: the plain Llama model (HF export).
  bool plain() const;
  // A kind that is only for benchmarks (nocomm) is in the plan.
  bool benchmark_only() const;
  // Throws a one-line error naming `what` when benchmark_only().
  void check_not_benchmark_only(const std::string& what) const;
  // Where each layer's split tensors live under tensor parallelism of `tp`
  // ranks: the whole group (Megatron-LM), except for the layers of a
  // Layer-Parallel pair (k, k+1) under an even tp, which take half of the
  // group each: layer k on ranks [0, tp/2), layer k+1 on [tp/2, tp) (the
  // paper's mapping: under tp 2 each rank runs one whole layer of the pair).
  std::vector<TpShard> tp_shards(int tp) const;
  // The value of an option, or nullptr.
  const std::string* option(const std::string& key) const;
  // A numeric option (checked when parsed), or `fallback` when absent.
  double number(const std::string& key, double fallback) const;
};

}  // namespace strata
