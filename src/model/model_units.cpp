// The executor's units (model.h): the passes that implement model/unit.h
// for training and evaluation (ForwardPass, BackwardPass), a unit run under
// LayerSkip's keep masks (and its sample packing), and activation
// recomputation (a module's forward recorded and run again before its
// backward). The model's storage is
// model.cpp; the walk over the units, the head and the entry points are
// model_walk.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/philox.h"
#include "model/model.h"
#include "model/unit.h"

namespace strata {

// ---------------------------------------------------------------- executor

// One pass of the training/evaluation executor over `B` samples: the kinds'
// view of the streams x_0..x_2L, the modules with the sequence attention
// (saving what backward needs), and the tp reductions. Under LayerSkip layer
// dropout the streams stay whole and only the modules see the kept samples:
// Gathered runs a module on the kept samples packed together and spreads its
// output back with zeros for the dropped ones; Dense (the test reference)
// runs it on all samples and zeroes the dropped ones' outputs. A dropped
// sample's module outputs are zero, so every stream of the unit passes its
// input on, whatever the kind's recurrence.
template <typename T>
class Model<T>::ForwardPass final : public UnitForward<T> {
 public:
  ForwardPass(Model& m, int B, int seq, RunMode mode = RunMode::All,
              const std::vector<int>* kept = nullptr, bool replay = false)
      : m_(m), B_(B), seq_(seq), mode_(mode), kept_(kept), replay_(replay) {}

  const LayerPlan& plan() const override { return m_.plan_; }
  uint64_t pass() const override { return m_.pass_; }
  ops::Act<T> stream(int i) override {
    m_.materialize(i);
    return m_.streams_[size_t(i)];
  }
  ops::Act<T> module_out(int slot) override {
    ops::Act<T> const slots[] = {m_.attn_out_, m_.mlp_out_, m_.sum_out_};
    STRATA_CHECK(slot >= 0 && slot < 3 && slots[slot], "module output slot ", slot,
                 " does not exist");
    return slots[slot];
  }
  void attention(int l, ops::ActIn<T> x, ops::Act<T> out) override {
    record(l, 0, ModuleRecord::Attention, x);
    const LayerDims& d = m_.dims(l);
    const AttentionActs<T>& a = m_.layer_acts_[size_t(l)].attn;
    const int Bm = module_batch();
    attention_partial<T>(*m_.be_, d, m_.layer_params(l), module_input(x), out, int64_t(Bm) * seq_,
                         a, [&](ops::Act<T> qkv, ops::Act<T> att) {
                           // q heads and k heads are adjacent in each row:
                           // rotate Hq + Hkv heads at once.
                           m_.be_->rope_forward(qkv, m_.rope_cos_.data(), m_.rope_sin_.data(), Bm,
                                                seq_, d.Hq + d.Hkv, d.D, d.QKV(), 0);
                           m_.be_->attention_forward(att, a.lse, qkv, Bm, seq_, d.Hq, d.Hkv, d.D);
                         });
    module_output(out);
    m_.progress();
  }
  void mlp(int l, ops::ActIn<T> x, ops::Act<T> out) override {
    record(l, 1, ModuleRecord::Mlp, x);
    mlp_with(l, m_.layer_params(l), x, out);
  }
  void mlp_shared_norm(int l, ops::ActIn<T> x, ops::Act<T> out) override {
    record(l, 1, ModuleRecord::MlpShared, x);
    LayerTensors<T> w = m_.layer_params(l);
    w.post_norm = w.input_norm;
    mlp_with(l, w, x, out);
  }
  void mlp_mixed_norm(int l, int a, int b, double alpha, ops::ActIn<T> x,
                      ops::Act<T> out) override {
    record(l, 1, ModuleRecord::MlpMixed, x, a, b, alpha);
    LayerTensors<T> w = m_.layer_params(l);
    w.post_norm = m_.mix_norms(a, b, alpha);
    mlp_with(l, w, x, out);
  }
  void spd_block(int l, ops::ActIn<T> x, ops::Act<T> out) override {
    record(l, 0, ModuleRecord::Spd, x);
    const LayerDims& d = m_.dims(l);
    LayerActs& la = m_.layer_acts_[size_t(l)];
    const AttentionActs<T>& a = la.attn;
    const int Bm = module_batch();
    spd_block_partial<T>(
        *m_.be_, d, m_.spd_virtual_ranks(), m_.layer_params(l), module_input(x), out,
        int64_t(Bm) * seq_, a, [&](int j) { return la.spd[size_t(j)]; }, m_.spd_p_,
        [&](ops::Act<T> qkv, ops::Act<T> att) {
          m_.be_->rope_forward(qkv, m_.rope_cos_.data(), m_.rope_sin_.data(), Bm, seq_,
                               d.Hq + d.Hkv, d.D, d.QKV(), 0);
          m_.be_->attention_forward(att, a.lse, qkv, Bm, seq_, d.Hq, d.Hkv, d.D);
        });
    module_output(out);
    m_.progress();
  }
  void add_o_bias(int l, ops::Act<T> out) override {
    const LayerTensors<T> w = m_.layer_params(l);
    if (!w.o_bias || m_.tp_rank() != 0) return;
    if (mode_ == RunMode::All) {
      m_.be_->bias_add_forward(out, w.o_bias, rows(), m_.dims_.C);
      return;
    }
    const int64_t S = int64_t(seq_) * m_.dims_.C;  // dropped samples get no bias either
    for (int b : *kept_) m_.be_->bias_add_forward(out + b * S, w.o_bias, seq_, m_.dims_.C);
  }
  void reduce_from_tp(ops::Act<T> buf) override { m_.tp_.allreduce(buf, rows() * m_.dims_.C); }
  int64_t reduce_from_tp_async(ops::Act<T> buf) override {
    return m_.tp_.allreduce_async(buf, rows() * m_.dims_.C);
  }
  void wait(int64_t handle) override { m_.tp_.wait(handle); }
  void defer_residual(int out, int base, ops::Act<T> buf, int64_t handle) override {
    m_.pending_out_.push_back({out, base, buf, handle, rows()});
  }
  void residual(ops::Act<T> out, ops::ActIn<T> a, ops::ActIn<T> b) override {
    m_.be_->residual_forward(out, a, b, rows() * m_.dims_.C);
  }
  void copy(ops::Act<T> dst, ops::ActIn<T> src) override {
    if (dst != src) m_.be_->copy(dst, src, rows() * m_.dims_.C);
  }

 private:
  int64_t rows() const { return int64_t(B_) * seq_; }
  int module_batch() const { return mode_ == RunMode::Gathered ? int(kept_->size()) : B_; }
  ops::ActIn<T> module_input(ops::ActIn<T> x) {
    if (mode_ != RunMode::Gathered) return x;
    m_.gather_samples(*kept_, x, m_.sub_x_);
    return m_.sub_x_;
  }
  void module_output(ops::Act<T> out) {
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, out);
    if (mode_ == RunMode::Dense) m_.zero_dropped(*kept_, B_, out);
  }
  void record(int l, int slot, typename ModuleRecord::Kind kind, ops::ActIn<T> x, int a = 0,
              int b = 0, double alpha = 0) {
    if (m_.recompute_ == Recompute::None || replay_) return;
    ModuleRecord r;
    r.kind = kind, r.a = a, r.b = b, r.alpha = alpha, r.x = x;
    r.mode = mode_, r.kept = kept_, r.B = B_;
    m_.record_module(l, slot, r);
  }
  void mlp_with(int l, const LayerTensors<T>& w, ops::ActIn<T> x, ops::Act<T> out) {
    mlp_partial<T>(*m_.be_, m_.dims(l), w, module_input(x), out, int64_t(module_batch()) * seq_,
                   m_.layer_acts_[size_t(l)].mlp);
    module_output(out);
    m_.progress();
  }
  Model& m_;
  int B_, seq_;
  RunMode mode_;
  const std::vector<int>* kept_;
  bool replay_;
};

// The backward of a training pass over `B` samples. Under layer dropout the
// modules see the kept samples only (as in the forward), and the running
// gradient stays whole: a dropped sample's gradient passes the unit unchanged.
template <typename T>
class Model<T>::BackwardPass final : public UnitBackward<T> {
 public:
  BackwardPass(Model& m, int B, int seq, ops::Act<T> grad, RunMode mode = RunMode::All,
               const std::vector<int>* kept = nullptr)
      : m_(m), B_(B), seq_(seq), grad_(grad), mode_(mode), kept_(kept) {}

  const LayerPlan& plan() const override { return m_.plan_; }
  uint64_t pass() const override { return m_.pass_; }
  ops::Act<T> stream(int i) override {
    m_.settle(i, grad_);
    return m_.streams_[size_t(i)];
  }
  ops::Act<T> grad() override { return grad_; }
  ops::Act<T> d_ln(int slot) override {
    ops::Act<T> const slots[] = {m_.d_ln_, m_.d_ln2_, m_.d_ln3_};
    STRATA_CHECK(slot >= 0 && slot < 3 && slots[slot], "d_ln slot ", slot, " does not exist");
    return slots[slot];
  }
  void defer_input_grad(int stream, int layer, bool mlp, ops::Act<T> d_ln,
                        int64_t handle) override {
    m_.pending_grad_.push_back({stream, layer, mlp, d_ln, handle, rows()});
  }
  void settle(int stream) override { m_.settle(stream, grad_); }
  void attention_backward(int l, ops::ActIn<T> dout, ops::Act<T> d_ln) override {
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 0);
    attention_partial_backward<T>(*m_.be_, m_.dims(l), m_.layer_params(l), m_.layer_grads(l),
                                  module_grad(dout), d_ln, module_batch(), seq_,
                                  m_.layer_acts_[size_t(l)].attn, m_.rope_cos_.data(),
                                  m_.rope_sin_.data(), m_.d_att_, m_.d_qkv_);
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, d_ln);
    m_.progress();
  }
  void mlp_backward(int l, ops::ActIn<T> dout, ops::Act<T> d_ln) override {
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 1);
    mlp_partial_backward<T>(*m_.be_, m_.dims(l), m_.layer_params(l), m_.layer_grads(l),
                            module_grad(dout), d_ln, int64_t(module_batch()) * seq_,
                            m_.layer_acts_[size_t(l)].mlp, m_.d_h_, m_.d_gateup_);
    if (mode_ == RunMode::Gathered) m_.spread_samples(*kept_, B_, d_ln);
    m_.progress();
  }
  void attention_norm_backward(int l, ops::ActIn<T> x, ops::ActIn<T> d_ln,
                               ops::Act<T> dx) override {
    m_.norm_backward(l, false, dx, d_ln, x, rows());
  }
  void mlp_norm_backward(int l, ops::ActIn<T> x, ops::ActIn<T> d_ln, ops::Act<T> dx) override {
    m_.norm_backward(l, true, dx, d_ln, x, rows());
  }
  void mlp_mixed_norm_backward(int l, int a, int b, double alpha, ops::ActIn<T> x,
                               ops::ActIn<T> d_ln, ops::Act<T> dx) override {
    T* ga = m_.layer_grads(a).post_norm;
    T* gb = m_.layer_grads(b).post_norm;
    const int C = m_.dims_.C;
    T* dmix = ga || gb ? m_.mixed_dnorm_.data() : nullptr;
    if (dmix) m_.be_->zero(dmix, C);
    m_.norm_backward_with(l, true, m_.mix_norms(a, b, alpha), dmix, dx, d_ln, x, rows());
    if (ga) m_.be_->axpby_forward(ga, ga, dmix, C, 1.0, alpha);
    if (gb) m_.be_->axpby_forward(gb, gb, dmix, C, 1.0, 1.0 - alpha);
  }
  void spd_block_backward(int l, ops::ActIn<T> dout, ops::Act<T> dx) override {
    // Under layer dropout the block ran on the kept samples packed together
    // (Gathered) or on all with the dropped ones' gradients zeroed (Dense).
    if (m_.recompute_ != Recompute::None) m_.replay_module(l, 0);
    const int C = m_.dims_.C, Bm = module_batch();
    const int64_t rows_m = int64_t(Bm) * seq_, n = rows_m * C;
    // (dx, which may alias dout, changes only at the end: acc holds the rest.)
    ops::ActIn<T> g_in = module_grad(dout);
    ops::ActIn<T> x = m_.streams_[size_t(2 * l)];
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, x, m_.sub_d_);
      x = m_.sub_d_;
    }
    LayerActs& la = m_.layer_acts_[size_t(l)];
    const LayerTensors<T> w = m_.layer_params(l), g = m_.layer_grads(l);
    // acc = this rank's part of dL/dx; wacc = [d post_norm | d o_bias |
    // d input_norm] (model.h: one message when both are stored in T).
    ops::Act<T> acc = m_.spd_acc_;
    T* wacc = m_.spd_wacc_;
    m_.be_->zero(acc, n);
    m_.be_->zero(wacc, 3 * C);
    spd_block_partial_backward<T>(
        *m_.be_, m_.dims(l), m_.spd_virtual_ranks(), w, g, g.post_norm ? wacc : nullptr,
        g.o_bias ? wacc + C : nullptr, g_in, acc, m_.d_ln_, Bm, seq_, la.attn,
        [&](int j) { return la.spd[size_t(j)]; }, m_.rope_cos_.data(), m_.rope_sin_.data(),
        m_.spd_p_, m_.spd_dh_, m_.d_att_, m_.d_qkv_, m_.d_h_, m_.d_gateup_);
    m_.be_->rmsnorm_backward(acc, g.input_norm ? wacc + 2 * C : nullptr, m_.d_ln_, x, w.input_norm,
                             la.attn.rstd, rows_m, C);
    // (Every rank drops the same samples.)
    if (acc + n == ops::Act<T>(wacc)) {
      m_.tp_.allreduce(acc, n + 3 * C);
    } else {
      m_.tp_.allreduce(acc, n);
      m_.tp_.allreduce(wacc, 3 * C);
    }
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, dx, m_.sub_g_);
      m_.be_->residual_forward(m_.sub_g_, m_.sub_g_, acc, n);
      m_.scatter_samples(*kept_, m_.sub_g_, dx);
    } else {
      m_.be_->residual_forward(dx, dx, acc, n);
    }
    if (g.post_norm) m_.be_->residual_forward(g.post_norm, g.post_norm, wacc, C);
    if (g.o_bias) m_.be_->residual_forward(g.o_bias, g.o_bias, wacc + C, C);
    if (g.input_norm) m_.be_->residual_forward(g.input_norm, g.input_norm, wacc + 2 * C, C);
    m_.progress();
  }
  void add(ops::Act<T> dst, ops::ActIn<T> src) override {
    m_.be_->residual_forward(dst, dst, src, rows() * m_.dims_.C);
  }
  void zero(ops::Act<T> dst) override { m_.be_->zero(dst, rows() * m_.dims_.C); }
  void o_bias_backward(int l, ops::ActIn<T> dout) override {
    T* g = m_.layer_grads(l).o_bias;
    if (!g) return;
    if (mode_ == RunMode::All) {
      m_.be_->bias_add_backward(g, dout, rows(), m_.dims_.C);
      return;
    }
    const int64_t S = int64_t(seq_) * m_.dims_.C;
    for (int b : *kept_) m_.be_->bias_add_backward(g, dout + b * S, seq_, m_.dims_.C);
  }
  void copy_to_tp(ops::Act<T> grad) override { m_.tp_.allreduce(grad, rows() * m_.dims_.C); }
  int64_t copy_to_tp_async(ops::Act<T> grad) override {
    return m_.tp_.allreduce_async(grad, rows() * m_.dims_.C);
  }
  void wait(int64_t handle) override { m_.tp_.wait(handle); }

 private:
  int64_t rows() const { return int64_t(B_) * seq_; }
  int module_batch() const { return mode_ == RunMode::Gathered ? int(kept_->size()) : B_; }
  // The gradient a module sees: the kept samples' (Gathered: packed; Dense:
  // the dropped ones zeroed, so they add nothing to the weights' gradients).
  ops::ActIn<T> module_grad(ops::ActIn<T> dout) {
    if (mode_ == RunMode::Gathered) {
      m_.gather_samples(*kept_, dout, m_.sub_x_);
      return m_.sub_x_;
    }
    if (mode_ == RunMode::Dense) {
      m_.be_->copy(m_.sub_x_, dout, rows() * m_.dims_.C);
      m_.zero_dropped(*kept_, B_, m_.sub_x_);
      return m_.sub_x_;
    }
    return dout;
  }
  Model& m_;
  int B_, seq_;
  ops::Act<T> grad_;
  RunMode mode_;
  const std::vector<int>* kept_;
};

// A unit under LayerSkip: all samples, none (every stream of the unit is its
// input), or some (Gathered, or the Dense test reference; see ForwardPass).
template <typename T>
void Model<T>::unit_forward_mode(const PlanUnit& u, int B, int T_, RunMode mode) {
  const int in = 2 * u.first, out = 2 * u.end();  // the unit reads x_in, writes x_in+1..x_out
  if (mode == RunMode::None) {
    materialize(in);
    for (int i = in + 1; i <= out; ++i)
      be_->copy(streams_[size_t(i)], streams_[size_t(in)], int64_t(B) * T_ * cfg_.hidden_size);
    return;
  }
  ForwardPass f(*this, B, T_, mode, &kept_[size_t(u.first)]);
  unit_forward<T>(f, u);
}

template <typename T>
void Model<T>::set_recompute(Recompute mode) {
  if (mode == recompute_) return;
  recompute_ = mode;
  batch_ = seq_ = 0;  // carve the arena again at the next forward
  have_forward_ = false;
  records_.clear();
}

template <typename T>
void Model<T>::record_module(int l, int slot, const ModuleRecord& r) {
  // Only a residual stream is sure to hold the same values at the module's
  // backward; every kind feeds its modules from streams.
  const bool stream = std::find(streams_.begin(), streams_.end(), r.x) != streams_.end();
  STRATA_CHECK(stream, "training.recompute: layer ", l, " (", plan_.to_string(),
               ") feeds a module from a scratch buffer, which recomputation cannot replay; "
               "use recompute = \"none\" for this plan");
  if (records_.size() != size_t(cfg_.num_hidden_layers))
    records_.assign(size_t(cfg_.num_hidden_layers), {});
  records_[size_t(l)][size_t(slot)] = r;
}

template <typename T>
void Model<T>::replay_module(int l, int slot) {
  STRATA_CHECK(
      size_t(l) < records_.size() && records_[size_t(l)][size_t(slot)].kind != ModuleRecord::None,
      "training.recompute: no forward of layer ", l, "'s ", slot ? "MLP" : "attention",
      " to run again (internal error)");
  const ModuleRecord& r = records_[size_t(l)][size_t(slot)];
  if (recompute_ == Recompute::Selective) {
    if (r.kind == ModuleRecord::Spd) return;  // SPD blocks keep their activations
    // The norm output (and the MLP's SwiGLU output) again, by the forward's
    // own calls on the module's input: the kept samples packed as it packed them.
    const LayerDims& d = dims(l);
    ops::ActIn<T> x = r.x;
    int64_t rows = int64_t(r.B) * seq_;
    if (r.mode == RunMode::Gathered) {
      gather_samples(*r.kept, x, sub_x_);
      x = sub_x_;
      rows = int64_t(r.kept->size()) * seq_;
    }
    LayerActs& la = layer_acts_[size_t(l)];
    const LayerTensors<T> w = layer_params(l);
    if (slot == 0) {
      be_->rmsnorm_forward(la.attn.ln, la.attn.rstd, x, w.input_norm, rows, d.C, d.eps);
      return;
    }
    const T* nw = r.kind == ModuleRecord::MlpShared  ? w.input_norm
                  : r.kind == ModuleRecord::MlpMixed ? mix_norms(r.a, r.b, r.alpha)
                                                     : w.post_norm;
    be_->rmsnorm_forward(la.mlp.ln, la.mlp.rstd, x, nw, rows, d.C, d.eps);
    if (!d.empty()) be_->swiglu_forward(la.mlp.h, la.mlp.gateup, rows, d.F);
    return;
  }
  ForwardPass f(*this, r.B, seq_, r.mode, r.kept, /*replay=*/true);
  switch (r.kind) {
    case ModuleRecord::Attention:
      f.attention(l, r.x, attn_out_);
      break;
    case ModuleRecord::Spd:
      f.spd_block(l, r.x, attn_out_);
      break;
    case ModuleRecord::Mlp:
      f.mlp(l, r.x, mlp_out_);
      break;
    case ModuleRecord::MlpShared:
      f.mlp_shared_norm(l, r.x, mlp_out_);
      break;
    case ModuleRecord::MlpMixed:
      f.mlp_mixed_norm(l, r.a, r.b, r.alpha, r.x, mlp_out_);
      break;
    case ModuleRecord::None:
      break;
  }
}

template <typename T>
void Model<T>::unit_backward_mode(const PlanUnit& u, int B, int T_, RunMode mode) {
  if (mode == RunMode::None) {  // the gradient passes; what a later layer read inside joins it
    for (int i = 2 * u.end(); i > 2 * u.first; --i) settle(i, dstream_);
    return;
  }
  BackwardPass b(*this, B, T_, dstream_, mode, &kept_[size_t(u.first)]);
  b.settle(2 * u.end());  // dL/dx of the unit's output, whole
  unit_backward<T>(b, u);
}

// LayerSkip's sample packing (model.h).
template <typename T>
void Model<T>::gather_samples(const std::vector<int>& kept, ops::ActIn<T> full,
                              ops::Act<T> compact) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(compact + int64_t(k) * S, full + int64_t(kept[k]) * S, S);
}

template <typename T>
void Model<T>::scatter_samples(const std::vector<int>& kept, ops::ActIn<T> compact,
                               ops::Act<T> full) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = 0; k < kept.size(); ++k)
    be_->copy(full + int64_t(kept[k]) * S, compact + int64_t(k) * S, S);
}

// In place: sample k moves to kept[k] >= k (last first, so no source is
// overwritten before it moves), the dropped samples become zero.
template <typename T>
void Model<T>::spread_samples(const std::vector<int>& kept, int B, ops::Act<T> buf) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  for (size_t k = kept.size(); k-- > 0;)
    if (kept[k] != int(k)) be_->copy(buf + int64_t(kept[k]) * S, buf + int64_t(k) * S, S);
  zero_dropped(kept, B, buf);
}

template <typename T>
void Model<T>::zero_dropped(const std::vector<int>& kept, int B, ops::Act<T> buf) {
  const int64_t S = int64_t(seq_) * cfg_.hidden_size;
  size_t k = 0;
  for (int b = 0; b < B; ++b) {
    if (k < kept.size() && kept[k] == b) {
      ++k;
      continue;
    }
    be_->zero(buf + int64_t(b) * S, S);
  }
}

// (The other members are instantiated with the class in model.cpp.)
template void Model<float>::unit_forward_mode(const PlanUnit& u, int B, int T_, RunMode mode);
template void Model<float>::set_recompute(Recompute mode);
template void Model<float>::record_module(int l, int slot, const ModuleRecord& r);
template void Model<float>::replay_module(int l, int slot);
template void Model<float>::unit_backward_mode(const PlanUnit& u, int B, int T_, RunMode mode);
template void Model<double>::unit_forward_mode(const PlanUnit& u, int B, int T_, RunMode mode);
template void Model<double>::set_recompute(Recompute mode);
template void Model<double>::record_module(int l, int slot, const ModuleRecord& r);
template void Model<double>::replay_module(int l, int slot);
template void Model<double>::unit_backward_mode(const PlanUnit& u, int B, int T_, RunMode mode);
#define STRATA_SAMPLE_MEMBERS(T)                                                                \
  template void Model<T>::gather_samples(const std::vector<int>&, ops::ActIn<T>, ops::Act<T>);  \
  template void Model<T>::scatter_samples(const std::vector<int>&, ops::ActIn<T>, ops::Act<T>); \
  template void Model<T>::spread_samples(const std::vector<int>&, int, ops::Act<T>);            \
  template void Model<T>::zero_dropped(const std::vector<int>&, int, ops::Act<T>);
STRATA_SAMPLE_MEMBERS(float)
STRATA_SAMPLE_MEMBERS(double)
#undef STRATA_SAMPLE_MEMBERS

}  // namespace strata
