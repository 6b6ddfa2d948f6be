// One pipeline rank's part of an optimizer step (issue 41): the micro-batches
// run through this rank's stages in the order a schedule gives
// (parallel/pipeline.h), with the streams at the stage boundaries and their
// gradients sent to the neighbouring ranks by point-to-point messages.
//
//   StageRunner<float> run(model, *grid.pp_comm, split, Schedule::OneFOneB, v);
//   auto r = run.step(micro_batches, B, seq, dloss);   // gradients accumulated
//
// Stages. The split names S = p * v stages by their first layers; stage s
// lives on rank s % p, so this rank's model holds stages r, r + p, ...
// (StageHolding; its chunks, bottom up, are those stages).
//
// Messages. Every rank derives the whole schedule, so it knows the order in
// which each neighbour sends to it and posts its receives in that order:
// point-to-point matching is first-in first-out per pair of ranks (MPI
// without tags, NCCL by design), so the k-th receive from a rank is its k-th
// send. A receive is posted before the pass ahead of the one that needs it,
// so it overlaps that pass's compute; sends complete in the background and
// are waited for at the end of the step. A stage boundary on one rank (p = 1)
// is a copy.
//
// Activations. Each micro-batch in flight on a stage keeps its activations
// in a slot of the model (Model::use_activation_slot), freed by its backward:
// a 1F1B rank holds at most p - r, GPipe m.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "model/model.h"
#include "model/zero.h"
#include "parallel/comm.h"
#include "parallel/pipeline.h"

namespace strata {

// What this rank's pipeline stages hold of a model cut at `first` (S + 1
// layer boundaries, first[0] = 0, first[S] = L) over p ranks: stages rank,
// rank + p, ... The head goes with the last stage and with `exit_stages`
// (those whose layers may carry an early-exit loss).
StageHolding stage_holding(const std::vector<int>& first, int p, int rank,
                           const std::vector<bool>& exit_stages = {});

// The layers' stage boundaries of a unit split (plan_stages' first[] counts
// units): first layer of each stage, then L.
std::vector<int> stage_layers(const LayerPlan& plan, const std::vector<int>& unit_first);

// Sums, over the pipeline group, the gradients of the tensors that more than
// one stage holds (the final norm and head on the stages with early exits, a
// tied embedding on the first and last stage), so each holder ends with the
// whole gradient and takes the same optimizer step. Collective over pp (every
// rank calls it); float models (the communicator's element type).
void sum_shared_gradients(Model<float>& model, Communicator& pp);
// The same under ZeRO-2/3, on each holder's slice of them in its weight
// store's gradient shard (after the step's reduce-scatters): the holders'
// stores have the same buckets for these tensors (they hold the same
// tensors in them), so a data-parallel rank's slice is the same on each.
void sum_shared_gradient_shards(ZeroShards& store, const ParamLayout& layout, Communicator& pp);

// The most micro-batches rank `rank` keeps activations of at once (one
// activation slot each, per stage) under schedule s with p ranks, m
// micro-batches and v stages per rank.
int pipeline_slots(pipeline::Schedule s, int p, int m, int v, int rank);
// The same for every rank.
std::vector<int> pipeline_slots(pipeline::Schedule s, int p, int m, int v);

struct MicroBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  const LayerSkipStep* skip = nullptr;
  uint64_t pass = 0;  // the whole model's forward-pass number for it
};

template <typename T>
class StageRunner {
 public:
  // `first`: the stages' first layers (S + 1 entries); S = pp.size() * v.
  StageRunner(Model<T>& model, Communicator& pp, std::vector<int> first,
              pipeline::Schedule schedule, int virtual_stages = 1);
  ~StageRunner();

  struct Result {
    // Over this rank's stages and micro-batches: the head's summed loss and
    // token count (the last stage), each exit's summed loss (NaN where this
    // rank had none), and the weighted objective.
    LossResult loss;
    int64_t sends = 0, receives = 0;  // point-to-point messages this step
    int max_slots = 0;                // micro-batches held at once
    // Seconds: the step's wall time in the runner, and the part of it this
    // rank waited for other stages' messages (its share of the bubble).
    double wall = 0, idle = 0;
  };
  // Runs the step's micro-batches (each B x seq tokens; every rank passes the
  // same list) forward and backward; gradients accumulate in the model with
  // loss scale dloss.
  Result step(const std::vector<MicroBatch>& micro, int B, int seq, double dloss);
  // Forward only (validation): each micro-batch through the stages in order;
  // the head's summed loss and token count on the rank of the last stage
  // (zero elsewhere). Slot 0 throughout.
  LossResult forward_loss(const std::vector<MicroBatch>& micro, int B, int seq);
  // The logits at the last position of one sequence of `seq` tokens (without
  // layer dropout), through the stages; every rank of the pipeline gets them
  // (host memory, vocab_size / tp values): sampling runs the same on each.
  void last_logits(const int32_t* tokens, int seq, float* logits);
  // Called before each backward pass with its chunk and whether it is that
  // chunk's last backward of the step (its gradients are final after it:
  // data parallelism starts their all-reduce there).
  void set_before_backward(std::function<void(int chunk, bool last)> hook) {
    before_backward_ = std::move(hook);
  }

  int stages() const { return int(first_.size()) - 1; }
  // Forward only: each micro-batch through the stages in order; on the rank
  // of the last stage `at_last()` after each one's forward there.
  void forward_only(const std::vector<MicroBatch>& micro, int B, int seq,
                    const std::function<void()>& at_last);
  const std::vector<std::vector<pipeline::Pass>>& schedule() const { return sched_; }

 private:
  // A boundary's streams (forward) or their gradient (backward) for stage
  // `to` of micro-batch `mb`.
  struct Message {
    bool forward;
    int mb, to;
    bool operator<(const Message& o) const {
      return std::tie(forward, mb, to) < std::tie(o.forward, o.mb, o.to);
    }
  };
  Model<T>& model_;
  Communicator& pp_;
  std::vector<int> first_;
  pipeline::Schedule kind_;
  int v_ = 1;
  std::vector<std::vector<pipeline::Pass>> sched_;
  int m_ = 0;  // micro-batches the schedule was made for
  // From the schedule: what each other rank sends this one, in its order,
  // and each such message's (sender, position).
  std::vector<std::vector<Message>> inbox_;
  std::map<Message, std::pair<int, int>> where_;
  std::function<void(int, bool)> before_backward_;
  void make_schedule(int m);
  // A message of n activation elements: its buffer, and its length in the
  // communicator's unit (floats).
  ops::ActBuffer<T> message(int64_t n) {
    return ops::ActBuffer<T>(&model_.backend(), size_t(n), model_.activation_storage());
  }
  int64_t floats(int64_t n) const {
    return (n * int64_t(ops::dtype_size(model_.activation_storage())) + 3) / 4;
  }
  // A message on its way: its buffer in the backend's memory and, for a
  // device backend, its copy in host memory, which the pipeline's
  // communicator (MPI) reads and writes; the handle of its send or receive.
  struct Wire {
    ops::ActBuffer<T> buf;
    std::vector<T> host;
    int64_t handle = -1;
  };
  bool staged() const { return !model_.backend().is_host(); }
  // Where the communicator reads or writes a message of n elements.
  float* wire_data(Wire& w, int64_t n);
  // Before its send: a device message copied to the host. After its receive:
  // the host copy into the device buffer.
  void departing(Wire& w, int64_t n);
  void arrived(Wire& w, int64_t n);
  int rank_of(int stage) const { return stage % pp_.size(); }
  int64_t boundary_elems(int stage, int64_t N) const;  // the boundary below stage's first layer
};

}  // namespace strata
