// The Llama decoder and its residual-stream executor.
//
// Parameters, gradients and activations each live in one contiguous arena.
// forward() walks the layer plan over modules i = 1..2L, keeping every stream
// x_0..x_2L and what each op saves for backward; backward() walks the same plan
// in reverse and produces the gradient of every parameter.
//
//   Model<float> m(cfg, ops::make_backend<float>());
//   m.init_weights(seed);
//   m.zero_grad();
//   auto r = m.forward(tokens, targets, B, T);      // r.loss_sum, r.n_valid
//   m.backward(1.0 / r.n_valid);                     // grads of the mean loss
//
// Training uses forward_backward(), which fuses the LM head's backward into its
// forward (one logits GEMM less) and needs the loss scale up front.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/head_ce.h"
#include "model/memory.h"
#include "model/modules.h"
#include "model/params.h"
#include "model/plan.h"
#include "model/tp_region.h"
#include "model/weight_store.h"
#include "ops/backend.h"
#include "parallel/comm.h"

namespace strata {

struct LossResult {
  double loss_sum = 0;  // summed token cross-entropy over targets != ignore (last layer)
  int64_t n_valid = 0;  // number of such targets
  double mean() const { return n_valid ? loss_sum / double(n_valid) : 0.0; }
  // forward_backward with LayerSkip: the objective sum_l w_l * (summed CE at
  // exit l) whose gradient (times dloss) was taken, and the summed CE of each
  // exit that was computed (NaN for the others). Without: objective = loss_sum.
  double objective = 0;
  std::vector<double> exit_loss_sum;
};

// One training micro-batch's LayerSkip settings (forward_backward only;
// evaluation and inference never drop layers).
struct LayerSkipStep {
  // keep[l][b] != 0: sample b runs layer l; a dropped sample passes the layer
  // unchanged (x_{l+1} = x_l, no rescaling). The kept samples are gathered
  // into a sub-batch, run, and scattered back, so dropped ones cost nothing;
  // an empty kept set skips the layer. Empty: every sample runs every layer.
  std::vector<std::vector<uint8_t>> keep;
  // exit_weight[l]: weight of the cross-entropy of the shared final norm + LM
  // head applied to the output of layer l (the last entry weights the
  // ordinary loss). Empty: the last layer only, weight 1.
  std::vector<double> exit_weight;
  // Test reference: run every sample through every layer and mask the dropped
  // ones' outputs and gradients instead of gathering (same results).
  bool dense_reference = false;
};

template <typename T>
class Model {
 public:
  Model(const LlamaConfig& cfg, std::unique_ptr<ops::Backend<T>> backend);
  // With `tp` (a tensor-parallel group of size > 1), this process holds its
  // rank's part of every split tensor (ParamLayout) and the executor inserts
  // the Megatron-LM collectives: an all-reduce after each row-parallel output
  // (o_proj, down_proj) and the vocab-parallel embedding in forward, after each
  // column-parallel input gradient (qkv, gate|up) and the head's input
  // gradient in backward. Losses, gradients of replicated tensors and logits
  // are the same on every rank. float only.
  Model(const LlamaConfig& cfg, const LayerPlan& plan, std::unique_ptr<ops::Backend<T>> backend,
        Communicator* tp = nullptr);
  // With a weight store (ZeRO-2/3, model/zero.h), made by `make_store` from
  // the model's layout and backend and owned by the model (it goes before
  // the backend it allocates from): the gradients of every bucket live in
  // the store while backward writes them, and with store->holds_weights()
  // the weights too: the model then allocates no parameter arena and reads a
  // bucket only while the executor holds it open (weight_store.h).
  Model(const LlamaConfig& cfg, const LayerPlan& plan, std::unique_ptr<ops::Backend<T>> backend,
        Communicator* tp, const WeightStoreFactory<T>& make_store);
  // A pipeline rank's part of the model (`stage`, params.h): the tensors it
  // does not hold take no memory, and it runs through the stage entry points
  // below only (forward, forward_backward, ... need the whole model).
  Model(const LlamaConfig& cfg, const LayerPlan& plan, std::unique_ptr<ops::Backend<T>> backend,
        Communicator* tp, const WeightStoreFactory<T>& make_store, const StageHolding& stage);

  const LlamaConfig& config() const { return cfg_; }
  const LayerPlan& plan() const { return plan_; }
  // Runs the same weights under another plan (a conversion is a plan on
  // trained weights). Alone the parameter layout does not depend on the
  // plan; under tp a plan that places layers on other ranks
  // (LayerPlan::tp_shards) is refused: load the checkpoint with it instead.
  void set_plan(const LayerPlan& plan);
  const ParamLayout& layout() const { return layout_; }
  ops::Backend<T>& backend() { return *be_; }
  const ops::Backend<T>& backend() const { return *be_; }

  // Arenas (backend memory) and the tensors in them. Without a weight
  // store; under ZeRO-3 there is no parameter arena, under ZeRO-2/3 no
  // gradient arena (asking for one is an error).
  T* params();
  // Whether the weights stay in the parameter arena (not under ZeRO-3, whose
  // weights pass through reused buffers): a pass may then hold them
  // (ops::HeldWeights) and a backend keep converted copies.
  bool weights_resident() const { return !store_weights_; }
  // The gradient arena is allocated on first use (training): evaluation,
  // generation and conversion hold the weights only.
  T* grads() {
    ensure_grads();
    return grads_.data();
  }
  // The buckets the executor opens and closes (weight_store.h).
  const std::vector<WeightBucket>& buckets() const { return buckets_; }
  int bucket_of(int tensor) const { return bucket_of_[size_t(tensor)]; }
  WeightStore<T>* weight_store() const { return store_; }
  // Writes the weights bucket by bucket: fill(bucket, base) writes the
  // bucket's tensors at base + (tensor offset - bucket offset) (backend
  // memory, zeroed when not the arena itself); the model keeps them (its
  // arena, or the store's shard). Under ZeRO-3 every data-parallel rank calls it.
  void write_weights(const std::function<void(const WeightBucket&, T* base)>& fill);
  // Reads the weights bucket by bucket (base as above); collective over the
  // data-parallel group under ZeRO-3 (each bucket is gathered).
  void read_weights(const std::function<void(const WeightBucket&, const T* base)>& read);
  int64_t num_params() const { return layout_.total(); }  // this rank's elements
  int tp_size() const { return tp_.size(); }
  int tp_rank() const { return tp_.rank(); }
  Communicator* tp_comm() const { return tp_.comm(); }
  // This rank's sizes of layer l, and one layer's parameter tensors.
  const LayerDims& dims(int l) const { return layer_dims_[size_t(l)]; }
  // SPD: the virtual ranks this process runs for an spd layer (spd_degree / tp).
  int spd_virtual_ranks() const;
  LayerTensors<T> layer_params(int layer);

  // Called during backward as soon as the gradients of a contiguous range of
  // the arena are final for this micro-batch (per layer, then the head and
  // final norm first, the embedding last): data parallelism starts their
  // all-reduce there, overlapping the rest of the backward.
  void set_grad_ready_hook(std::function<void(int64_t offset, int64_t n)> hook) {
    grad_ready_ = std::move(hook);
  }
  // Called between the kernels of backward (after each module and norm):
  // communicators with outstanding async collectives (the data-parallel
  // gradient all-reduces) advance them there, since on the CPU nothing else
  // drives MPI's progress while compute runs.
  void set_progress_hook(std::function<void()> hook) { progress_ = std::move(hook); }
  // Tensor `index` of the weights (its bucket must be open under ZeRO-3) and
  // of the gradients (under ZeRO-2/3 only while backward writes its bucket).
  T* param(int index) {
    const int b = bucket_of_[size_t(index)];
    T* base = wbase_[size_t(b)];
    if (!base) closed_bucket(b, "weights");
    return base + (layout_[index].offset - buckets_[size_t(b)].offset);
  }
  T* grad(int index) {
    ensure_grads();
    const int b = bucket_of_[size_t(index)];
    T* base = gbase_[size_t(b)];
    if (!base) closed_bucket(b, "gradients");
    return base + (layout_[index].offset - buckets_[size_t(b)].offset);
  }

  // N(0, initializer_range) for matrices and the embedding, 1 for norms, 0 for
  // biases; drawn from Philox keyed by (seed, tensor index), so the weights do
  // not depend on the thread count.
  void init_weights(uint64_t seed);
  void zero_grad();

  // Which tensors are trained (default: all). Frozen tensors get no gradient
  // work (a fused q|k|v or gate|up GEMM runs when any member is trainable),
  // and backward stops below the lowest layer that needs a gradient.
  void set_trainable(const std::vector<bool>& trainable);
  bool trainable(int index) const { return trainable_[index]; }
  const std::vector<bool>& trainable_mask() const { return trainable_; }

  // Forward passes are numbered 0, 1, ... (what varies from pass to pass, the
  // shuffle kind's order, is a function of the number): the next forward
  // takes number `next` (a test replays one pass, e.g. for finite differences).
  void restart_passes(uint64_t next = 0) { next_pass_ = next; }
  uint64_t next_pass() const { return next_pass_; }

  // Runs the model on tokens[B*T] and returns the summed cross-entropy against
  // targets[B*T] (kIgnoreIndex entries are skipped). Keeps what backward needs.
  LossResult forward(const int32_t* tokens, const int32_t* targets, int B, int seq);
  // Accumulates into the gradient arena the gradient of dloss * loss_sum of
  // the last forward().
  void backward(double dloss);
  // forward + backward in one pass; the gradient is that of dloss * loss_sum.
  LossResult forward_backward(const int32_t* tokens, const int32_t* targets, int B, int seq,
                              double dloss, const LayerSkipStep* skip = nullptr);
  // Logits [B*T, V] into `logits` (backend memory) after running the model.
  void forward_logits(const int32_t* tokens, int B, int seq, T* logits);

  // Evaluation path: runs the embedding and layers [0, exit_layer) only
  // (exit_layer = num_hidden_layers for the whole model), keeping the streams
  // x_0 .. x_{2*exit_layer}; nothing is kept for backward.
  void forward_hidden(const int32_t* tokens, int B, int seq, int exit_layer);
  // Final norm + LM head on n rows of a stream (e.g. gathered from
  // hidden_state(E-1)): logits[n, V]. `xn_scratch` holds n * hidden_size.
  void head_rows(ops::ActIn<T> x, int64_t n, T* logits, ops::Act<T> xn_scratch);
  // Embedding of n tokens (vocab-parallel under tp, summed over the group).
  void embed(const int32_t* tokens, int64_t n, ops::Act<T> x);

  // Block-level training (SPD's block-to-block distillation): runs the plan
  // unit that starts at `layer` alone on x[B*T, C] (its input stream
  // x_{2l}; backend memory) and returns its output stream. block_backward
  // accumulates the unit's weight gradients from dout, the gradient of that
  // output (its input gradient is dropped). Other layers are not touched.
  ops::ActIn<T> block_forward(int layer, ops::ActIn<T> x, int B, int seq);
  void block_backward(ops::ActIn<T> dout);

  // The residual stream x_i (i = 0..2L) of the last forward, [B*T, C]:
  // x_{2l} is the input of layer l, x_{2L} the input of the final norm.
  ops::ActIn<T> stream(int i) const;
  // Hidden state after layer l (l = 0..L-1), i.e. x_{2(l+1)}.
  ops::ActIn<T> hidden_state(int layer) const { return stream(2 * (layer + 1)); }

  // ---- Pipeline stages (a model made with a StageHolding) ----
  // The contiguous layer ranges [first, end) this rank holds, bottom up: one
  // per virtual stage (several under the interleaved schedule). Each starts
  // and ends between plan units.
  bool staged() const { return staged_; }
  const std::vector<std::pair<int, int>>& stage_chunks() const { return chunks_; }
  // How many streams cross a stage boundary below layer `layer` (> 0): 2
  // when the layer's unit reads the stream below its input (a ladder layer
  // reads x_{2l-1} and x_{2l}), else 1 (x_{2l}). Each is B * seq * C values
  // in the activations' storage, one after the other.
  int boundary_streams(int layer) const;
  // Activation slots: each holds one micro-batch's activations for one chunk
  // (a schedule keeps several micro-batches in flight). use_activation_slot
  // selects slot k (allocated at its first use); what a slot holds survives
  // the use of others. Every model starts in slot 0.
  void use_activation_slot(int k);
  int activation_slots() const { return std::max(1, int(slots_.size())); }
  // Forward of chunk `chunk` on B x seq tokens as forward pass `pass` (the
  // same number as the whole model's micro-batch would have): the embedding
  // when the chunk starts at layer 0, else the boundary streams from `in`
  // (backend memory, as boundary_streams says). Keeps the tokens and targets
  // (for the head, exits and the embedding's backward) in the current slot.
  void stage_forward(int chunk, const int32_t* tokens, const int32_t* targets, int B, int seq,
                     uint64_t pass, ops::ActIn<T> in, const LayerSkipStep* skip = nullptr);
  // The last chunk's loss on the current slot's forward (evaluation: the
  // head's summed cross-entropy and its token count; nothing kept).
  LossResult stage_loss();
  // The last chunk's logits at the last position of the current slot's
  // forward (one sequence; sampling): vocab_size / tp values in backend memory.
  void stage_last_logits(T* logits);
  // The boundary streams above the chunk of the current slot's forward
  // (for the next stage; not the last chunk).
  void stage_output(ops::Act<T> out);
  // Backward of the current slot's forward: the head's fused loss and
  // gradient (dloss times the last layer's weight) when the chunk ends the
  // model, else from `dout`, the gradient of the boundary streams above it;
  // early exits of its layers as in forward_backward; the embedding's
  // backward when it starts the model, else the gradient of the boundary
  // streams below it into `din`. The result holds this chunk's losses
  // (loss_sum and n_valid from the head's chunk only; exit sums of its layers).
  LossResult stage_backward(double dloss, ops::ActIn<T> dout, ops::Act<T> din,
                            const LayerSkipStep* skip = nullptr);

  // RoPE tables [max_position_embeddings, head_dim / 2] (generation engine).
  const T* rope_cos() const { return rope_cos_.data(); }
  const T* rope_sin() const { return rope_sin_.data(); }

  // Activation recomputation (training.recompute; model/memory.h says what
  // each mode keeps). Full: the backward of each module first runs that
  // module's forward again; selective: it recomputes the norm output (and the
  // MLP's SwiGLU output) first. The same kernels on the same inputs, so the
  // gradients are bitwise those of keeping everything. Takes effect at the
  // next forward.
  void set_recompute(Recompute mode);
  Recompute recompute() const { return recompute_; }

  // Storage of the activations and their gradients (training.activations):
  // T, or bf16 for a float model. Norm statistics, log-sum-exps and SPD's
  // weight-gradient sums stay T, and tensor-parallel sums run in fp32
  // (tp_region.h). Takes effect at the next forward (the arena is carved again).
  void set_activation_storage(ops::Dtype dt);
  ops::Dtype activation_storage() const { return act_dtype_; }

  // Bytes held by the activation arenas for the current (B, T), every
  // activation slot's.
  int64_t activation_bytes() const;
  // Bytes held by the gradient arena (0 until a training call needs it).
  int64_t gradient_bytes() const { return int64_t(grads_.size() * sizeof(T)); }

 private:
  void ensure_grads() {
    if (store_ || grads_.data()) return;
    grads_ = ops::DeviceBuffer<T>(be_.get(), size_t(layout_.total()));
    for (size_t b = 0; b < buckets_.size(); ++b) gbase_[b] = grads_.data() + buckets_[b].offset;
  }
  [[noreturn]] void closed_bucket(int b, const char* what) const;
  // Buckets: the executor's opening and closing of weights and gradients
  // (counted: a bucket opened twice stays open until closed twice). Without
  // a store the arena is always open and these do nothing.
  std::vector<WeightBucket> buckets_;
  std::vector<int> bucket_of_;  // per tensor
  std::vector<T*> wbase_, gbase_;
  std::vector<int> wopen_, gopen_;
  std::vector<bool> bucket_trains_;  // per bucket: holds a trainable tensor
  WeightStore<T>* store_ = nullptr;
  bool store_weights_ = false;
  void open_weights(int b);
  void close_weights(int b);
  void prefetch_weights(int b);
  void open_grads(int b);
  void close_grads(int b);
  void open_unit_weights(const PlanUnit& u);
  void close_unit_weights(const PlanUnit& u);
  void prefetch_unit_weights(const PlanUnit& u);
  int head_bucket() const { return int(buckets_.size()) - 1; }
  // The embedding and head buckets' weights, open for a scope (the store
  // keeps them gathered for the step, so opening them again costs nothing).
  class OpenHead {
   public:
    explicit OpenHead(Model& m) : m_(m) {
      m_.open_weights(0);
      m_.open_weights(m_.head_bucket());
    }
    ~OpenHead() {
      m_.close_weights(m_.head_bucket());
      m_.close_weights(0);
    }
    OpenHead(const OpenHead&) = delete;
    OpenHead& operator=(const OpenHead&) = delete;

   private:
    Model& m_;
  };
  void open_head_grads();
  class ForwardPass;   // UnitForward for training and evaluation (model_units.cpp)
  class BackwardPass;  // UnitBackward for training
  struct LayerActs {
    AttentionActs<T> attn;
    MlpActs<T> mlp;
    std::vector<SpdActs<T>> spd;  // SPD layers: one per virtual rank
  };
  void ensure_activations(int B, int seq);
  // A new forward pass over B x seq: activations sized, every unit's
  // LayerSkip mode All, nothing deferred.
  void begin_pass(int B, int seq);
  void run_forward(const int32_t* tokens, int B, int seq, int exit_layer = -1,
                   const LayerSkipStep* skip = nullptr);
  // Units [k0, k1) of units_ forward (no embedding, no final materialize).
  void forward_units(size_t k0, size_t k1, int B, int seq, int exit_layer,
                     const LayerSkipStep* skip);
  // Units [k0, k1) backward from dstream_ (the gradient of their output
  // stream); the whole model by default. `head_open`: the head's gradient
  // buckets were opened (the last chunk, or exits on the chunk's layers).
  void run_backward(const int32_t* tokens, int B, int seq, const LayerSkipStep* skip = nullptr,
                    LossResult* result = nullptr, double dloss = 0, size_t k0 = 0,
                    size_t k1 = size_t(-1), ops::Act<T> din = nullptr);
  // Pipeline: the units of chunk c, and the chunk being carved and run.
  std::pair<size_t, size_t> chunk_units(int c) const;
  // Back to carving the whole model (after stage passes on a whole model).
  void whole_passes() {
    if (active_hi_ < 0) return;
    active_lo_ = 0, active_hi_ = -1;
    batch_ = seq_ = 0;
  }
  bool staged_ = false;
  std::vector<std::pair<int, int>> chunks_;
  int active_lo_ = 0, active_hi_ = -1;  // layers of the carved chunk (-1: to the end)
  // LayerSkip: how a unit ran in the last forward.
  enum class RunMode { All, None, Gathered, Dense };
  void unit_forward_mode(const PlanUnit& u, int B, int seq, RunMode mode);
  void unit_backward_mode(const PlanUnit& u, int B, int seq, RunMode mode);
  // Whole samples (seq_ * C values) between a [B, seq_, C] tensor and a
  // packed one holding the samples `kept` (ascending) in order; spread is the
  // in-place packed -> whole with zeros for the others.
  void gather_samples(const std::vector<int>& kept, ops::ActIn<T> full, ops::Act<T> packed);
  void scatter_samples(const std::vector<int>& kept, ops::ActIn<T> packed, ops::Act<T> full);
  void spread_samples(const std::vector<int>& kept, int B, ops::Act<T> buf);
  void zero_dropped(const std::vector<int>& kept, int B, ops::Act<T> buf);
  // dx += the input gradient of layer l's attention (mlp: MLP) norm, and its
  // weight's gradient (on the packed kept samples where the unit gathered).
  void norm_backward(int l, bool mlp, ops::Act<T> dx, ops::ActIn<T> d_ln, ops::ActIn<T> x,
                     int64_t rows);
  // The same with norm weights nw (gradient into dw, may be null) instead of
  // the layer's own, on the statistics the layer's norm saved.
  void norm_backward_with(int l, bool mlp, const T* nw, T* dw, ops::Act<T> dx, ops::ActIn<T> d_ln,
                          ops::ActIn<T> x, int64_t rows);
  // alpha * (MLP norm weights of layer a) + (1 - alpha) * (of layer b), in
  // mixed_norm_ (Layer Parallelism).
  T* mix_norms(int a, int b, double alpha);
  // The early-exit loss at the output of layer l: CE of the shared head,
  // gradient (times dloss * weight) added to dstream_ and the head's grads.
  void exit_loss(int l, int B, int seq, double scale, LossResult* result);
  int head_index() const { return layout_.lm_head >= 0 ? layout_.lm_head : layout_.embed; }
  // Gradient tensors of a layer (null where frozen: a fused q|k|v or gate|up
  // gradient exists when any member is trainable).
  LayerTensors<T> layer_grads(int layer);
  // Tensor-parallel helpers of the head (no-ops without a tp group).
  HeadCe<T>& head_ce();  // the backend's fused op; the vocabulary-parallel phases under tp
  void gather_vocab(const T* local, int64_t rows, T* full);  // [rows, V/tp] -> [rows, V]
  void grad_ready(int first_tensor, int last_tensor);
  int v_local() const { return cfg_.vocab_size / tp_size(); }
  T* head_weight() { return param(head_index()); }
  // Gradient slot of tensor i, or nullptr when none of `group` is trainable
  // (the group is the set of tensors one kernel writes gradients for together).
  T* grad_if(std::initializer_list<int> group);

  LlamaConfig cfg_;
  LayerPlan plan_;
  std::vector<PlanUnit> units_;
  ParamLayout layout_;
  LayerDims dims_;                     // the model-wide sizes (C, eps) and a whole-group layer's
  std::vector<LayerDims> layer_dims_;  // this rank's sizes of each layer
  std::unique_ptr<ops::Backend<T>> be_;
  std::unique_ptr<WeightStore<T>> owned_store_;  // after be_: destroyed before it
  ops::DeviceBuffer<T> params_, grads_;
  ops::DeviceBuffer<T> rope_cos_, rope_sin_;
  ops::DeviceBuffer<T> mixed_norm_, mixed_dnorm_;  // mix_norms() and its gradient

  // Activations for the current (B, T).
  int batch_ = 0, seq_ = 0;
  // Two arenas: the activations (and their gradients) in act_dtype_, and the
  // statistics kept beside them (rstd, LSE, SPD's weight-gradient sums) in T.
  ops::Dtype act_dtype_ = ops::Act<T>::kNative;
  ops::ActBuffer<T> acts_;
  ops::DeviceBuffer<T> stats_;
  std::vector<ops::Act<T>> streams_;  // 2L + 1 pointers into acts_
  std::vector<LayerActs> layer_acts_;
  ops::Act<T> lnf_;
  T *rstdf_ = nullptr, *lsef_ = nullptr;
  ops::Act<T> attn_out_, mlp_out_;  // module outputs (one per module of a step)
  ops::Act<T> sum_out_;             // a par group's running sum
  // LayerSkip's packed kept samples: a module's input or output gradient, and
  // a norm backward's d_ln and dx.
  ops::Act<T> sub_x_, sub_d_, sub_g_;
  // Backward scratch, shared by all layers.
  ops::Act<T> dstream_, d_ln_, d_qkv_, d_att_, d_gateup_, d_h_;
  ops::Act<T> d_ln2_;  // the second d_ln slot (plans with kinds that defer reductions)
  ops::Act<T> d_ln3_;  // the third (Layer-Parallel pairs, past a ladder layer's slot 1)
  // SPD scratch: o_proj partial [N, C], an MLP input's gradient [N, C], and
  // what one reduction sums in backward: the input gradient [N, C], then the
  // MLP norm, o bias and attention norm weights' gradients [3C].
  ops::Act<T> spd_p_, spd_dh_;
  // [N, C] in the activations' storage, then [3C] of weight gradients in T
  // (spd_wacc_): contiguous, and reduced as one message, when both are T.
  ops::Act<T> spd_acc_;
  T* spd_wacc_ = nullptr;
  // Deferred residuals of the forward (stream out = stream base + buf once the
  // reduction `handle` is done), in the order deferred; and deferred input
  // gradients of the backward (unit.h).
  struct PendingOut {
    int out, base;
    ops::Act<T> buf;
    int64_t handle, rows;
  };
  struct PendingGrad {
    int stream, layer;
    bool mlp;
    ops::Act<T> d_ln;
    int64_t handle, rows;
  };
  std::vector<PendingOut> pending_out_;
  std::vector<PendingGrad> pending_grad_;
  void materialize(int i);                    // adds the pending outputs up to stream i
  void settle(int stream, ops::Act<T> grad);  // adds the deferred input gradients of x_stream
  void settle_all(ops::Act<T> grad);
  // LayerSkip: per layer, how its unit ran and the kept samples.
  std::vector<RunMode> run_mode_;
  std::vector<std::vector<int>> kept_;
  TpRegion<T> tp_;
  std::unique_ptr<HeadCe<T>> head_ce_;
  std::vector<T> tp_scratch_;
  // Device backends: the gathered shards, and one rank's head logits.
  ops::DeviceBuffer<T> tp_gather_, tp_local_;
  T* tp_device(size_t n);
  std::function<void(int64_t, int64_t)> grad_ready_;
  std::function<void()> progress_;
  void progress() {
    tp_.progress();
    if (store_) store_->progress();
    if (progress_) progress_();
  }
  std::vector<bool> trainable_;
  int backward_floor_ = 0;                 // lowest layer backward must visit
  uint64_t pass_ = 0, next_pass_ = 0;      // this forward's number, the next one's
  std::vector<int32_t> tokens_, targets_;  // copies of the last forward's inputs
  bool have_forward_ = false;              // activations of a complete forward are held
  int block_unit_ = -1;                    // the unit of the last block_forward (-1: none)
  // Recomputation: what each module of the last forward ran on, per layer
  // (slot 0: attention or SPD block, 1: MLP), to run it again in backward.
  struct ModuleRecord {
    enum Kind { None, Attention, Mlp, MlpShared, MlpMixed, Spd } kind = None;
    int a = 0, b = 0;
    double alpha = 0;
    ops::ActIn<T> x;  // the module's input stream
    RunMode mode = RunMode::All;
    const std::vector<int>* kept = nullptr;
    int B = 0;
  };
  Recompute recompute_ = Recompute::None;
  std::vector<std::array<ModuleRecord, 2>> records_;
  ops::Act<T> shared_ln_, shared_h_;  // selective: recomputed before each backward
  void record_module(int layer, int slot, const ModuleRecord& r);
  void replay_module(int layer, int slot);
  // Activation slots (use_activation_slot): each one's arenas and what a
  // forward leaves for its backward. The current slot's live in the members
  // above; its entry here is empty until another slot is selected.
  struct Slot {
    ops::ActBuffer<T> acts;
    ops::DeviceBuffer<T> stats;
    int batch = 0, seq = 0, lo = 0, hi = -1, chunk = -1;
    std::vector<int32_t> tokens, targets;
    std::vector<RunMode> run_mode;
    std::vector<std::vector<int>> kept;
    std::vector<std::array<ModuleRecord, 2>> records;
    uint64_t pass = 0;
    bool have_forward = false;
  };
  std::vector<Slot> slots_;
  int slot_ = 0;
  int slot_chunk_ = -1;     // the chunk of the current slot's forward (-1: none)
  ops::Act<T> d_boundary_;  // a received gradient of the stream below a ladder boundary
  void swap_slot_state(Slot& s);
};

}  // namespace strata
