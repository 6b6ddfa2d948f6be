#include "infer/engine.h"

#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "model/unit.h"

namespace strata {

// One pass of rows through units of the plan: the kinds' view of generation.
// Streams live in a ring of two buffers (x_i in x for even i, in odd_ for odd
// i), so a layer starts and ends in the caller's x; the attention core is the
// KV-cache attention of each row's sequence.
class KvEngine::Pass final : public UnitForward<float> {
 public:
  // decode: one position per row, of distinct sequences, whose positions and
  // cache slots are in the engine's decode_ints_ (decode_rows).
  Pass(KvEngine& e, ops::Act<float> x, int rows, const std::vector<int>& seqs,
       const std::vector<int>& pos, bool decode = false)
      : e_(e), x_(x), rows_(rows), seqs_(seqs), pos_(pos), decode_(decode), tp_(e.m_.tp_comm()) {}

  const LayerPlan& plan() const override { return e_.m_.plan(); }
  uint64_t pass() const override { return 0; }
  ops::Act<float> stream(int i) override {
    materialize(i);
    return buffer(i);
  }
  ops::Act<float> module_out(int slot) override {
    STRATA_CHECK(slot >= 0 && slot < 3, "module output slot ", slot, " does not exist");
    return slot == 0 ? e_.attn_out_.data() : slot == 1 ? e_.mlp_out_.data() : e_.sum_out_.data();
  }
  void attention(int l, ops::ActIn<float> x, ops::Act<float> out) override {
    const LayerDims& d = e_.m_.dims(l);
    const AttentionActs<float> a = attention_acts();
    attention_partial<float>(
        e_.be_, d, e_.m_.layer_params(l), x, out, rows_, a,
        [&](ops::Act<float> qkv, ops::Act<float> att) { cached_core(l, qkv, att); });
    tp_.progress();  // outstanding async reductions advance between modules
  }
  void mlp(int l, ops::ActIn<float> x, ops::Act<float> out) override {
    const MlpActs<float> a = mlp_acts();
    mlp_partial<float>(e_.be_, e_.m_.dims(l), e_.m_.layer_params(l), x, out, rows_, a);
    tp_.progress();
  }
  void mlp_shared_norm(int l, ops::ActIn<float> x, ops::Act<float> out) override {
    const MlpActs<float> a = mlp_acts();
    LayerTensors<float> w = e_.m_.layer_params(l);
    w.post_norm = w.input_norm;
    mlp_partial<float>(e_.be_, e_.m_.dims(l), w, x, out, rows_, a);
    tp_.progress();
  }
  void mlp_mixed_norm(int l, int first, int second, double alpha, ops::ActIn<float> x,
                      ops::Act<float> out) override {
    const MlpActs<float> a = mlp_acts();
    LayerTensors<float> w = e_.m_.layer_params(l);
    e_.be_.axpby_forward(e_.mixed_norm_.data(), e_.m_.layer_params(first).post_norm,
                         e_.m_.layer_params(second).post_norm, e_.C_, alpha, 1.0 - alpha);
    w.post_norm = e_.mixed_norm_.data();
    mlp_partial<float>(e_.be_, e_.m_.dims(l), w, x, out, rows_, a);
    tp_.progress();
  }
  void spd_block(int l, ops::ActIn<float> x, ops::Act<float> out) override {
    const LayerDims& d = e_.m_.dims(l);
    const AttentionActs<float> a = attention_acts();
    // Generation keeps nothing for backward: every virtual rank reuses one set.
    const SpdActs<float> s{.h = e_.spd_h_.data(),
                           .ln = e_.spd_ln_.data(),
                           .rstd = e_.spd_rstd_.data(),
                           .gateup = e_.gateup_.data(),
                           .act = e_.h_.data()};
    spd_block_partial<float>(
        e_.be_, d, e_.m_.spd_virtual_ranks(), e_.m_.layer_params(l), x, out, rows_, a,
        [&](int) { return s; }, e_.spd_p_.data(),
        [&](ops::Act<float> qkv, ops::Act<float> att) { cached_core(l, qkv, att); });
    tp_.progress();
  }
  void add_o_bias(int l, ops::Act<float> out) override {
    const LayerTensors<float> w = e_.m_.layer_params(l);
    if (w.o_bias && tp_.rank() == 0) e_.be_.bias_add_forward(out, w.o_bias, rows_, e_.C_);
  }
  void reduce_from_tp(ops::Act<float> buf) override { tp_.allreduce(buf, n()); }
  int64_t reduce_from_tp_async(ops::Act<float> buf) override {
    return tp_.allreduce_async(buf, n());
  }
  void wait(int64_t handle) override { tp_.wait(handle); }
  // Pending outputs are added in order; with two buffers that is enough: the
  // base of a pending stream is overwritten only by a later stream.
  void defer_residual(int out, int base, ops::Act<float> buf, int64_t handle) override {
    pending_.push_back({out, base, buf, handle});
  }
  void materialize(int i) {
    size_t done = 0;
    for (; done < pending_.size() && pending_[done].out <= i; ++done) {
      const Pending& p = pending_[done];
      tp_.wait(p.handle);
      e_.be_.residual_forward(buffer(p.out), buffer(p.base), p.buf, n());
    }
    pending_.erase(pending_.begin(), pending_.begin() + long(done));
  }
  void residual(ops::Act<float> out, ops::ActIn<float> a, ops::ActIn<float> b) override {
    e_.be_.residual_forward(out, a, b, n());
  }
  void copy(ops::Act<float> dst, ops::ActIn<float> src) override {
    if (dst != src) e_.be_.copy(dst, src, n());
  }

 private:
  int64_t n() const { return int64_t(rows_) * e_.C_; }
  // The modules' scratch (designated: activations and statistics sit side by
  // side, and a T* converts to an activation silently).
  AttentionActs<float> attention_acts() const {
    return {.ln = e_.ln_.data(),
            .rstd = e_.rstd_.data(),
            .qkv = e_.qkv_.data(),
            .att = e_.att_.data(),
            .lse = nullptr};
  }
  MlpActs<float> mlp_acts() const {
    return {.ln = e_.ln_.data(),
            .rstd = e_.rstd_.data(),
            .gateup = e_.gateup_.data(),
            .h = e_.h_.data()};
  }
  // Rows come in spans of consecutive positions of one sequence: one RoPE
  // call and one attention call per span, after its keys and values join the
  // sequence's cache.
  void cached_core(int l, ops::Act<float> qkv, ops::Act<float> att) {
    const LayerDims& d = e_.m_.dims(l);
    const int QKV = d.QKV(), Q = d.Q();
    if (decode_) {  // every row at once, positions and slots from backend memory
      const int32_t* pos = e_.decode_ints_.get();
      const int32_t* slot = pos + e_.scratch_rows_;
      ops::Act<float> K = e_.k_cache(l, 0);
      ops::Act<float> V = e_.v_cache(l, 0);
      e_.be_.decode_rope_append(qkv, QKV, e_.m_.rope_cos(), e_.m_.rope_sin(), K, V, e_.seq_stride(),
                                rows_, slot, pos, d.Hq, d.Hkv, d.D, e_.max_len_);
      e_.be_.attention_decode(att, qkv, QKV, K, V, e_.seq_stride(), rows_, slot, pos, d.Hq, d.Hkv,
                              d.D, e_.max_len_);
      return;
    }
    for (int r0 = 0; r0 < rows_;) {
      int r1 = r0 + 1;
      while (r1 < rows_ && seqs_[size_t(r1)] == seqs_[size_t(r0)] &&
             pos_[size_t(r1)] == pos_[size_t(r1 - 1)] + 1)
        ++r1;
      const int span = r1 - r0, s = seqs_[size_t(r0)], p0 = pos_[size_t(r0)];
      ops::Act<float> rows = qkv + int64_t(r0) * QKV;
      e_.be_.rope_forward(rows, e_.m_.rope_cos(), e_.m_.rope_sin(), 1, span, d.Hq + d.Hkv, d.D, QKV,
                          p0);
      ops::Act<float> K = e_.k_cache(l, s);
      ops::Act<float> V = e_.v_cache(l, s);
      e_.be_.kv_cache_append(K, V, rows, QKV, span, p0, d.Hq, d.Hkv, d.D, e_.max_len_);
      e_.be_.attention_cached_forward(att + int64_t(r0) * Q, rows, QKV, K, V, span, p0, d.Hq, d.Hkv,
                                      d.D, e_.max_len_);
      r0 = r1;
    }
  }

  ops::Act<float> buffer(int i) { return i % 2 == 0 ? x_ : ops::Act<float>(e_.odd_.data()); }
  struct Pending {
    int out, base;
    ops::Act<float> buf;
    int64_t handle;
  };
  std::vector<Pending> pending_;
  KvEngine& e_;
  ops::Act<float> x_;
  int rows_;
  const std::vector<int>& seqs_;
  const std::vector<int>& pos_;
  bool decode_;
  TpRegion<float> tp_;
};

KvEngine::KvEngine(Model<float>& model, int max_len, int layers, int batch, ops::Dtype cache_dtype)
    : m_(model), be_(model.backend()) {
  const LlamaConfig& c = model.config();
  C_ = c.hidden_size;
  D_ = c.head_dim;
  layers_ = layers < 0 ? c.num_hidden_layers : layers;
  STRATA_CHECK(layers_ >= 1 && layers_ <= c.num_hidden_layers, "KV cache for ", layers_,
               " layers: the model has ", c.num_hidden_layers);
  model.plan().check_exit(layers_, "a KV cache for layers [0, E) with E =");
  model.plan().check_generation();
  max_len_ = max_len;
  STRATA_CHECK(max_len_ >= 1 && max_len_ <= c.max_position_embeddings, "KV cache of ", max_len_,
               " positions: the model's context is ", c.max_position_embeddings);
  batch_ = batch;
  STRATA_CHECK(batch_ >= 1, "KV cache for ", batch_, " sequences");
  kv_heads_.assign(size_t(layers_) + 1, 0);
  for (int l = 0; l < layers_; ++l) {
    const LayerDims& d = model.dims(l);
    kv_heads_[size_t(l) + 1] = kv_heads_[size_t(l)] + size_t(d.Hkv);
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerDims& d = model.dims(l);
    max_qkv_ = std::max<int64_t>(max_qkv_, d.QKV());
    max_q_ = std::max<int64_t>(max_q_, d.Q());
    max_f_ = std::max<int64_t>(max_f_, d.F);
  }
  const size_t cache = size_t(batch_) * kv_heads_[size_t(layers_)] * max_len_ * size_t(D_);
  STRATA_CHECK(cache_dtype == ops::Dtype::F32 || cache_dtype == ops::Dtype::BF16, "a KV cache in ",
               ops::dtype_name(cache_dtype), ": fp32 or bf16");
  k_ = ops::ActBuffer<float>(&be_, cache, cache_dtype);
  v_ = ops::ActBuffer<float>(&be_, cache, cache_dtype);
  len_.assign(size_t(batch_) * layers_, 0);
}

void KvEngine::reset() { std::fill(len_.begin(), len_.end(), 0); }

void KvEngine::crop(int l0, int l1, int len, int seq) {
  for (int l = l0; l < l1; ++l) {
    int& n = len_[size_t(seq * layers_ + l)];
    STRATA_CHECK(len >= 0 && len <= n, "crop of layer ", l, " to ", len, " positions: it holds ",
                 n);
    n = len;
  }
}

void KvEngine::ensure_scratch(int n) {
  if (n <= scratch_rows_) return;
  graphs_.clear();  // they refer to the buffers replaced here
  scratch_rows_ = std::max(n, 16);
  decode_ints_ = {be_.alloc_ints(2 * size_t(scratch_rows_)),
                  [be = &be_](int32_t* p) { be->free_ints(p); }};
  const size_t N = size_t(scratch_rows_), C = size_t(C_);
  ln_ = ops::DeviceBuffer<float>(&be_, N * C);
  rstd_ = ops::DeviceBuffer<float>(&be_, N);
  qkv_ = ops::DeviceBuffer<float>(&be_, N * size_t(max_qkv_));
  att_ = ops::DeviceBuffer<float>(&be_, N * size_t(max_q_));
  attn_out_ = ops::DeviceBuffer<float>(&be_, N * C);
  mlp_out_ = ops::DeviceBuffer<float>(&be_, N * C);
  gateup_ = ops::DeviceBuffer<float>(&be_, N * 2 * size_t(max_f_));
  h_ = ops::DeviceBuffer<float>(&be_, N * size_t(max_f_));
  xn_ = ops::DeviceBuffer<float>(&be_, N * C);
  odd_ = ops::DeviceBuffer<float>(&be_, N * C);
  mixed_norm_ = ops::DeviceBuffer<float>(&be_, C);
  sum_out_ = ops::DeviceBuffer<float>(&be_, N * C);
  spd_h_ = ops::DeviceBuffer<float>(&be_, N * C);
  spd_ln_ = ops::DeviceBuffer<float>(&be_, N * C);
  spd_rstd_ = ops::DeviceBuffer<float>(&be_, N);
  spd_p_ = ops::DeviceBuffer<float>(&be_, N * C);
}

void KvEngine::embed(const int32_t* tokens, int n, float* x) {
  const LlamaConfig& c = m_.config();
  for (int i = 0; i < n; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id ", tokens[i],
                 " outside the vocabulary (", c.vocab_size, ")");
  m_.embed(tokens, n, x);
}

void KvEngine::check_range(int l0, int l1) const {
  STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= layers_, "layers [", l0, ", ", l1,
               ") outside the cache's [0, ", layers_, ")");
  STRATA_CHECK(m_.plan().unit_boundary(l0) && m_.plan().unit_boundary(l1), "layers [", l0, ", ", l1,
               ") cut a unit of plan '", m_.plan().to_string(), "'");
}

void KvEngine::run_units(float* x, int rows, int l0, int l1, const std::vector<int>& seqs,
                         const std::vector<int>& pos, float* mid) {
  ensure_scratch(rows);
  if (mid && l0 > 0) be_.copy(odd_.data(), mid, int64_t(rows) * C_);  // x_{2 l0 - 1}
  Pass pass(*this, x, rows, seqs, pos);
  for (const PlanUnit& u : m_.plan().units())
    if (u.first >= l0 && u.end() <= l1) {
      // A ladder layer reads the previous layer's mid stream, which a pass
      // starting at it does not have.
      STRATA_CHECK(u.first != l0 || l0 == 0 || !kind_info(u.kind).reads_stream_below || mid,
                   "generation starting at layer ", l0, " (a ", kind_info(u.kind).name,
                   " layer of plan '", m_.plan().to_string(),
                   "') is not supported: self-speculative verification needs the stream inside "
                   "layer ",
                   l0 - 1, "; use an exit before a standard layer");
      unit_forward<float>(pass, u);
    }
  pass.materialize(2 * l1);
  if (mid) be_.copy(mid, odd_.data(), int64_t(rows) * C_);  // x_{2 l1 - 1}
}

void KvEngine::run_layers(float* x, int n, int l0, int l1, int seq, float* mid) {
  check_range(l0, l1);
  STRATA_CHECK(seq >= 0 && seq < batch_, "sequence ", seq, " outside the batch of ", batch_);
  if (l0 == l1 || n == 0) return;
  const int pos0 = length(l0, seq);
  STRATA_CHECK(pos0 + n <= max_len_, "the sequence would reach ", pos0 + n,
               " positions; the KV cache holds ", max_len_);
  for (int l = l0; l < l1; ++l)
    STRATA_CHECK(length(l, seq) == pos0, "layer ", l, " holds ", length(l, seq),
                 " positions, layer ", l0, " ", pos0);
  std::vector<int> seqs(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[size_t(i)] = pos0 + i;
  run_units(x, n, l0, l1, seqs, pos, mid);
  for (int l = l0; l < l1; ++l) len_[size_t(seq * layers_ + l)] = pos0 + n;
}

void KvEngine::decode_rows(float* x, const std::vector<int>& seqs, int l0, int l1) {
  check_range(l0, l1);
  const int rows = int(seqs.size());
  if (l0 == l1 || rows == 0) return;
  std::vector<int> pos(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int s = seqs[size_t(r)];
    STRATA_CHECK(s >= 0 && s < batch_, "sequence ", s, " outside the batch of ", batch_);
    for (int q = 0; q < r; ++q)
      STRATA_CHECK(seqs[size_t(q)] != s, "decode_rows: sequence ", s, " appears twice");
    pos[size_t(r)] = length(l0, s);
    STRATA_CHECK(pos[size_t(r)] < max_len_, "sequence ", s, " fills its KV cache (", max_len_,
                 " positions)");
    for (int l = l0; l < l1; ++l)
      STRATA_CHECK(length(l, s) == pos[size_t(r)], "layer ", l, " of sequence ", s, " holds ",
                   length(l, s), " positions");
  }
  decode_step(x, rows, l0, l1, seqs, pos);
  for (int r = 0; r < rows; ++r)
    for (int l = l0; l < l1; ++l) ++len_[size_t(seqs[size_t(r)] * layers_ + l)];
}

bool KvEngine::graphs_enabled() const {
  // A recorded step cannot hold the host's part of a tensor-parallel reduction.
  return graphs_on_ && be_.graphs() && (!m_.tp_comm() || m_.tp_comm()->size() == 1);
}

namespace {

// Ends a capture that an exception interrupted (the stream must not stay in
// capture mode); the recording is dropped.
class CaptureScope {
 public:
  explicit CaptureScope(ops::Backend<float>& be) : be_(be) { be_.begin_capture(); }
  ~CaptureScope() {
    if (!ended_) try {
        be_.end_capture();
      } catch (...) {  // the first error is the one that is reported
      }
  }
  std::unique_ptr<ops::Backend<float>::Graph> end() {
    ended_ = true;
    return be_.end_capture();
  }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  ops::Backend<float>& be_;
  bool ended_ = false;
};

}  // namespace

void KvEngine::decode_step(float* x, int rows, int l0, int l1, const std::vector<int>& seqs,
                           const std::vector<int>& pos) {
  ensure_scratch(rows);
  host_ints_.assign(2 * size_t(scratch_rows_), 0);
  for (int r = 0; r < rows; ++r) {
    host_ints_[size_t(r)] = pos[size_t(r)];
    host_ints_[size_t(scratch_rows_ + r)] = seqs[size_t(r)];
  }
  be_.ints_from_host(decode_ints_.get(), host_ints_.data(), host_ints_.size());
  auto eager = [&] {
    Pass pass(*this, x, rows, seqs, pos, /*decode=*/true);
    for (const PlanUnit& u : m_.plan().units())
      if (u.first >= l0 && u.end() <= l1) unit_forward<float>(pass, u);
    pass.materialize(2 * l1);
  };
  if (!graphs_enabled()) return eager();
  Captured& g = graphs_[{x, rows, l0, l1}];
  const uint64_t epoch = be_.graph_epoch();
  if (!(g.graph && g.epoch == epoch)) {
    g.graph.reset();
    if (g.warm != epoch) {  // first at this epoch: eager, which makes what it needs
      eager();
      g.warm = be_.graph_epoch();
      return;
    }
    try {
      CaptureScope capture(be_);
      eager();
      g.graph = capture.end();
    } catch (const Error& err) {
      // A step that cannot be recorded still decodes: eagerly from now on.
      log::warn("generation: a decode step could not be recorded as a graph (", err.what(),
                "); decoding without graphs");
      graphs_on_ = false;
      graphs_.clear();
      return eager();
    }
    g.epoch = epoch;
    ++captures_;
  }
  be_.replay(*g.graph);
  ++replays_;
}

void KvEngine::logits(const float* x, int n, float* out) {
  ensure_scratch(n);
  m_.head_rows(x, n, out, xn_.data());
}

}  // namespace strata
