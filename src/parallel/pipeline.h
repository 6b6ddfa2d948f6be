// Pipeline parallelism, the schedule side (issue 41's first part): how a
// model's units are split into stages, the order in which each pipeline rank
// runs forward and backward passes of micro-batches, and what that order
// costs (its bubble). Pure logic: the trainer's executor will run these
// orders; the tests check them against the closed forms.
//
// Stages. The units (model/plan.h: a layer, an LP pair, a PAR group, ...)
// are cut into `stages` contiguous ranges, never inside a unit; the
// embedding's cost counts on the first stage, the final norm and head's on
// the last. partition_stages() minimises the most expensive stage (then,
// among equal splits, the earliest cut), exactly (dynamic programming).
//
// Schedules, for p ranks, m micro-batches and (interleaved) v virtual stages
// per rank, stage s of S = p * v living on rank s % p:
//   GPipe       every forward, then every backward (last micro-batch first);
//   1F1B        PipeDream-flush: rank r runs min(p - r - 1, m) warm-up
//               forwards, then alternates one forward and one backward, then
//               drains the backwards; at most p - r micro-batches in flight;
//   Interleaved Megatron-LM's interleaved 1F1B: each rank holds v stages
//               (r, r + p, ...), micro-batches go round in groups of p; warm-up
//               (p - r - 1) * 2 + (v - 1) * p passes; needs m % p == 0.
// simulate() runs a schedule with given pass times and a send latency and
// returns its makespan and bubble (the idle fraction). With equal stages and
// no latency the bubble is (p - 1) / (m + p - 1) for GPipe and 1F1B and
// (p - 1) / (v * m + p - 1) interleaved.
#pragma once

#include <string>
#include <vector>

namespace strata::pipeline {

// stage k holds units [first[k], first[k + 1]) (first has stages + 1 entries,
// first[0] = 0, first[stages] = units); cost[k] is its total.
struct StageSplit {
  std::vector<int> first;
  std::vector<double> cost;
};

// Throws strata::Error (one line) when there are fewer units than stages or a
// cost is negative.
StageSplit partition_stages(const std::vector<double>& unit_cost, double embedding_cost,
                            double head_cost, int stages);

enum class Schedule { GPipe, OneFOneB, Interleaved };
// "gpipe", "1f1b", "interleaved"; throws naming the choices for anything else.
Schedule parse_schedule(const std::string& name);
const char* schedule_name(Schedule s);

struct Pass {
  bool forward = true;
  int micro_batch = 0;
  int stage = 0;  // the global (virtual) stage, 0 .. p * v - 1
};

// Each rank's passes in the order it runs them. Throws (one line) for p < 1,
// m < 1, v < 1, v > 1 without Interleaved, or Interleaved with m % p != 0.
std::vector<std::vector<Pass>> make_schedule(Schedule s, int p, int m, int v = 1);

struct Timing {
  double makespan = 0;
  double bubble = 0;               // idle time / (ranks * makespan)
  std::vector<int> max_in_flight;  // per rank: most micro-batches forwarded, not yet backwarded
  std::vector<int> sends;          // per rank: activations and gradients sent to another rank
};

// Runs the schedule as the ranks would: a pass starts when its rank is free
// and its input has arrived (the previous stage's forward, the next stage's
// backward; `latency` added when they are on different ranks). forward[s] and
// backward[s] are stage s's pass times. Throws when the schedule deadlocks
// or misses or repeats a pass.
Timing simulate(const std::vector<std::vector<Pass>>& schedule, const std::vector<double>& forward,
                const std::vector<double>& backward, double latency = 0);

// The closed forms above.
double bubble_formula(Schedule s, int p, int m, int v = 1);

}  // namespace strata::pipeline
