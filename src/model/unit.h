// What a layer kind sees of the executor. A kind (model/kinds/<kind>.cpp) is
// the rule of one plan unit: which stream each module reads, where the
// tensor-parallel reductions happen, where the o_proj bias goes and how the
// residual adds up, forward and backward. It is written once against these
// interfaces; the executor implements them for training and evaluation
// (Model: the sequence attention, every stream kept, LayerSkip's kept samples)
// and for generation (KvEngine: the KV-cache attention, streams in a ring).
//
// Streams: x_0 is the embedding output; module i = 1..2L (attention 2l+1, MLP
// 2l+2 of layer l) produces x_i. Tensor parallelism uses the conjugate pairs
// of Megatron-LM, named the same way:
//   reduce_from_tp: all-reduce forward (row-parallel outputs), identity backward
//   copy_to_tp:     identity forward (column-parallel inputs), all-reduce backward
// Alone (tp = 1) every reduction is a no-op. Outstanding async reductions
// progress between the module calls (the executor polls after each module).
#pragma once

#include <cstdint>

#include "model/plan.h"
#include "ops/dtype.h"

namespace strata {

// One forward pass over rows() rows of hidden_size values per stream.
template <typename T>
class UnitForward {
 public:
  virtual ~UnitForward() = default;
  virtual const LayerPlan& plan() const = 0;  // for the plan's options
  // The number of this forward pass (0, 1, ...): what varies between passes
  // (the shuffle kind's permutation) is a function of it.
  virtual uint64_t pass() const = 0;
  virtual ops::Act<T> stream(int i) = 0;
  // A buffer of rows x C for the output of a module (slot 0: attention, 1: MLP;
  // slot 2, where the plan has par groups, for their running sum).
  virtual ops::Act<T> module_out(int slot) = 0;
  // This rank's partial output of a module of `layer` applied to x.
  virtual void attention(int layer, ops::ActIn<T> x, ops::Act<T> partial) = 0;
  virtual void mlp(int layer, ops::ActIn<T> x, ops::Act<T> partial) = 0;
  // The MLP normalising x with the attention's norm weights (a shared pre-norm).
  virtual void mlp_shared_norm(int layer, ops::ActIn<T> x, ops::Act<T> partial) = 0;
  // The MLP of `layer` normalising x with alpha * (MLP norm weights of layer
  // a) + (1 - alpha) * (those of layer b) (Layer Parallelism's shared norm).
  virtual void mlp_mixed_norm(int layer, int a, int b, double alpha, ops::ActIn<T> x,
                              ops::Act<T> partial) = 0;
  // SPD: this rank's partial output of layer's SPD block at the plan's
  // spd_degree (modules.h, spd_block_partial): the sum over its virtual ranks
  // of P_j + MLP_j(x + P_j + b). No reduction, no o bias, no residual.
  virtual void spd_block(int layer, ops::ActIn<T> x, ops::Act<T> partial) = 0;
  // Adds layer's o_proj bias (if the model has one) on one rank of the tp group.
  virtual void add_o_bias(int layer, ops::Act<T> partial) = 0;
  // reduce_from_tp forward: sum of the partials over the tp group, in place.
  virtual void reduce_from_tp(ops::Act<T> buf) = 0;
  // The same, started asynchronously; wait(handle) before reading buf.
  virtual int64_t reduce_from_tp_async(ops::Act<T> buf) = 0;
  virtual void wait(int64_t handle) = 0;
  // Deferred residual, for kinds whose reductions overlap the next module:
  // stream `out` becomes stream `base` + buf once the async reduction `handle`
  // (-1: none) has completed. Nothing happens now; the executor materialises
  // pending streams in the order they were deferred, when stream(out) is read
  // and at the end of the pass (before the head, an exit, or a unit of another
  // kind). buf and stream(base) must stay untouched until then.
  virtual void defer_residual(int out, int base, ops::Act<T> buf, int64_t handle) = 0;
  // out = a + b (out may alias either); copy of a whole stream.
  virtual void residual(ops::Act<T> out, ops::ActIn<T> a, ops::ActIn<T> b) = 0;
  virtual void copy(ops::Act<T> dst, ops::ActIn<T> src) = 0;
};

// The backward of a training pass, walking units from the last to the first.
template <typename T>
class UnitBackward {
 public:
  virtual ~UnitBackward() = default;
  virtual const LayerPlan& plan() const = 0;
  virtual uint64_t pass() const = 0;  // the number of the forward pass this is the backward of
  // The forward's streams (settling x_i's deferred input gradients first).
  virtual ops::Act<T> stream(int i) = 0;
  // The running gradient: dL/dx of the unit's output stream on entry, of its
  // input stream on return.
  virtual ops::Act<T> grad() = 0;
  // Scratch for the partial gradient of a module's normed input (rows x C);
  // slot 1 is a second buffer for kinds that keep one reduction in flight
  // (d_ln() is slot 0); slot 2 a third, for pairs of layers (lp), which must
  // leave slot 1 alone until they settle what a ladder layer above left there.
  virtual ops::Act<T> d_ln(int slot) = 0;
  ops::Act<T> d_ln() { return d_ln(0); }
  // Deferred input gradient, for kinds whose copy_to_tp overlaps the next
  // module's backward: once `handle` (-1: none) completes, the input norm
  // backward of `layer`'s attention (mlp = false) or MLP, whose input is
  // stream `stream`, adds its gradient of d_ln to dL/dx_stream. The executor
  // applies it when the walk reaches that stream: settle(stream), a read of
  // stream(stream) (so a kind about to run a norm backward on x_stream has the
  // whole gradient), or at the latest before the embedding's backward.
  virtual void defer_input_grad(int stream, int layer, bool mlp, ops::Act<T> d_ln,
                                int64_t handle) = 0;
  // Adds every deferred input gradient of x_stream to grad() (the running
  // gradient must then be the rest of dL/dx_stream).
  virtual void settle(int stream) = 0;
  // From dout (gradient of the module's output) to this rank's partial d_ln;
  // weight gradients accumulate.
  virtual void attention_backward(int layer, ops::ActIn<T> dout, ops::Act<T> d_ln) = 0;
  virtual void mlp_backward(int layer, ops::ActIn<T> dout, ops::Act<T> d_ln) = 0;
  // dx += the input norm's backward of d_ln (x: the module's input stream).
  virtual void attention_norm_backward(int layer, ops::ActIn<T> x, ops::ActIn<T> d_ln,
                                       ops::Act<T> dx) = 0;
  virtual void mlp_norm_backward(int layer, ops::ActIn<T> x, ops::ActIn<T> d_ln,
                                 ops::Act<T> dx) = 0;
  // The same for mlp_mixed_norm (the norm statistics of `layer`'s MLP): the
  // mixed weight's gradient goes alpha to layer a's, 1 - alpha to layer b's.
  virtual void mlp_mixed_norm_backward(int layer, int a, int b, double alpha, ops::ActIn<T> x,
                                       ops::ActIn<T> d_ln, ops::Act<T> dx) = 0;
  // The backward of spd_block from dout (the gradient of the reduced block
  // output): dx += the gradient through the attention (its norm included) and
  // the MLP inputs, which every rank knows only for its own heads and virtual
  // ranks: one reduction over the tp group sums it, with the gradients of the
  // norm weights and the o bias that became partial the same way. dx may
  // alias dout.
  virtual void spd_block_backward(int layer, ops::ActIn<T> dout, ops::Act<T> dx) = 0;
  // dst += src; dst = 0 (rows x C).
  virtual void add(ops::Act<T> dst, ops::ActIn<T> src) = 0;
  virtual void zero(ops::Act<T> dst) = 0;
  // The o_proj bias gradient from the gradient of the reduced module output.
  virtual void o_bias_backward(int layer, ops::ActIn<T> dout) = 0;
  // copy_to_tp backward: sum over the tp group, in place.
  virtual void copy_to_tp(ops::Act<T> grad) = 0;
  // The same, started asynchronously; wait(handle) before reading grad.
  virtual int64_t copy_to_tp_async(ops::Act<T> grad) = 0;
  virtual void wait(int64_t handle) = 0;
};

// The kinds' code (model/kinds/*.cpp), dispatched on the unit's kind.
template <typename T>
void unit_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void unit_backward(UnitBackward<T>& b, const PlanUnit& u);

}  // namespace strata
