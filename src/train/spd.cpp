#include "train/spd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/timer.h"
#include "train/optimizer.h"

namespace strata::spd {

namespace {

// Seeded draws that do not depend on the standard library's distributions.
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return g() % n; }
  template <typename V>
  void shuffle(V& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(below(i))]);
  }
};

// Inputs and targets of windows [first, first + b).
void split_windows(const std::vector<int32_t>& w, int first, int b, int seq,
                   std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  in.resize(size_t(b) * seq);
  tgt.resize(size_t(b) * seq);
  for (int i = 0; i < b; ++i) {
    const int32_t* row = w.data() + size_t(first + i) * (seq + 1);
    std::copy(row, row + seq, in.begin() + ptrdiff_t(i) * seq);
    std::copy(row + 1, row + seq + 1, tgt.begin() + ptrdiff_t(i) * seq);
  }
}

void require_host(Model<float>& m, const char* what) {
  STRATA_CHECK(m.backend().is_host(), what, " runs on a host (CPU) backend, not ",
               m.backend().name());
}

struct LayerRange {
  int64_t offset, n;
};
LayerRange layer_range(Model<float>& m, int l) {
  const auto& P = m.layout().layers.at(size_t(l));
  const ParamInfo& first = m.layout()[P.input_norm];
  const ParamInfo& last = m.layout()[P.down];
  return {first.offset, last.offset + last.numel - first.offset};
}

}  // namespace

std::vector<int32_t> calibration_windows(const std::vector<int32_t>& ids, int n, int seq,
                                         uint64_t seed) {
  STRATA_CHECK(n >= 1 && seq >= 1, "calibration: need at least one window of one token");
  STRATA_CHECK(ids.size() >= size_t(seq) + 1, "calibration: the text has ", ids.size(),
               " tokens, fewer than one window of ", seq + 1);
  Rng rng(seed);
  const uint64_t starts = ids.size() - size_t(seq);  // offsets 0 .. size - seq - 1
  std::vector<int32_t> w(size_t(n) * (seq + 1));
  for (int i = 0; i < n; ++i) {
    const size_t at = size_t(rng.below(starts));
    std::copy(ids.begin() + ptrdiff_t(at), ids.begin() + ptrdiff_t(at + seq + 1),
              w.begin() + ptrdiff_t(i) * (seq + 1));
  }
  return w;
}

double window_perplexity(Model<float>& m, const std::vector<int32_t>& windows, int n, int seq,
                         int batch) {
  std::vector<int32_t> in, tgt;
  double nll = 0;
  int64_t count = 0;
  for (int i = 0; i < n; i += batch) {
    const int b = std::min(batch, n - i);
    split_windows(windows, i, b, seq, in, tgt);
    const LossResult r = m.forward(in.data(), tgt.data(), b, seq);
    nll += r.loss_sum;
    count += r.n_valid;
  }
  return std::exp(nll / double(std::max<int64_t>(count, 1)));
}

std::vector<BlockIO> capture_blocks(Model<float>& m, const std::vector<int32_t>& windows, int n,
                                    int seq, int batch, const std::vector<int>& layers) {
  const int C = m.config().hidden_size, L = m.config().num_hidden_layers;
  const int64_t S = int64_t(seq) * C;
  std::vector<BlockIO> io(layers.size());
  for (BlockIO& b : io) {
    b.x.resize(size_t(n * S));
    b.y.resize(size_t(n * S));
  }
  std::vector<int32_t> in, tgt;
  for (int i = 0; i < n; i += batch) {
    const int b = std::min(batch, n - i);
    split_windows(windows, i, b, seq, in, tgt);
    m.forward_hidden(in.data(), b, seq, L);
    for (size_t k = 0; k < layers.size(); ++k) {
      const int l = layers[k];
      m.backend().to_host(io[k].x.data() + i * S, m.stream(2 * l), b * S);
      m.backend().to_host(io[k].y.data() + i * S, m.stream(2 * l + 2), b * S);
    }
  }
  return io;
}

std::vector<float> layer_snapshot(Model<float>& m, int layer) {
  const LayerRange r = layer_range(m, layer);
  std::vector<float> s(size_t(r.n));
  m.backend().to_host(s.data(), m.params() + r.offset, r.n);
  return s;
}

int64_t layer_numel(Model<float>& m, int layer) { return layer_range(m, layer).n; }

void restore_layer(Model<float>& m, int layer, const std::vector<float>& snapshot) {
  const LayerRange r = layer_range(m, layer);
  STRATA_CHECK(int64_t(snapshot.size()) == r.n, "layer ", layer, ": a snapshot of ",
               snapshot.size(), " values for a layer of ", r.n);
  m.backend().from_host(m.params() + r.offset, snapshot.data(), r.n);
}

// ------------------------------------------------------------------ memory

PipelineMemory pipeline_memory(const LlamaConfig& cfg_in, int g, int n, int seq, int cal_batch,
                               int b2b_batch, int budget, int64_t capture_bytes) {
  LlamaConfig cfg = cfg_in;
  cfg.finalize();
  const int L = cfg.num_hidden_layers;
  const double f = sizeof(float), S = double(seq) * cfg.hidden_size;
  PipelineMemory pm;
  // The model, every block in SPD (the scan's largest plan), forward passes
  // with full recomputation.
  LayerPlan all;
  all.kinds.assign(size_t(L), LayerKind::Spd);
  all.options = {{"spd_degree", std::to_string(g)}};
  MemoryUse u;
  u.batch = cal_batch, u.seq = seq;
  u.recompute = Recompute::Full;
  const MemoryEstimate model = estimate_memory(cfg, all, u);
  for (const auto& p : model.parts)
    pm.memory.parts.push_back(
        {p.name == "activations" ? "activations (calibration passes)" : p.name, p.bytes});
  pm.memory.parameters = model.parameters;
  // The block model of a distillation (block_model: one layer, two tokens).
  LlamaConfig one = cfg;
  one.num_hidden_layers = 1;
  one.vocab_size = 2;
  one.tie_word_embeddings = true;
  one.bos_token_id = 0, one.eos_token_id = 1;
  LayerPlan p1;
  p1.kinds = {LayerKind::Spd};
  p1.options = all.options;
  MemoryUse b;
  b.gradients = true, b.optimizer_share = 1;
  b.batch = b2b_batch, b.seq = seq;
  pm.memory.parts.push_back(
      {"block model (B2B)",
       int64_t(double(estimate_memory(one, p1, b).total()) + 3 * b2b_batch * S * f)});
  // Host: captured inputs and outputs, layer copies, distilled blocks, HG.
  const double per_layer = 2.0 * n * S * f;
  pm.capture_layers = int(std::clamp<double>(std::floor(double(capture_bytes) / per_layer), 1,
                                             std::max(1, std::min(budget, L))));
  const ParamLayout block(one);
  const ParamInfo &first = block[block.layers[0].input_norm], &last = block[block.layers[0].down];
  const double layer_numel = double(last.offset + last.numel - first.offset);
  pm.memory.parts.push_back({"captured blocks", int64_t(pm.capture_layers * per_layer)});
  // A block's weights on their way (its original kept during a distillation,
  // the trained ones written out; a distilled block read back).
  pm.memory.parts.push_back({"block copies", int64_t(2.0 * layer_numel * f)});
  pm.memory.parts.push_back(
      {"head grouping", int64_t(double(cfg.num_attention_heads) * seq * seq * f)});
  return pm;
}

// ------------------------------------------------------------- distillation

double block_mse(Model<float>& m, int layer, const BlockIO& io, int n, int seq, int batch) {
  const int64_t S = int64_t(seq) * m.config().hidden_size;
  ops::Backend<float>& be = m.backend();
  ops::DeviceBuffer<float> x(&be, size_t(batch * S)), y(&be, size_t(batch * S));
  double sum = 0;
  for (int i = 0; i < n; i += batch) {
    const int b = std::min(batch, n - i);
    be.from_host(x.data(), io.x.data() + i * S, b * S);
    be.from_host(y.data(), io.y.data() + i * S, b * S);
    const float* out = m.block_forward(layer, x.data(), b, seq);
    sum += be.mse_forward(out, y.data(), b * S) * double(b);
  }
  return sum / n;
}

std::unique_ptr<Model<float>> block_model(Model<float>& m, int layer) {
  STRATA_CHECK(layer >= 0 && layer < m.config().num_hidden_layers, "block model: no layer ", layer);
  const LayerKind kind = m.plan().kinds[size_t(layer)];
  STRATA_CHECK(kind == LayerKind::Standard || kind == LayerKind::Spd, "block model: layer ", layer,
               " runs as '", m.plan().to_string(),
               "'; a block of one standard or spd layer is needed");
  LlamaConfig c = m.config();
  c.num_hidden_layers = 1;
  // block_forward never embeds a token or reads the head: the smallest
  // vocabulary, tied, costs nothing.
  c.vocab_size = 2;
  c.tie_word_embeddings = true;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  LayerPlan p;
  p.kinds = {kind};
  p.options = m.plan().options;
  auto b = std::make_unique<Model<float>>(c, p, ops::make_backend<float>(m.backend().name()));
  restore_layer(*b, 0, layer_snapshot(m, layer));
  return b;
}

DistillResult distill_block(Model<float>& m, int layer, const BlockIO& io, int n, int seq,
                            const DistillConfig& c) {
  STRATA_CHECK(c.batch >= 1 && c.epochs >= 0 && c.lr > 0, "distillation: bad settings");
  // The student trains in a model of its own block: the whole model's
  // gradient arena and activations are never needed (an 8B model's block
  // trains in about 4 GB beside the 32 GB of weights).
  const std::unique_ptr<Model<float>> blk = block_model(m, layer);
  Model<float>& s = *blk;
  const int64_t S = int64_t(seq) * s.config().hidden_size;
  ops::Backend<float>& be = s.backend();
  std::vector<bool> mask(s.layout().tensors().size(), false);
  for (size_t t = 0; t < mask.size(); ++t) mask[t] = s.layout()[int(t)].layer == 0;
  s.set_trainable(mask);
  AdamWConfig ac;
  ac.beta1 = 0.9;
  ac.beta2 = 0.999;
  ac.eps = 1e-8;
  ac.weight_decay = 0;
  ac.grad_clip = 0;
  AdamW<float> opt(be, s.layout(), ac, mask);

  Timer timer;
  DistillResult r;
  r.initial_mse = block_mse(s, 0, io, n, seq, c.batch);
  ops::DeviceBuffer<float> x(&be, size_t(c.batch * S)), y(&be, size_t(c.batch * S)),
      dout(&be, size_t(c.batch * S));
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(c.seed);
  for (int e = 0; e < c.epochs; ++e) {
    rng.shuffle(order);
    double sum = 0;
    int steps = 0;
    for (int i = 0; i < n; i += c.batch) {
      const int b = std::min(c.batch, n - i);
      for (int k = 0; k < b; ++k) {
        const int w = order[size_t(i + k)];
        be.from_host(x.data() + k * S, io.x.data() + w * S, S);
        be.from_host(y.data() + k * S, io.y.data() + w * S, S);
      }
      const float* out = s.block_forward(0, x.data(), b, seq);
      const double loss = be.mse_forward(out, y.data(), b * S);
      if (r.steps == 0) r.first_step_mse = loss;
      s.zero_grad();
      be.zero(dout.data(), b * S);
      be.mse_backward(dout.data(), nullptr, out, y.data(), b * S, 1.0);
      s.block_backward(dout.data());
      opt.step(s.params(), s.grads(), c.lr);
      sum += loss;
      ++steps;
      ++r.steps;
    }
    r.epoch_mse.push_back(sum / std::max(steps, 1));
    if (c.progress)
      std::fprintf(stderr, "  b2b block %d: epoch %d/%d  mse %.6g  (%.0f s)\n", layer, e + 1,
                   c.epochs, r.epoch_mse.back(), timer.seconds());
  }
  r.final_mse = block_mse(s, 0, io, n, seq, c.batch);
  r.seconds = timer.seconds();
  restore_layer(m, layer, layer_snapshot(s, 0));
  return r;
}

// ------------------------------------------------------------ head grouping

double within_group_sum(const std::vector<std::vector<double>>& d,
                        const std::vector<std::vector<int>>& groups) {
  double s = 0;
  for (const auto& g : groups)
    for (size_t a = 0; a < g.size(); ++a)
      for (size_t b = a + 1; b < g.size(); ++b) s += d[size_t(g[a])][size_t(g[b])];
  return s;
}

std::vector<std::vector<int>> anticluster(const std::vector<std::vector<double>>& d, int groups,
                                          uint64_t seed, int restarts) {
  const int U = int(d.size());
  STRATA_CHECK(groups >= 1 && U % groups == 0, "anticlustering: ", groups, " groups do not divide ",
               U, " items");
  const int size = U / groups;
  Rng rng(seed);
  std::vector<int> best_of(static_cast<size_t>(U));
  double best = -std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(restarts, 1); ++r) {
    std::vector<int> perm(static_cast<size_t>(U));
    std::iota(perm.begin(), perm.end(), 0);
    if (r > 0) rng.shuffle(perm);  // the first start is the identity grouping
    std::vector<int> of(static_cast<size_t>(U));
    for (int i = 0; i < U; ++i) of[size_t(perm[size_t(i)])] = i / size;
    // Exchange: swap two items of different groups while that raises the sum.
    auto gain = [&](int a, int b) {  // change of the objective if a and b swap groups
      double g = 0;
      for (int k = 0; k < U; ++k) {
        if (k == a || k == b) continue;
        if (of[size_t(k)] == of[size_t(a)]) g += d[size_t(b)][size_t(k)] - d[size_t(a)][size_t(k)];
        if (of[size_t(k)] == of[size_t(b)]) g += d[size_t(a)][size_t(k)] - d[size_t(b)][size_t(k)];
      }
      return g;
    };
    for (bool improved = true; improved;) {
      improved = false;
      for (int a = 0; a < U; ++a)
        for (int b = a + 1; b < U; ++b)
          if (of[size_t(a)] != of[size_t(b)] && gain(a, b) > 1e-12) {
            std::swap(of[size_t(a)], of[size_t(b)]);
            improved = true;
          }
    }
    std::vector<std::vector<int>> gs(static_cast<size_t>(groups));
    for (int i = 0; i < U; ++i) gs[size_t(of[size_t(i)])].push_back(i);
    const double s = within_group_sum(d, gs);
    if (s > best + 1e-12) {
      best = s;
      best_of = of;
    }
  }
  std::vector<std::vector<int>> gs(static_cast<size_t>(groups));
  for (int i = 0; i < U; ++i) gs[size_t(best_of[size_t(i)])].push_back(i);
  // A canonical order: groups by their smallest member.
  std::sort(gs.begin(), gs.end());
  return gs;
}

std::vector<int> best_assignment(const std::vector<std::vector<double>>& score) {
  // Hungarian algorithm (potentials, O(n^3)) minimising -score.
  const int n = int(score.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(size_t(n) + 1, 0), v(size_t(n) + 1, 0);
  std::vector<int> p(size_t(n) + 1, 0), way(size_t(n) + 1, 0);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::vector<double> minv(size_t(n) + 1, inf);
    std::vector<bool> used(size_t(n) + 1, false);
    do {
      used[size_t(j0)] = true;
      const int i0 = p[size_t(j0)];
      double delta = inf;
      int j1 = 0;
      for (int j = 1; j <= n; ++j)
        if (!used[size_t(j)]) {
          const double cur = -score[size_t(i0 - 1)][size_t(j - 1)] - u[size_t(i0)] - v[size_t(j)];
          if (cur < minv[size_t(j)]) {
            minv[size_t(j)] = cur;
            way[size_t(j)] = j0;
          }
          if (minv[size_t(j)] < delta) {
            delta = minv[size_t(j)];
            j1 = j;
          }
        }
      for (int j = 0; j <= n; ++j)
        if (used[size_t(j)]) {
          u[size_t(p[size_t(j)])] += delta;
          v[size_t(j)] -= delta;
        } else {
          minv[size_t(j)] -= delta;
        }
      j0 = j1;
    } while (p[size_t(j0)] != 0);
    do {
      const int j1 = way[size_t(j0)];
      p[size_t(j0)] = p[size_t(j1)];
      j0 = j1;
    } while (j0);
  }
  std::vector<int> col(static_cast<size_t>(n));
  for (int j = 1; j <= n; ++j) col[size_t(p[size_t(j)] - 1)] = j - 1;
  return col;
}

std::vector<int> best_assignment_exhaustive(const std::vector<std::vector<double>>& score) {
  const int n = int(score.size());
  STRATA_CHECK(n <= 9, "exhaustive matching of ", n, " groups: use best_assignment");
  std::vector<int> p(static_cast<size_t>(n)), best;
  std::iota(p.begin(), p.end(), 0);
  double top = -std::numeric_limits<double>::infinity();
  do {
    double s = 0;
    for (int i = 0; i < n; ++i) s += score[size_t(i)][size_t(p[size_t(i)])];
    if (s > top) {
      top = s;
      best = p;
    }
  } while (std::next_permutation(p.begin(), p.end()));
  return best;
}

HeadGrouping group_heads(Model<float>& m, int layer, int degree, const std::vector<float>& xs,
                         int n, int seq, uint64_t seed, int restarts) {
  require_host(m, "head grouping");
  STRATA_CHECK(m.tp_size() == 1, "head grouping runs in one process");
  const LlamaConfig& cfg = m.config();
  const int C = cfg.hidden_size, D = cfg.head_dim, Hq = cfg.num_attention_heads,
            Hkv = cfg.num_key_value_heads, F = cfg.intermediate_size;
  const int Q = Hq * D, QKV = (Hq + 2 * Hkv) * D, G = Hq / Hkv;
  STRATA_CHECK(degree >= 2 && Hkv % degree == 0 && F % degree == 0, "head grouping: degree ",
               degree, " must divide the key/value heads (", Hkv, ") and intermediate_size (", F,
               ")");
  STRATA_CHECK(int64_t(xs.size()) == int64_t(n) * seq * C, "head grouping: block input of ",
               xs.size(), " values for ", n, " windows of ", seq, " x ", C);
  ops::Backend<float>& be = m.backend();
  const LayerTensors<float> w = m.layer_params(layer);
  const int U = Hkv, Fs = F / degree;

  // Per window: q, k after RoPE and the attention output (the block's own
  // kernels), then each head's probabilities on the host (T x T lower
  // triangle). Two passes over the windows (distances, then the scores of
  // the groups they give), so nothing grows with the number of windows.
  std::vector<float> ln(size_t(seq) * C), rstd(static_cast<size_t>(seq)), qkv(size_t(seq) * QKV),
      att(size_t(seq) * Q), lse(size_t(Hq) * seq);
  auto attend = [&](int s) {
    const float* x = xs.data() + int64_t(s) * seq * C;
    be.rmsnorm_forward(ln.data(), rstd.data(), x, w.input_norm, seq, C, cfg.rms_norm_eps);
    be.linear_forward(qkv.data(), ln.data(), w.qkv, w.qkv_bias, seq, C, QKV);
    be.rope_forward(qkv.data(), m.rope_cos(), m.rope_sin(), 1, seq, Hq + Hkv, D, QKV, 0);
    be.attention_forward(att.data(), lse.data(), qkv.data(), 1, seq, Hq, Hkv, D);
  };
  std::vector<double> d2(size_t(U) * U, 0.0);
  std::vector<float> prob(size_t(Hq) * seq * seq);
  const float scale = 1.f / std::sqrt(float(D));
  for (int s = 0; s < n; ++s) {
    attend(s);
    for (int h = 0; h < Hq; ++h) {
      const int kvh = h / G;
      for (int t = 0; t < seq; ++t) {
        const float* q = qkv.data() + int64_t(t) * QKV + h * D;
        float* row = prob.data() + (int64_t(h) * seq + t) * seq;
        for (int j = 0; j <= t; ++j) {
          const float* k = qkv.data() + int64_t(j) * QKV + Q + kvh * D;
          float dot = 0;
          for (int e = 0; e < D; ++e) dot += q[e] * k[e];
          row[j] = std::exp(dot * scale - lse[size_t(h) * seq + size_t(t)]);
        }
      }
    }
    // Unit a's signature is its query heads' probabilities side by side.
    for (int a = 0; a < U; ++a)
      for (int b = a + 1; b < U; ++b) {
        double acc = 0;
        for (int g = 0; g < G; ++g) {
          const float* pa = prob.data() + int64_t(a * G + g) * seq * seq;
          const float* pb = prob.data() + int64_t(b * G + g) * seq * seq;
          for (int t = 0; t < seq; ++t)
            for (int j = 0; j <= t; ++j) {
              const double diff = double(pa[t * seq + j]) - pb[t * seq + j];
              acc += diff * diff;
            }
        }
        d2[size_t(a) * U + size_t(b)] += acc;
      }
  }
  HeadGrouping hg;
  hg.degree = degree;
  hg.units = U;
  hg.distance.assign(size_t(U), std::vector<double>(size_t(U), 0.0));
  for (int a = 0; a < U; ++a)
    for (int b = a + 1; b < U; ++b)
      hg.distance[size_t(a)][size_t(b)] = hg.distance[size_t(b)][size_t(a)] =
          std::sqrt(d2[size_t(a) * U + size_t(b)]);
  hg.groups = anticluster(hg.distance, degree, seed, restarts);
  std::vector<std::vector<int>> identity(static_cast<size_t>(degree));
  for (int u = 0; u < U; ++u) identity[size_t(u / (U / degree))].push_back(u);
  hg.spread_before = within_group_sum(hg.distance, identity);
  hg.spread_after = within_group_sum(hg.distance, hg.groups);

  // Scores: MLP slice m on x + P_{A_i} (+ b), summed Frobenius norms, where
  // P_{A_i} is the o_proj partial of group i's heads.
  hg.score.assign(size_t(degree), std::vector<double>(size_t(degree), 0.0));
  std::vector<float> p(size_t(seq) * C), hbuf(size_t(seq) * C), gu(size_t(seq) * 2 * Fs),
      act(size_t(seq) * Fs), z(size_t(seq) * C);
  const float* gate = w.gateup;
  const float* up = w.gateup + int64_t(F) * C;
  for (int s = 0; s < n; ++s) {
    attend(s);
    const float* x = xs.data() + int64_t(s) * seq * C;
    for (int i = 0; i < degree; ++i) {
      std::copy(x, x + int64_t(seq) * C, hbuf.begin());
      for (int u : hg.groups[size_t(i)]) {
        be.linear_forward(p.data(), att.data() + u * G * D, w.o + u * G * D, nullptr, seq, G * D, C,
                          {Q, Q, 0});
        be.residual_forward(hbuf.data(), hbuf.data(), p.data(), int64_t(seq) * C);
      }
      if (w.o_bias) be.bias_add_forward(hbuf.data(), w.o_bias, seq, C);
      be.rmsnorm_forward(ln.data(), rstd.data(), hbuf.data(), w.post_norm, seq, C,
                         cfg.rms_norm_eps);
      for (int mm = 0; mm < degree; ++mm) {
        be.linear_forward(gu.data(), ln.data(), gate + int64_t(mm) * Fs * C, nullptr, seq, C, Fs,
                          {0, 0, 2 * Fs});
        be.linear_forward(gu.data() + Fs, ln.data(), up + int64_t(mm) * Fs * C, nullptr, seq, C, Fs,
                          {0, 0, 2 * Fs});
        be.swiglu_forward(act.data(), gu.data(), seq, Fs);
        be.linear_forward(z.data(), act.data(), w.down + int64_t(mm) * Fs, nullptr, seq, Fs, C,
                          {0, F, 0});
        double sq = 0;
        for (float v : z) sq += double(v) * v;
        hg.score[size_t(i)][size_t(mm)] += std::sqrt(sq);
      }
    }
  }
  hg.slice_of_group = best_assignment(hg.score);
  const int per = U / degree;
  hg.unit_order.assign(size_t(U), -1);
  for (int i = 0; i < degree; ++i)
    for (int k = 0; k < per; ++k)
      hg.unit_order[size_t(hg.slice_of_group[size_t(i)] * per + k)] =
          hg.groups[size_t(i)][size_t(k)];
  return hg;
}

void permute_heads(Model<float>& m, int layer, const std::vector<int>& order) {
  require_host(m, "head permutation");
  STRATA_CHECK(m.tp_size() == 1, "head permutation runs in one process");
  const LlamaConfig& cfg = m.config();
  const int C = cfg.hidden_size, D = cfg.head_dim, Hq = cfg.num_attention_heads,
            Hkv = cfg.num_key_value_heads;
  const int G = Hq / Hkv, Q = Hq * D;
  STRATA_CHECK(int(order.size()) == Hkv, "head permutation of ", order.size(), " units for ", Hkv,
               " key/value heads");
  std::vector<int> seen(order);
  std::sort(seen.begin(), seen.end());
  for (int u = 0; u < Hkv; ++u)
    STRATA_CHECK(seen[size_t(u)] == u, "head permutation: not a permutation of 0..", Hkv - 1);
  const auto& P = m.layout().layers.at(size_t(layer));
  // Rows: new block p (of `rows` rows) = old block order[p].
  auto rows = [&](int t, int block_rows, int cols) {
    if (t < 0) return;
    float* a = m.param(t);
    std::vector<float> old(a, a + int64_t(Hkv) * block_rows * cols);
    for (int p = 0; p < Hkv; ++p)
      std::copy(old.begin() + int64_t(order[size_t(p)]) * block_rows * cols,
                old.begin() + int64_t(order[size_t(p)] + 1) * block_rows * cols,
                a + int64_t(p) * block_rows * cols);
  };
  rows(P.q, G * D, C);
  rows(P.k, D, C);
  rows(P.v, D, C);
  rows(P.q_bias, G * D, 1);
  rows(P.k_bias, D, 1);
  rows(P.v_bias, D, 1);
  // o_proj [C, Q]: column blocks of G * D.
  float* o = m.param(P.o);
  std::vector<float> old(o, o + int64_t(C) * Q);
  for (int r = 0; r < C; ++r)
    for (int p = 0; p < Hkv; ++p)
      std::copy(old.begin() + int64_t(r) * Q + int64_t(order[size_t(p)]) * G * D,
                old.begin() + int64_t(r) * Q + int64_t(order[size_t(p)] + 1) * G * D,
                o + int64_t(r) * Q + int64_t(p) * G * D);
}

}  // namespace strata::spd
