// The layout planner of `strata train --dry-run --plan-memory`: every way to
// lay a training job out on `world` devices of `device_bytes` each that keeps
// its global batch, with each layout's memory per rank (model/memory.h) and a
// relative step time from the cost model below.
//
//   LayoutSearch s;  s.world = 64;  s.seq = 4096;  s.global_batch = 256;  s.device_bytes = 80e9;
//   const std::vector<LayoutOption> options = plan_layouts(cfg, plan, s);  // the best first
//
// The search: every tensor-parallel degree the model allows (tp divides world,
// the heads, KV heads, MLP width and vocabulary), every pipeline degree pp
// dividing world / tp with at least one plan unit per stage, data parallelism
// over the rest (dp = world / (tp pp) must divide the batch), ZeRO 0-3 (with
// data parallelism; each stage shards its own tensors), each
// recompute mode, every micro-batch up to `max_micro_batch` dividing a rank's
// share of the batch (gradient accumulation makes up the rest, and is the
// pipeline's micro-batch count), and under pp the GPipe, 1F1B and
// interleaved (`interleave` stages per rank) schedules. The stages are the
// trainer's own split (model/stages.h, balanced by the cost model).
//
// Memory: the estimate of each rank; under pp each pipeline rank's (its
// layers, the embedding on the first, the head on the last and with early
// exits on every stage, one activation slot per micro-batch it keeps in
// flight) and the layout's figure is the largest.
//
// Cost, relative step time (1: no recompute, tp 1, pp 1, no ZeRO, 4,096 tokens
// or more per micro-batch),
// measured here or stated:
//   recompute: none 1.00, selective 1.01, full 1.25 (bench train --recompute:
//     selective -0.7..+1.6%, full +15..+26%; a forward is a third of a step);
//   tensor parallelism: x (1 + 0.05 log2 min(tp, node_devices)): two
//     all-reduces of the activations per layer, mostly overlapped inside a
//     node (docs/distributed.md, "Cost of communication"); a tp group that
//     spans nodes (tp > node_devices, or not dividing it) also
//     x (1 + 0.5 max(1, log2(tp / node_devices))): the
//     inter-node link is an order of magnitude slower than the node's
//     (400 Gbit/s InfiniBand per GPU against 900 GB/s NVLink) and no longer hides;
//   ZeRO-1: x 1.02 (the updated weights' broadcast after each step);
//   ZeRO-2: x 1.03 (reduce-scatters per micro-batch, then that all-gather);
//   ZeRO-3: x 1.10 (the weights gathered twice more per micro-batch, mostly
//     overlapped with the units before them: docs/distributed.md, "Scaling");
//   micro-batch of m sequences: x (1 + 0.1 max(0, log2(4096 / (m seq)))): below
//     4,096 tokens (rows of every GEMM) a pass runs below peak, more so the
//     fewer (a fixed cost per kernel, tiles left idle);
//   pipeline: x (v M + pp - 1) c_max pp / (M C) for M micro-batches, v stages
//     per rank, the most expensive stage c_max of the split and C the whole
//     model's (model/stages.h's FLOPs): the bubble, (pp - 1) / (v M + pp - 1),
//     times the stages' imbalance; the sends between stages are assumed hidden
//     (posted before the compute they overlap, docs/distributed.md).
// Sorted: the layouts that fit first, by cost, then the larger micro-batch
// (fewer passes per step), then the smaller footprint.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/memory.h"
#include "model/plan.h"
#include "parallel/pipeline.h"

namespace strata {

struct LayoutSearch {
  int world = 1;             // devices
  int seq = 1;               // tokens per sequence
  int64_t global_batch = 1;  // sequences per optimizer step, kept by every layout
  int max_micro_batch = 1;
  int64_t device_bytes = 0;
  double trained_share = 1;           // the fraction of the weights that train (training.freeze)
  bool bf16_activations = false;      // MemoryUse
  bool bf16_weight_copies = false;    // MemoryUse
  bool exits_on_every_stage = false;  // LayerSkip's early-exit losses: the head on every stage
  int node_devices = 0;               // devices per node (0: all on one node)
  int max_pp = 0;                     // the largest pipeline degree searched (0: no limit)
  std::vector<int> interleave = {2};  // stages per rank tried with the interleaved schedule
};

struct LayoutOption {
  int tp = 1, pp = 1, dp = 1, zero = 0;
  pipeline::Schedule schedule = pipeline::Schedule::OneFOneB;
  int virtual_stages = 1;
  Recompute recompute = Recompute::None;
  int micro_batch = 1, grad_accum = 1;
  MemoryEstimate memory;  // the rank that needs the most (under pp: pipeline rank `binding`)
  std::vector<int64_t> stage_bytes;  // under pp: each pipeline rank's total
  std::vector<int> stage_first;      // under pp: each stage's first layer, then L
  int binding = 0;
  double bubble = 0;  // the schedule's closed form (equal stages)
  bool fits = false;
  double cost = 1;
};

std::vector<LayoutOption> plan_layouts(const LlamaConfig& cfg, const LayerPlan& plan,
                                       const LayoutSearch& search);

}  // namespace strata
