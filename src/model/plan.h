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
// one layer, or (for kinds that couple layers) a pair or a group. Early exits
// happen only at unit boundaries. Options after ';' apply to the whole plan
// ("standard*4,spd*28;spd_degree=8"); each belongs to a kind and is refused
// when no layer of that kind is in the plan.
//
// A kind is one row and one file: its line in model/kinds/kinds.def and its
// file model/kinds/<name>.cpp, which holds its rule (forward and backward
// against model/unit.h) and its KindInfo row below. The executor, the memory
// estimate, the inference engine, the plan's checks, `--help-recipe` and the
// tests that enumerate kinds read the row; nothing else switches on the kind
// (docs/architecture.md, "How to add a kind").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata {

enum class LayerKind {
#define STRATA_KIND(Enum, name) Enum,
#include "model/kinds/kinds.def"
#undef STRATA_KIND
};

struct LlamaConfig;
struct PlanUnit;
struct LayerPlan;
template <typename T>
class UnitForward;
template <typename T>
class UnitBackward;

// A plan option of a kind: a number in [lo, hi] (whole: an integer).
struct KindOption {
  const char* key;
  double lo, hi;
  bool whole;
  const char* help;
};

// The executor's buffers a kind needs beyond a standard layer's (the
// activation arena, Model::ensure_activations, and the memory estimate,
// model/memory.cpp, allocate them when a unit of the plan asks).
struct KindBuffers {
  // UnitBackward::d_ln(1): a second partial-gradient buffer (a reduction or
  // an input gradient kept in flight past the next module: ladder; the two
  // modules' gradients side by side: parallel, par). Under ZeRO-2/3 such a
  // unit may keep its gradient buckets open into the next unit.
  bool grad_slot_1 = false;
  // UnitBackward::d_ln(2): a third (pairs and groups of layers: lp, par).
  bool grad_slot_2 = false;
  // UnitForward::module_out(2): a running sum of a group's outputs (par).
  bool output_slot_2 = false;
  // SPD blocks: each layer keeps its virtual ranks' activations (also under
  // selective recomputation), and the block's scratch (spd).
  bool spd_block = false;

  KindBuffers& operator|=(const KindBuffers& o) {
    grad_slot_1 |= o.grad_slot_1;
    grad_slot_2 |= o.grad_slot_2;
    output_slot_2 |= o.output_slot_2;
    spd_block |= o.spd_block;
    return *this;
  }
};

// What a unit of a kind does at inference under tensor parallelism, as the
// plan search's cost model (infer/plan_cost.h) reads it. A unit of n layers
// runs its n attentions, then (when attention_sum) sums their output across
// the tp group, then its n MLPs, then (when mlp_sum) sums again: standard
// and ladder sum after each module, an lp pair once after both attentions
// and once after both MLPs, spd and parallel once per layer, nocomm never.
struct KindCost {
  bool computes = true;  // skip: the layer costs nothing
  bool attention_sum = true, mlp_sum = true;
  // Each module reads the stream two modules back (ladder), so the sum of
  // the module before it runs on the link while it computes.
  bool reads_two_back = false;
  // Differs from a standard layer only under tensor parallelism (spd: its
  // degree is the tp degree), so a search at tp 1 leaves it out.
  bool needs_tp = false;
  // How a pretrained model recovers from turning a standard layer into this
  // kind (`strata plan search`'s recovery recipe): Fine-tune its layers under
  // the plan (ladder, lp), Distill them (spd: SPD's Algorithm 1), or None.
  enum class Recovery { None, FineTune, Distill } recovery = Recovery::None;
};

// A kind's rule for elements of type T (model/kinds/<name>.cpp).
template <typename T>
struct KindCode {
  void (*forward)(UnitForward<T>&, const PlanUnit&) = nullptr;
  void (*backward)(UnitBackward<T>&, const PlanUnit&) = nullptr;
};

// Everything the rest of strata asks about a kind.
struct KindInfo {
  const char* name;
  LayerKind kind;
  // Layers per unit (-1: the whole run; 0: the value of the kind's first
  // option, default 2: par_group).
  int unit_size;
  const char* summary;  // one line of help (`strata train --help-recipe`)
  // A plan of four layers that uses the kind (the tests that must hold for
  // every kind enumerate these: reference, gradient check, tensor parallelism).
  const char* example;
  std::vector<KindOption> options = {};  // the plan options this kind reads
  KindBuffers buffers = {};
  // Computes nothing meaningful (nocomm skips the all-reduces): only `strata
  // bench` runs it.
  bool benchmark_only = false;
  // Why a KV cache cannot run it (nullptr: generation runs it).
  const char* no_generation = nullptr;
  // Keeps a stream after its attention that the layer above may read (a
  // ladder attention reads x_{i-2}, inside the unit below); "a par group"
  // and "an spd layer" have none.
  bool inner_stream = true;
  const char* unit_article = "a";  // "a par group", "an spd layer" (in errors)
  const char* unit_noun = "layer";
  // Reads the stream inside the unit below (ladder): needs inner_stream there,
  // and generation cannot start at it without that stream.
  bool reads_stream_below = false;
  // Under an even tp, the two layers of a unit live on the two halves of the
  // tensor-parallel group (lp: the paper's mapping, one layer per rank at tp 2).
  bool pair_on_tp_halves = false;
  KindCost cost = {};
  // Extra checks of a plan with this kind against the model and tp degree
  // (spd: spd_degree divides the heads and the MLP); throws a one-line error.
  void (*check)(const LayerPlan& plan, const LlamaConfig& cfg, int tp) = nullptr;
  KindCode<float> f32;
  KindCode<double> f64;

  template <typename T>
  const KindCode<T>& code() const;
};
template <>
inline const KindCode<float>& KindInfo::code<float>() const {
  return f32;
}
template <>
inline const KindCode<double>& KindInfo::code<double>() const {
  return f64;
}

// Every kind, in the order of kinds.def (the LayerKind order).
const std::vector<const KindInfo*>& kind_table();
const KindInfo& kind_info(LayerKind k);
const char* layer_kind_name(LayerKind k);
// Each kind with its summary and options, for help texts.
std::string kinds_help();

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
  // Throws a one-line error when a KV cache cannot run the plan.
  void check_generation() const;
  // Runs the kinds' own checks against the model and the tp degree.
  void check_model(const LlamaConfig& cfg, int tp) const;
  // The buffers the plan's kinds need beyond a standard layer's.
  KindBuffers buffers() const;
  // Whether a layer of a kind in this plan needs SPD's per-layer activations.
  bool spd_block(int layer) const;
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
