// Pipeline stages, schedules and their simulation (parallel/pipeline.h).
#include "parallel/pipeline.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace strata::pipeline {

StageSplit partition_stages(const std::vector<double>& unit_cost, double embedding_cost,
                            double head_cost, int stages) {
  const int n = int(unit_cost.size());
  STRATA_CHECK(stages >= 1, "pipeline: ", stages, " stages (at least 1)");
  STRATA_CHECK(n >= stages, "pipeline: ", stages, " stages for ", n,
               " units (each stage holds at least one unit; a unit is never split)");
  for (double c : unit_cost) STRATA_CHECK(c >= 0, "pipeline: a unit costs ", c, " (< 0)");
  STRATA_CHECK(embedding_cost >= 0 && head_cost >= 0, "pipeline: negative embedding or head cost");
  std::vector<double> prefix(size_t(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + unit_cost[size_t(i)];
  // range(k, a, b): stage k holding units [a, b).
  auto range = [&](int k, int a, int b) {
    return prefix[size_t(b)] - prefix[size_t(a)] + (k == 0 ? embedding_cost : 0) +
           (k == stages - 1 ? head_cost : 0);
  };
  // best[k][i]: the least possible maximum over stages 0..k holding units [0, i).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(stages), std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(stages), std::vector<int>(size_t(n) + 1, 0));
  for (int i = 1; i <= n; ++i) best[0][size_t(i)] = range(0, 0, i);
  for (int k = 1; k < stages; ++k)
    for (int i = k + 1; i <= n; ++i)
      for (int j = k; j < i; ++j) {  // stage k holds [j, i)
        const double worst = std::max(best[size_t(k - 1)][size_t(j)], range(k, j, i));
        if (worst < best[size_t(k)][size_t(i)]) {
          best[size_t(k)][size_t(i)] = worst;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  StageSplit s;
  s.first.assign(size_t(stages) + 1, 0);
  s.first[size_t(stages)] = n;
  for (int k = stages - 1, i = n; k >= 1; --k) i = s.first[size_t(k)] = cut[size_t(k)][size_t(i)];
  for (int k = 0; k < stages; ++k)
    s.cost.push_back(range(k, s.first[size_t(k)], s.first[size_t(k) + 1]));
  return s;
}

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "1f1b") return Schedule::OneFOneB;
  if (name == "interleaved") return Schedule::Interleaved;
  fail(cat("pipeline schedule '", name, "': gpipe, 1f1b or interleaved"));
}

const char* schedule_name(Schedule s) {
  return s == Schedule::GPipe ? "gpipe" : s == Schedule::OneFOneB ? "1f1b" : "interleaved";
}

namespace {

// Interleaved: a rank's k-th forward (or backward) pass, as Megatron-LM
// orders them: micro-batches in groups of p, each group through the rank's
// stages in turn (backwards: the last stage first).
Pass interleaved_pass(bool forward, int k, int rank, int p, int v) {
  const int group = k / (p * v), in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  return {forward, group * p + in_group % p, chunk * p + rank};
}

}  // namespace

std::vector<std::vector<Pass>> make_schedule(Schedule s, int p, int m, int v) {
  STRATA_CHECK(p >= 1 && m >= 1 && v >= 1, "pipeline: ranks ", p, ", micro-batches ", m,
               ", virtual stages ", v, " (each at least 1)");
  STRATA_CHECK(v == 1 || s == Schedule::Interleaved, "pipeline: ", v,
               " virtual stages per rank need the interleaved schedule");
  std::vector<std::vector<Pass>> out(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& ops = out[size_t(r)];
    if (s == Schedule::GPipe) {
      for (int b = 0; b < m; ++b) ops.push_back({true, b, r});
      for (int b = m - 1; b >= 0; --b) ops.push_back({false, b, r});
    } else if (s == Schedule::OneFOneB) {
      const int warmup = std::min(p - r - 1, m);
      for (int b = 0; b < warmup; ++b) ops.push_back({true, b, r});
      for (int i = 0; i < m - warmup; ++i) {
        ops.push_back({true, warmup + i, r});
        ops.push_back({false, i, r});
      }
      for (int b = m - warmup; b < m; ++b) ops.push_back({false, b, r});
    } else {
      STRATA_CHECK(m % p == 0, "pipeline: the interleaved schedule needs the micro-batches (", m,
                   ") to be a multiple of the pipeline ranks (", p, ")");
      const int total = m * v;
      const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      int f = 0, b = 0;
      for (; f < warmup; ++f) ops.push_back(interleaved_pass(true, f, r, p, v));
      while (f < total) {
        ops.push_back(interleaved_pass(true, f++, r, p, v));
        ops.push_back(interleaved_pass(false, b++, r, p, v));
      }
      while (b < total) ops.push_back(interleaved_pass(false, b++, r, p, v));
    }
  }
  return out;
}

Timing simulate(const std::vector<std::vector<Pass>>& schedule, const std::vector<double>& forward,
                const std::vector<double>& backward, double latency) {
  const int p = int(schedule.size());
  const int stages = int(forward.size());
  STRATA_CHECK(p >= 1 && stages >= p && stages % p == 0 && backward.size() == forward.size(),
               "pipeline: simulate needs pass times for every stage (a multiple of the ranks)");
  int m = 0;
  for (const auto& ops : schedule)
    for (const Pass& x : ops) m = std::max(m, x.micro_batch + 1);
  // done[fwd/bwd][stage][micro-batch]: finish time, or -1 while not run.
  std::vector<std::vector<std::vector<double>>> done(
      2, std::vector<std::vector<double>>(size_t(stages), std::vector<double>(size_t(m), -1)));
  Timing t;
  t.max_in_flight.assign(size_t(p), 0);
  t.sends.assign(size_t(p), 0);
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free_at(size_t(p), 0), busy(size_t(p), 0);
  std::vector<int> in_flight(size_t(p), 0);
  auto rank_of = [&](int stage) { return stage % p; };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[size_t(r)] < schedule[size_t(r)].size()) {
        const Pass& x = schedule[size_t(r)][next[size_t(r)]];
        STRATA_CHECK(x.stage >= 0 && x.stage < stages && rank_of(x.stage) == r, "pipeline: rank ",
                     r, " runs stage ", x.stage, ", which is not its own");
        double& slot = done[x.forward ? 0 : 1][size_t(x.stage)][size_t(x.micro_batch)];
        STRATA_CHECK(slot < 0, "pipeline: rank ", r, " runs ", x.forward ? "forward" : "backward",
                     " of micro-batch ", x.micro_batch, " on stage ", x.stage, " twice");
        // The input: the previous stage's forward, or the next stage's
        // backward (the last stage starts its backward from its own forward).
        const int from = x.forward ? x.stage - 1 : x.stage + 1;
        double ready = 0;
        if (x.forward && from >= 0) {
          ready = done[0][size_t(from)][size_t(x.micro_batch)];
        } else if (!x.forward) {
          ready = from < stages ? done[1][size_t(from)][size_t(x.micro_batch)]
                                : done[0][size_t(x.stage)][size_t(x.micro_batch)];
          if (done[0][size_t(x.stage)][size_t(x.micro_batch)] < 0) ready = -1;
        }
        if (ready < 0) break;  // waits for another rank
        const bool remote = (x.forward ? from >= 0 : from < stages) && rank_of(from) != r;
        const double start = std::max(free_at[size_t(r)], ready + (remote ? latency : 0));
        const double took = x.forward ? forward[size_t(x.stage)] : backward[size_t(x.stage)];
        slot = free_at[size_t(r)] = start + took;
        busy[size_t(r)] += took;
        const int to = x.forward ? x.stage + 1 : x.stage - 1;
        t.sends[size_t(r)] += to >= 0 && to < stages && rank_of(to) != r;
        if (x.stage == r) {  // a micro-batch enters the rank's first stage / leaves it
          in_flight[size_t(r)] += x.forward ? 1 : -1;
          t.max_in_flight[size_t(r)] = std::max(t.max_in_flight[size_t(r)], in_flight[size_t(r)]);
        }
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    STRATA_CHECK(next[size_t(r)] == schedule[size_t(r)].size(),
                 "pipeline: the schedule deadlocks "
                 "(rank ",
                 r, " waits at its pass ", next[size_t(r)], ")");
  for (int k = 0; k < 2; ++k)
    for (int s = 0; s < stages; ++s)
      for (int b = 0; b < m; ++b)
        STRATA_CHECK(done[size_t(k)][size_t(s)][size_t(b)] >= 0,
                     "pipeline: the schedule never runs ", k == 0 ? "forward" : "backward",
                     " of micro-batch ", b, " on stage ", s);
  for (double f : free_at) t.makespan = std::max(t.makespan, f);
  double idle = 0;
  for (int r = 0; r < p; ++r) idle += t.makespan - busy[size_t(r)];
  t.bubble = t.makespan > 0 ? idle / (double(p) * t.makespan) : 0;
  return t;
}

double bubble_formula(Schedule s, int p, int m, int v) {
  const double work = s == Schedule::Interleaved ? double(v) * m : double(m);
  return double(p - 1) / (work + double(p - 1));
}

}  // namespace strata::pipeline
