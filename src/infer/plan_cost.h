// The speed side of `strata plan search`: what a layer plan costs one rank of
// a tensor-parallel group for a workload (a prefill pass, then decode steps),
// from the compute measured per module and a link of given latency and
// bandwidth. The plan kinds' rows say what a unit does (KindCost, model/plan.h):
//
//   a unit of n layers: n attentions, [a sum], n MLPs, [a sum]
//   a sum (all-reduce of rows x hidden activations over the tp ranks):
//       latency + 2 (tp - 1) / tp x bytes / bandwidth (a ring)
//   exposure: a sum is waited for at once (blocking), except in a unit whose
//       modules read the stream two modules back (ladder), whose sums are
//       asynchronous: the attention's runs while the MLP computes, the MLP's
//       while the next unit's attention computes if that unit is a ladder
//       one too (anything else waits for it), and only max(0, sum - overlap
//       x compute) shows
//   a skipped layer, an exit or the head waits for a sum still in flight
//
// Everything else (embedding, final norm, head and its gather of the
// vocabulary-parallel logits, sampling) is the phase's `fixed` time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/plan.h"

namespace strata {

struct LinkModel {
  double latency = 0;    // seconds per collective
  double bandwidth = 0;  // bytes per second (0: infinite)
  // An all-reduce of `bytes` over `ranks` (a ring: each byte crosses the
  // link 2 (ranks - 1) / ranks times); 0 for one rank.
  double allreduce(double bytes, int ranks) const;
  // An all-gather whose result holds `bytes` in all.
  double allgather(double bytes, int ranks) const;
  std::string to_string() const;  // "10 Gbit/s, 20 us"
};

// "BW,LATENCY": a bandwidth (bit/s: 10Gbit, 400mbit; bytes/s: 25GB, 1.5GB/s;
// k, m, g prefixes are powers of 1000) and a latency (20us, 0.1ms, 500ns, 0).
// Throws one line naming `what` and the expected form.
LinkModel parse_link(const std::string& text, const std::string& what);

// One forward pass of one phase on one rank, measured.
struct PhaseCompute {
  std::string name;      // "prefill", "decode"
  double attention = 0;  // seconds per layer's attention module at the tp degree
  double mlp = 0;        // seconds per layer's MLP module
  double fixed = 0;      // seconds outside the layers (head, gather, sampling)
  double rows = 0;       // tokens in the pass: the rows of each sum
  double passes = 1;     // passes of this phase in the workload
};

struct CostInputs {
  int tp = 1;
  int hidden = 0;
  double act_bytes = 4;  // bytes per summed element
  LinkModel link;
  // The share of a module's compute that can hide a sum running beside it
  // (1: all of it; a CPU that advances a collective only between kernels
  // hides less).
  double overlap = 1;
  std::vector<PhaseCompute> phases;
  double sum_seconds(const PhaseCompute& p) const;  // one sum of p.rows rows
};

// What a unit adds to the time (all phases, weighted by their passes), given
// whether a sum of the unit before it is still on the link (`pending`), and
// whether it leaves one (its last module's sum).
struct UnitStep {
  double seconds = 0, compute = 0, exposed = 0, sums = 0;
  bool pending = false;
};
UnitStep unit_step(const CostInputs& in, const KindCost& kind, int layers, bool pending);
// The fixed time plus a pending last sum.
UnitStep plan_tail(const CostInputs& in, bool pending);

struct PlanCost {
  double seconds = 0;  // the workload on one rank
  double compute = 0;  // of which module compute
  double exposed = 0;  // of which sums not hidden behind compute
  double fixed = 0;    // of which outside the layers
  double sums = 0;     // sums per workload
};
PlanCost plan_cost(const LayerPlan& plan, const CostInputs& in);

// One pass of `rows` rows (phases[0]: prefill, phases[1]: decode): module
// and fixed times linear in the rows between the decode point (its rows) and
// the prefill point (its rows), never below the decode point's.
CostInputs one_pass(const CostInputs& in, double rows);

// Seconds of the units in layers [from, to) of one pass (in: one_pass's),
// with a sum in flight waited for at `to`, and the fixed time when `head`.
double range_seconds(const LayerPlan& plan, const CostInputs& pass, int from, int to, bool head);

// Self-speculative decoding (LayerSkip) of the workload's decode phase under
// a plan: drafts from layers [0, exit) and the head, one token each; a
// verification of the drafts by layers [exit, L) over drafts + 1 rows; each
// draft accepted with probability alpha until the first rejection. The
// prompts are decoded one after another (generate_batch does so with drafts).
struct SpecChoice {
  int exit = 0, drafts = 0;  // 0: plain decoding is faster
  double alpha = 0;
  double tokens = 0;   // per round
  double seconds = 0;  // the workload (prefill + decode)
};
SpecChoice spec_workload(const LayerPlan& plan, const CostInputs& in, int exit, int drafts,
                         double alpha, int batch, int new_tokens);

}  // namespace strata
