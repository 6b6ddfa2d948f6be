#include "model/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace strata {
namespace {

// Sizes are counted in double: exact below 2^53 (the tests compare them with
// the allocations), and no overflow from an absurd configuration.
// 64-byte (16-float) rounding, as the arenas carve.
double round16(double n) { return std::ceil(n / 16) * 16; }
// Bytes for a Part, saturating far beyond any machine.
int64_t bytes(double b) { return b < 9e18 ? int64_t(b) : int64_t(9e18); }

// One layer's sizes on tensor-parallel rank 0 (mirrors ParamLayout::share and
// LayerDims::of): heads and MLP columns cut into the shard's parts, or none
// when the shard starts past rank 0.
struct Dims {
  double Hq = 0, Hkv = 0, F = 0;
};

}  // namespace

const char* recompute_name(Recompute r) {
  return r == Recompute::Full ? "full" : r == Recompute::Selective ? "selective" : "none";
}

bool parse_recompute(const std::string& s, Recompute* out) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (s == recompute_name(r)) {
      *out = r;
      return true;
    }
  return false;
}

int64_t MemoryEstimate::total() const {
  double t = 0;
  for (const Part& p : parts) t += double(p.bytes);
  return bytes(t);
}

int64_t MemoryEstimate::bytes_of(const std::string& name) const {
  for (const Part& p : parts)
    if (p.name == name) return p.bytes;
  return 0;
}

std::string MemoryEstimate::to_string() const {
  std::string s;
  for (const Part& p : parts) {
    if (p.bytes == 0) continue;
    s += cat(s.empty() ? "" : " + ", p.name, " ", human_bytes(double(p.bytes)));
  }
  int shown = 0;
  for (const Part& p : parts) shown += p.bytes > 0;
  if (shown <= 1) return s.empty() ? "nothing" : s;
  return cat(s, " = ", human_bytes(double(total())));
}

MemoryEstimate estimate_memory(const LlamaConfig& cfg_in, const LayerPlan& plan,
                               const MemoryUse& u) {
  LlamaConfig c = cfg_in;
  c.finalize();
  const int tp = std::max(1, u.tp);
  const int L = c.num_hidden_layers;
  const double C = c.hidden_size, D = c.head_dim, V = c.vocab_size;
  std::vector<TpShard> shards =
      plan.num_layers() == L ? plan.tp_shards(tp) : std::vector<TpShard>{};
  auto dims = [&](int l) {
    const TpShard s = shards.empty() ? TpShard{0, tp} : shards[size_t(l)];
    Dims d;
    if (s.first > 0) return d;  // rank 0 holds none of this layer
    d.Hq = c.num_attention_heads / s.ranks;
    d.Hkv = c.num_key_value_heads / s.ranks;
    d.F = c.intermediate_size / s.ranks;
    return d;
  };

  // Layers grouped by their sizes on rank 0 (a plan places some on other
  // ranks), so an absurd layer count costs nothing to count.
  struct Group {
    Dims d;
    bool spd = false;
    double count = 0;
  };
  const bool have_plan = plan.num_layers() == L;
  const StageHolding& stage = u.stage;
  const bool staged = !stage.whole();
  STRATA_CHECK(stage.layers.empty() || int(stage.layers.size()) == L,
               "memory estimate: a stage of ", stage.layers.size(), " layers for a model of ", L);
  // The layers [lo, hi) that `keep` accepts, grouped (without a plan every
  // layer is the first one's).
  auto group_layers = [&](int lo, int hi, const std::function<bool(int)>& keep) {
    std::vector<Group> gs;
    for (int l = lo; l < hi; ++l) {
      if (!keep(l)) continue;
      const Dims d = dims(l);
      const bool spd_layer = have_plan && plan.spd_block(l);
      auto it = std::find_if(gs.begin(), gs.end(), [&](const Group& g) {
        return !have_plan ||
               (g.d.Hq == d.Hq && g.d.Hkv == d.Hkv && g.d.F == d.F && g.spd == spd_layer);
      });
      if (it == gs.end())
        gs.push_back({d, spd_layer, 1});
      else
        ++it->count;
    }
    return gs;
  };
  // An absurd layer count without a plan costs nothing to count.
  auto all_layers = [&] {
    return have_plan ? group_layers(0, L, [](int) { return true; })
                     : std::vector<Group>{{dims(0), false, double(L)}};
  };
  const std::vector<Group> all_groups = all_layers();  // the backward scratch's largest
  const std::vector<Group> groups =                    // this rank's layers
      staged ? group_layers(0, L, [&](int l) { return stage.holds_layer(l); }) : all_groups;

  // Parameters: the order and alignment of ParamLayout. Each layer starts
  // aligned (its input norm), so a layer adds its span rounded to 16; its
  // bucket (weight_store.h) is the span before that rounding.
  auto bucket = [&](const Dims& d) {
    double n = 0;
    auto add = [&](double k, bool align) {
      if (align) n = round16(n);
      n += k;
    };
    add(C, true);
    add(d.Hq * D * C, true);
    add(d.Hkv * D * C, false);
    add(d.Hkv * D * C, false);
    if (c.attention_bias) {
      add(d.Hq * D, true);
      add(d.Hkv * D, false);
      add(d.Hkv * D, false);
    }
    add(C * d.Hq * D, true);
    if (c.attention_bias) add(C, true);
    add(C, true);
    add(d.F * C, true);
    add(d.F * C, false);
    add(C * d.F, true);
    return n;
  };
  auto span = [&](const Dims& d) { return round16(bucket(d)); };
  // The embedding's bucket, and the final norm's with the untied head (a
  // pipeline stage holds them or not).
  const bool holds_embed = stage.embedding || (c.tie_word_embeddings && stage.head);
  const double embed_n = holds_embed ? V / tp * C : 0;
  const double head_n = !stage.head ? 0 : c.tie_word_embeddings ? C : round16(C) + V / tp * C;
  double P = round16(embed_n);
  double maxF = 0, maxQKV = 0, maxQ = 0, widest = 0;  // widest: the largest layer bucket
  for (const Group& g : groups) {
    P += g.count * span(g.d);
    widest = std::max(widest, bucket(g.d));
  }
  for (const Group& g : all_groups) {
    maxF = std::max(maxF, g.d.F);
    maxQKV = std::max(maxQKV, (g.d.Hq + 2 * g.d.Hkv) * D);
    maxQ = std::max(maxQ, g.d.Hq * D);
  }
  P += head_n;

  MemoryEstimate e;
  e.parameters = bytes(P);
  if (u.runtime_bytes > 0) e.parts.push_back({"runtime", u.runtime_bytes});
  const double f = sizeof(float);
  // The model's small fixed buffers: RoPE tables and two norm vectors.
  const double fixed = (double(c.max_position_embeddings) * std::floor(D / 2) * 2 + 2 * C) * f;
  if (u.zero >= 2 && u.gradients) {
    // ZeRO-2/3: every bucket cut into dp shards of ceil(n / dp) rounded to 16.
    const double dp = std::max(1, u.dp);
    auto shard = [&](double n) { return round16(std::ceil(n / dp)); };
    double S = shard(embed_n) + shard(head_n);
    for (const Group& g : groups) S += g.count * shard(bucket(g.d));
    // Buckets padded to dp shards: a layer buffer, the embedding's, the head's.
    const double layer = dp * shard(widest), embed = dp * shard(embed_n), head = dp * shard(head_n);
    // The store's pool at its peak (zero.h): layer buffers per unit in
    // flight, a unit being as many buffers as its layers.
    int per_unit = 1;
    for (const PlanUnit& unit : have_plan ? plan.units() : std::vector<PlanUnit>{})
      per_unit = std::max(per_unit, unit.size);
    // Kinds with a second gradient buffer may keep a unit's buckets open
    // into the next unit (KindBuffers::grad_slot_1).
    const bool deferring = have_plan && plan.buffers().grad_slot_1;
    const bool tied = c.tie_word_embeddings;
    // A request up to a layer bucket's size takes a layer buffer.
    auto cls = [&](double n) { return std::max(n, layer); };
    // The head's gradients (tied: the embedding's, open the whole backward),
    // reused for the embedding's at the end; untied and no larger than a
    // layer bucket, a layer buffer that goes on to serve the layers.
    const double head_grads = tied                             ? cls(embed)
                              : std::max(embed, head) <= layer ? 0
                                                               : std::max(embed, head);
    double buffers = 0;
    if (u.zero == 2) {
      buffers = head_grads + per_unit * (2 + deferring) * layer;
    } else {
      // the kept embedding and head, and the units' weights and gradients
      buffers = cls(embed) + cls(head) + head_grads + per_unit * (4 + 2 * deferring) * layer;
    }
    e.parts.push_back({"weights", bytes((u.zero == 3 ? S : P) * f + fixed)});
    e.parts.push_back({"gradients", bytes(S * f)});
    e.parts.push_back({"AdamW moments", bytes(2 * S * f)});
    e.parts.push_back({cat("ZeRO-", u.zero, " buffers"), bytes(buffers * f)});
  } else {
    e.parts.push_back({"weights", bytes(P * f + fixed)});
    if (u.gradients) e.parts.push_back({"gradients", bytes(P * f)});
    if (u.optimizer_share > 0)
      e.parts.push_back({"AdamW moments", bytes(2 * P * u.optimizer_share * f)});
  }
  // The GEMM engines' bf16 copies of the weights, kept for a training step
  // or a generation (GemmEngine::hold, freeze): two bytes an element.
  if (u.bf16_weight_copies && u.zero != 3) e.parts.push_back({"bf16 weight copies", bytes(P * 2)});
  if (u.gradients && u.dp > 1) {
    // The data-parallel collectives in flight keep a temporary copy of their
    // message in the library (Open MPI's nonblocking all-reduce and
    // reduce-scatter do; measured, docs/distributed.md, "The memory estimate against measurement"):
    // the head's or embedding's bucket and the layers' in flight, two all-reduces (ZeRO 0/1,
    // completed as backward polls) or one reduce-scatter beside the store's own buffers (ZeRO-2/3).
    e.parts.push_back({"communication buffers",
                       bytes((std::max(embed_n, head_n) + (u.zero >= 2 ? 1 : 2) * widest) * f)});
  }

  if (u.batch > 0 && u.seq > 0) {
    // The two activation arenas (Model::ensure_activations), element for
    // element: `a` in the activations' storage (fp32, or bf16 with
    // u.bf16_activations, rounded to 64 bytes = 32 elements), `s` the
    // statistics kept in fp32 (norm rstd, attention and head LSE, SPD's
    // weight-gradient sums).
    const double N = double(u.batch) * u.seq;
    const double af = u.bf16_activations ? 2 : f;
    auto ra = [&](double n) { return u.bf16_activations ? std::ceil(n / 32) * 32 : round16(n); };
    // One slot's arenas for `layers` layers (`gs`) and `streams` streams,
    // with a stage pass's boundary gradient buffer: bytes of the elements in
    // the activations' storage and of the statistics in fp32.
    auto arena = [&](const std::vector<Group>& gs, double layers, double streams, bool boundary) {
      double a = streams * ra(N * C) + (boundary ? ra(N * C) : 0), s = 0;
      // The buffers the plan's kinds add (KindBuffers).
      const KindBuffers kb = have_plan ? plan.buffers() : KindBuffers();
      const bool deferring = kb.grad_slot_1, pairs = kb.grad_slot_2, par_groups = kb.output_slot_2,
                 spd = kb.spd_block;
      const int spd_v = spd ? std::max(1, int(plan.number("spd_degree", 2)) / tp) : 1;
      struct Sizes {  // one layer's: in the activations' storage, statistics
        double a = 0, s = 0;
      };
      auto per_layer = [&](const Dims& d, bool with_spd) {
        Sizes p;
        p.a = 2 * ra(N * C) + ra(N * (d.Hq + 2 * d.Hkv) * D) + ra(N * d.Hq * D) + ra(N * 2 * d.F) +
              ra(N * d.F);
        p.s = 2 * round16(N) + round16(double(u.batch) * d.Hq * u.seq);
        if (with_spd) {
          p.a += spd_v * (2 * ra(N * C) + ra(N * std::floor(2 * d.F / spd_v)) +
                          ra(N * std::floor(d.F / spd_v)));
          p.s += spd_v * round16(N);
        }
        return p;
      };
      if (u.recompute == Recompute::Full) {  // one set for the widest layer, every layer's rstd
        Dims w;
        for (const Group& g : gs)
          w.Hq = std::max(w.Hq, g.d.Hq), w.Hkv = std::max(w.Hkv, g.d.Hkv),
          w.F = std::max(w.F, g.d.F);
        const Sizes p = per_layer(w, spd);
        a += p.a;
        s += p.s + (layers - 1) * 2 * round16(N);
      } else if (u.recompute == Recompute::Selective) {
        // One shared norm output and SwiGLU output; SPD layers keep their own.
        bool dropping = false;
        for (const Group& g : gs) dropping |= !g.spd;
        if (dropping) a += ra(N * C) + ra(N * maxF);
        for (const Group& g : gs) {
          const Sizes p = per_layer(g.d, g.spd);
          a += g.count * (p.a - (g.spd ? 0 : 2 * ra(N * C) + ra(N * g.d.F)));
          s += g.count * p.s;
        }
      } else {
        for (const Group& g : gs) {
          const Sizes p = per_layer(g.d, g.spd);
          a += g.count * p.a;
          s += g.count * p.s;
        }
      }
      a += ra(N * C);       // final norm
      s += 2 * round16(N);  // its rstd, the head's LSE
      a += 7 * ra(N * C);   // module outputs, sub-batches, backward streams
      a += ra(N * maxQKV) + ra(N * maxQ) + ra(N * 2 * maxF) + ra(N * maxF);
      a += (double(deferring) + double(pairs) + 2 * double(spd) + double(par_groups)) * ra(N * C);
      if (spd && u.bf16_activations) {  // SPD's backward sum: [N, C] and [3C] apart
        a += ra(N * C);
        s += round16(3 * C);
      } else if (spd) {
        a += round16(N * C + 3 * C);  // one message
      }
      return a * af + s * f;
    };
    double slot = 0;  // the largest slot's
    if (stage.chunks.empty()) {
      slot = arena(all_groups, double(L), 2 * double(L) + 1, false);
    } else {
      for (const auto& [lo, hi] : stage.chunks)
        slot = std::max(slot, arena(group_layers(lo, hi, [](int) { return true; }), double(hi - lo),
                                    double(2 * hi - std::max(2 * lo - 1, 0) + 1), true));
    }
    e.parts.push_back({"activations", bytes(slot * std::max(1, u.activation_slots))});
    if (u.bf16_activations) {
      // The kernels without a bf16 path yet run on fp32 copies kept for
      // reuse (the CPU backend's Staged buffers, per kernel and slot; the
      // device backends' shared slots need less): the linear layers' input,
      // output and output gradient, attention's forward and backward
      // operands, the head's input, normed input and its gradient.
      const double linear = std::max({C, maxF, maxQ}) + std::max({maxQKV, 2 * maxF, C}) +
                            std::max({maxQKV, 2 * maxF, C});
      e.parts.push_back({"bf16 staging", bytes(N * (linear + 3 * maxQ + 3 * maxQKV + 3 * C) * f)});
    }
    // The fused head's scratch (backends/cpu/head_ce.cpp): one chunk of
    // logits (about 64 MiB, 256..4096 rows), the normed input's gradient and
    // per-token statistics.
    const double Vl = std::floor(V / tp);
    const double rows = std::min(
        N, std::floor(std::clamp(std::floor(16777216.0 / std::max(Vl, 1.0)), 256.0, 4096.0) / 16) *
               16);
    e.parts.push_back({"workspace", bytes((rows * Vl + (u.gradients ? N * C : 0) + 2 * N) * f)});
  }
  if (u.kv_batch > 0 && u.kv_len > 0) {
    double heads = 0;
    for (const Group& g : groups) heads += g.count * g.d.Hkv;
    e.parts.push_back(
        {"KV cache", bytes(2 * double(u.kv_batch) * heads * u.kv_len * D * (u.kv_bf16 ? 2.0 : f))});
  }
  if (u.logits_rows > 0)
    e.parts.push_back({"logits", bytes(double(u.logits_rows) * (V + 2 * C) * f)});
  if (u.other_bytes > 0) e.parts.push_back({u.other_name, u.other_bytes});
  return e;
}

void check_memory(const MemoryEstimate& need, const MemoryLimit& limit, int processes,
                  const std::string& what, const std::string& hint) {
  if (limit.bytes < 0) return;
  const int n = std::max(1, processes);
  const double total = double(need.total()) * n;
  if (total <= double(limit.bytes)) return;
  const std::string per = n > 1 ? cat(" per process x ", n, " processes on this machine") : "";
  const std::string msg =
      cat(what, " needs about ", human_bytes(double(need.total())), per, " (", need.to_string(),
          ") but ", human_bytes(double(limit.bytes)), " is available (", limit.source, "); ", hint);
  const char* env = std::getenv("STRATA_MEMORY_CHECK");
  if (env && std::string(env) == "0") {
    log::warn(msg, " (going on: STRATA_MEMORY_CHECK=0)");
    return;
  }
  fail(msg);
}

}  // namespace strata
