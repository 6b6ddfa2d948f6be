#include "model/stage_runner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace strata {

StageHolding stage_holding(const std::vector<int>& first, int p, int rank,
                           const std::vector<bool>& exit_stages) {
  const int S = int(first.size()) - 1;
  STRATA_CHECK(S >= 1 && p >= 1 && S % p == 0 && rank >= 0 && rank < p, "pipeline: ", S,
               " stages over ", p, " ranks (rank ", rank, ")");
  StageHolding h;
  h.layers.assign(size_t(first.back()), false);
  h.embedding = false;
  h.head = false;
  for (int s = rank; s < S; s += p) {
    STRATA_CHECK(first[size_t(s)] < first[size_t(s) + 1], "pipeline stage ", s, " holds no layer");
    for (int l = first[size_t(s)]; l < first[size_t(s) + 1]; ++l) h.layers[size_t(l)] = true;
    h.chunks.push_back({first[size_t(s)], first[size_t(s) + 1]});
    h.embedding |= s == 0;
    h.head |= s == S - 1 || (size_t(s) < exit_stages.size() && exit_stages[size_t(s)]);
  }
  return h;
}

std::vector<int> stage_layers(const LayerPlan& plan, const std::vector<int>& unit_first) {
  const std::vector<PlanUnit> units = plan.units();
  std::vector<int> out;
  for (int k : unit_first)
    out.push_back(k < int(units.size()) ? units[size_t(k)].first : plan.num_layers());
  return out;
}

namespace {

// Sums over the pipeline ranks that hold a shared tensor their slices of its
// gradient (`held`: this rank holds it; `slice`: its n elements in backend
// memory, n the same on every holder that has any). Collective over pp.
void sum_over_holders(Communicator& pp, ops::Backend<float>& be, bool held, float* slice,
                      int64_t n) {
  const int64_t holders = pp.allreduce_sum(int64_t(held));
  if (holders < 2) return;
  n = pp.allreduce_sum(held ? n : 0) / holders;  // the others learn the length
  if (n == 0) return;
  std::vector<float> buf(size_t(n), 0.f);
  if (held) be.to_host(buf.data(), slice, n);
  pp.allreduce_sum(buf.data(), n);
  if (held) be.from_host(slice, buf.data(), n);
}

}  // namespace

void sum_shared_gradients(Model<float>& model, Communicator& pp) {
  if (pp.size() == 1) return;
  const ParamLayout& layout = model.layout();
  for (int t : {layout.embed, layout.final_norm, layout.lm_head})
    if (t >= 0)
      sum_over_holders(pp, model.backend(), layout[t].held,
                       layout[t].held ? model.grad(t) : nullptr, layout[t].numel);
}

void sum_shared_gradient_shards(ZeroShards& store, const ParamLayout& layout, Communicator& pp) {
  if (pp.size() == 1) return;
  store.finish_gradients();
  for (int t : {layout.embed, layout.final_norm, layout.lm_head}) {
    if (t < 0) continue;
    const bool held = layout[t].held;
    std::vector<bool> only(layout.tensors().size(), false);
    only[size_t(t)] = true;
    const std::vector<ZeroShards::Piece> mine = held ? store.pieces(only) : decltype(mine){};
    STRATA_CHECK(mine.size() <= 1, "internal error: ", layout[t].name, " in ", mine.size(),
                 " pieces of one shard");
    float* slice = mine.empty() ? nullptr : store.gradient_shard() + mine[0].shard_offset;
    sum_over_holders(pp, store.backend(), held, slice, mine.empty() ? 0 : mine[0].numel);
  }
}

std::vector<int> pipeline_slots(pipeline::Schedule s, int p, int m, int v) {
  std::vector<int> most(size_t(p), 0);
  const auto schedule = pipeline::make_schedule(s, p, m, v);
  for (int r = 0; r < p; ++r) {
    int held = 0;
    for (const pipeline::Pass& ps : schedule[size_t(r)])
      most[size_t(r)] = std::max(most[size_t(r)], held += ps.forward ? 1 : -1);
  }
  return most;
}

int pipeline_slots(pipeline::Schedule s, int p, int m, int v, int rank) {
  return pipeline_slots(s, p, m, v)[size_t(rank)];
}

template <typename T>
StageRunner<T>::StageRunner(Model<T>& model, Communicator& pp, std::vector<int> first,
                            pipeline::Schedule schedule, int virtual_stages)
    : model_(model), pp_(pp), first_(std::move(first)), kind_(schedule), v_(virtual_stages) {
  STRATA_CHECK(stages() == pp_.size() * v_, "pipeline: ", stages(), " stages for ", pp_.size(),
               " ranks x ", v_, " virtual stages");
  const auto& chunks = model_.stage_chunks();
  STRATA_CHECK(int(chunks.size()) == v_, "pipeline: the model holds ", chunks.size(),
               " layer ranges, the rank has ", v_, " stages");
  for (int c = 0; c < v_; ++c) {
    const int s = pp_.rank() + c * pp_.size();
    STRATA_CHECK(chunks[size_t(c)].first == first_[size_t(s)] &&
                     chunks[size_t(c)].second == first_[size_t(s) + 1],
                 "pipeline: stage ", s, " is layers [", first_[size_t(s)], ", ",
                 first_[size_t(s) + 1], ") but the model holds [", chunks[size_t(c)].first, ", ",
                 chunks[size_t(c)].second, ")");
  }
}

template <typename T>
StageRunner<T>::~StageRunner() = default;

template <typename T>
void StageRunner<T>::make_schedule(int m) {
  if (m == m_) return;
  sched_ = pipeline::make_schedule(kind_, pp_.size(), m, v_);
  m_ = m;
  const int p = pp_.size(), me = pp_.rank(), S = stages();
  inbox_.assign(size_t(p), {});
  where_.clear();
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    for (const pipeline::Pass& ps : sched_[size_t(q)]) {
      const Message msg{ps.forward, ps.micro_batch, ps.forward ? ps.stage + 1 : ps.stage - 1};
      if (msg.to < 0 || msg.to >= S || rank_of(msg.to) != me) continue;
      where_[msg] = {q, int(inbox_[size_t(q)].size())};
      inbox_[size_t(q)].push_back(msg);
    }
  }
}

template <typename T>
int64_t StageRunner<T>::boundary_elems(int stage, int64_t N) const {
  return int64_t(model_.boundary_streams(first_[size_t(stage)])) * N * model_.config().hidden_size;
}

template <typename T>
typename StageRunner<T>::Result StageRunner<T>::step(const std::vector<MicroBatch>& micro, int B,
                                                     int seq, double dloss) {
  make_schedule(int(micro.size()));
  const Timer wall;
  double idle = 0;
  auto wait = [&](int64_t handle) {  // waiting on another stage is idle time
    const Timer t;
    pp_.wait(handle);
    idle += t.seconds();
  };
  const int p = pp_.size(), me = pp_.rank(), S = stages();
  const int L = model_.config().num_hidden_layers;
  const int64_t N = int64_t(B) * seq;
  using Posted = Wire;
  std::map<Message, Posted> posted, local;
  std::vector<int> next_post(static_cast<size_t>(p), 0);
  Result res;
  auto post_through = [&](const Message& msg) {  // receives from its sender up to msg
    const auto it = where_.find(msg);
    if (it == where_.end()) return;  // from this rank
    const auto [q, pos] = it->second;
    for (int& k = next_post[size_t(q)]; k <= pos; ++k) {
      const Message& mk = inbox_[size_t(q)][size_t(k)];
      const int64_t n = boundary_elems(mk.forward ? mk.to : mk.to + 1, N);
      Posted& slot = posted[mk];
      slot.buf = message(n);
      slot.handle = pp_.recv_async(wire_data(slot, n), floats(n), q);
      ++res.receives;
    }
  };
  // The message a pass reads, if any.
  auto input_of = [&](const pipeline::Pass& ps, Message* msg) {
    if (ps.forward ? ps.stage == 0 : ps.stage == S - 1) return false;
    *msg = Message{ps.forward, ps.micro_batch, ps.stage};
    return true;
  };
  auto take = [&](const Message& msg) {
    if (auto it = local.find(msg); it != local.end()) {
      Posted out = std::move(it->second);
      local.erase(it);
      return out;
    }
    post_through(msg);
    const auto it = posted.find(msg);
    STRATA_CHECK(it != posted.end(), "internal error: pipeline message not posted");
    wait(it->second.handle);
    Posted out = std::move(it->second);
    posted.erase(it);
    arrived(out, int64_t(out.buf.size()));
    return out;
  };
  std::vector<Posted> sending;
  auto deliver = [&](const Message& msg, ops::ActBuffer<T> buf, int64_t n) {
    const int to = rank_of(msg.to);
    if (to == me) {
      local[msg] = Posted{std::move(buf), {}, -1};
      return;
    }
    Posted s{std::move(buf), {}, -1};
    departing(s, n);
    s.handle = pp_.send_async(wire_data(s, n), floats(n), to);
    ++res.sends;
    sending.push_back(std::move(s));
  };

  res.loss.exit_loss_sum.assign(size_t(L), std::nan(""));
  std::map<std::pair<int, int>, int> slot_of;  // (micro-batch, stage) -> activation slot
  std::vector<int> free_slots;
  int slots = 0;
  const auto& mine = sched_[size_t(me)];
  std::vector<size_t> last_backward(size_t(v_), 0);  // per chunk: the index of its last backward
  for (size_t i = 0; i < mine.size(); ++i)
    if (!mine[i].forward) last_backward[size_t(mine[i].stage / p)] = i;
  for (size_t i = 0; i < mine.size(); ++i) {
    const pipeline::Pass& ps = mine[i];
    Message ahead;  // the next pass's receive, posted before this pass computes
    if (i + 1 < mine.size() && input_of(mine[i + 1], &ahead)) post_through(ahead);
    const MicroBatch& mb = micro[size_t(ps.micro_batch)];
    const int chunk = ps.stage / p;
    Message in_msg;
    const bool has_in = input_of(ps, &in_msg);
    if (ps.forward) {
      int slot = slots;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        ++slots;
      }
      slot_of[{ps.micro_batch, ps.stage}] = slot;
      res.max_slots = std::max(res.max_slots, int(slot_of.size()));
      model_.use_activation_slot(slot);
      Posted in;
      if (has_in) in = take(in_msg);
      model_.stage_forward(chunk, mb.tokens, mb.targets, B, seq, mb.pass,
                           has_in ? ops::ActIn<T>(in.buf.data()) : ops::ActIn<T>(), mb.skip);
      if (ps.stage < S - 1) {
        const int64_t n = boundary_elems(ps.stage + 1, N);
        ops::ActBuffer<T> out = message(n);
        model_.stage_output(out.data());
        deliver(Message{true, ps.micro_batch, ps.stage + 1}, std::move(out), n);
      }
    } else {
      const auto it = slot_of.find({ps.micro_batch, ps.stage});
      STRATA_CHECK(it != slot_of.end(), "internal error: a backward before its forward");
      model_.use_activation_slot(it->second);
      if (before_backward_) before_backward_(chunk, i == last_backward[size_t(chunk)]);
      Posted dout;
      if (has_in) dout = take(in_msg);
      const int64_t n = ps.stage > 0 ? boundary_elems(ps.stage, N) : 0;
      ops::ActBuffer<T> din = n ? message(n) : ops::ActBuffer<T>();
      const LossResult r = model_.stage_backward(
          dloss, has_in ? ops::ActIn<T>(dout.buf.data()) : ops::ActIn<T>(), din.data(), mb.skip);
      res.loss.loss_sum += r.loss_sum;
      res.loss.n_valid += r.n_valid;
      res.loss.objective += r.objective;
      for (int l = 0; l < L; ++l) {
        const double x = r.exit_loss_sum[size_t(l)];
        if (std::isnan(x)) continue;
        double& acc = res.loss.exit_loss_sum[size_t(l)];
        acc = std::isnan(acc) ? x : acc + x;
      }
      if (ps.stage > 0) deliver(Message{false, ps.micro_batch, ps.stage - 1}, std::move(din), n);
      free_slots.push_back(it->second);
      slot_of.erase(it);
    }
  }
  for (Posted& s : sending) wait(s.handle);
  res.wall = wall.seconds();
  res.idle = idle;
  STRATA_CHECK(local.empty() && slot_of.empty(), "internal error: the pipeline step left ",
               local.size(), " messages and ", slot_of.size(), " micro-batches behind");
  return res;
}

template <typename T>
void StageRunner<T>::forward_only(const std::vector<MicroBatch>& micro, int B, int seq,
                                  const std::function<void()>& at_last) {
  const int p = pp_.size(), me = pp_.rank(), S = stages();
  const int64_t N = int64_t(B) * seq;
  model_.use_activation_slot(0);
  Wire in;
  ops::ActBuffer<T> local;
  std::vector<Wire> sending;
  // Messages between two ranks go in (micro-batch, stage) order on both sides.
  for (size_t j = 0; j < micro.size(); ++j) {
    for (int s = me; s < S; s += p) {
      const MicroBatch& mb = micro[j];
      ops::ActIn<T> x;
      if (s > 0) {
        const int64_t n = boundary_elems(s, N);
        if (rank_of(s - 1) == me) {
          in.buf = std::move(local);
        } else {
          in.buf = message(n);
          pp_.recv(wire_data(in, n), floats(n), rank_of(s - 1));
          arrived(in, n);
        }
        x = in.buf.data();
      }
      model_.stage_forward(s / p, mb.tokens, mb.targets, B, seq, mb.pass, x, mb.skip);
      if (s == S - 1) {
        at_last();
        continue;
      }
      const int64_t n = boundary_elems(s + 1, N);
      ops::ActBuffer<T> out = message(n);
      model_.stage_output(out.data());
      if (rank_of(s + 1) == me) {
        local = std::move(out);
        continue;
      }
      Wire w{std::move(out), {}, -1};
      departing(w, n);
      w.handle = pp_.send_async(wire_data(w, n), floats(n), rank_of(s + 1));
      sending.push_back(std::move(w));
    }
  }
  for (Wire& w : sending) pp_.wait(w.handle);
}

template <typename T>
float* StageRunner<T>::wire_data(Wire& w, int64_t n) {
  if (!staged()) return static_cast<float*>(w.buf.data().raw());
  // T elements enough for the message's bytes, in whole floats.
  const size_t bytes = size_t(floats(n)) * sizeof(float);
  w.host.resize((bytes + sizeof(T) - 1) / sizeof(T));
  return reinterpret_cast<float*>(w.host.data());
}

// The T elements of a message's device buffer (n elements of its storage type).
template <typename T>
static int64_t buffer_elems(const ops::ActBuffer<T>& b, int64_t n) {
  return (n * int64_t(ops::dtype_size(b.dtype())) + int64_t(sizeof(T)) - 1) / int64_t(sizeof(T));
}

template <typename T>
void StageRunner<T>::departing(Wire& w, int64_t n) {
  if (!staged()) return;
  wire_data(w, n);
  model_.backend().to_host(w.host.data(), static_cast<const T*>(w.buf.data().raw()),
                           buffer_elems(w.buf, n));
}

template <typename T>
void StageRunner<T>::arrived(Wire& w, int64_t n) {
  if (!staged()) return;
  model_.backend().from_host(static_cast<T*>(w.buf.data().raw()), w.host.data(),
                             buffer_elems(w.buf, n));
}

template <typename T>
LossResult StageRunner<T>::forward_loss(const std::vector<MicroBatch>& micro, int B, int seq) {
  LossResult res;
  forward_only(micro, B, seq, [&] {
    const LossResult r = model_.stage_loss();
    res.loss_sum += r.loss_sum;
    res.n_valid += r.n_valid;
  });
  return res;
}

template <typename T>
void StageRunner<T>::last_logits(const int32_t* tokens, int seq, float* logits) {
  const int64_t V = model_.config().vocab_size / model_.layout().tp();
  ops::DeviceBuffer<T> dev(&model_.backend(), size_t(V));
  std::vector<T> host(size_t(V), T(0));
  MicroBatch mb;
  mb.tokens = mb.targets = tokens;
  mb.pass = model_.next_pass();
  forward_only({mb}, 1, seq, [&] {
    model_.stage_last_logits(dev.data());
    model_.backend().to_host(host.data(), dev.data(), V);
  });
  for (int64_t i = 0; i < V; ++i) logits[i] = float(host[size_t(i)]);
  pp_.broadcast(logits, V, rank_of(stages() - 1));
}

template class StageRunner<float>;
template class StageRunner<double>;

}  // namespace strata
