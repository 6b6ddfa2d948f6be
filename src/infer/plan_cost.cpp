#include "infer/plan_cost.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "core/text.h"
#include "infer/spec_cost.h"

namespace strata {

double LinkModel::allreduce(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  const double wire = bandwidth > 0 ? 2.0 * (ranks - 1) / ranks * bytes / bandwidth : 0.0;
  return latency + wire;
}

double LinkModel::allgather(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  const double wire = bandwidth > 0 ? double(ranks - 1) / ranks * bytes / bandwidth : 0.0;
  return latency + wire;
}

std::string LinkModel::to_string() const {
  const std::string bw = bandwidth > 0 ? cat(fixed(bandwidth * 8 / 1e9, 3), " Gbit/s")
                                       : std::string("unlimited bandwidth");
  return cat(bw, ", ", fixed(latency * 1e6, 1), " us");
}

namespace {

// A number and the rest of the text ("10Gbit" -> 10, "Gbit").
bool split_number(const std::string& t, double* v, std::string* unit) {
  char* end = nullptr;
  *v = std::strtod(t.c_str(), &end);
  if (end == t.c_str()) return false;
  *unit = end;
  return true;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Bytes per second, or -1. Bits are "bit" (any case) or "bps"; bytes are an
// upper-case "B" (a lone lower-case "b" is refused: bits or bytes?).
double parse_bandwidth(const std::string& t) {
  double v = 0;
  std::string u;
  if (!split_number(t, &v, &u) || !(v > 0)) return -1;
  if (u.size() > 2 && u.compare(u.size() - 2, 2, "/s") == 0) u.resize(u.size() - 2);
  double scale = 1;
  if (!u.empty() && std::string("kKmMgGtT").find(u[0]) != std::string::npos && u.size() > 1) {
    const char p = char(std::tolower(static_cast<unsigned char>(u[0])));
    scale = p == 'k' ? 1e3 : p == 'm' ? 1e6 : p == 'g' ? 1e9 : 1e12;
    u = u.substr(1);
  }
  if (lower(u) == "bit" || lower(u) == "bps") return v * scale / 8;
  if (u == "B") return v * scale;
  return -1;
}

// Seconds, or -1.
double parse_latency(const std::string& t) {
  double v = 0;
  std::string u;
  if (!split_number(t, &v, &u) || v < 0) return -1;
  u = lower(u);
  if (u.empty()) return v == 0 ? 0 : -1;  // a bare number is ambiguous unless 0
  if (u == "s") return v;
  if (u == "ms") return v * 1e-3;
  if (u == "us") return v * 1e-6;
  if (u == "ns") return v * 1e-9;
  return -1;
}

}  // namespace

LinkModel parse_link(const std::string& text, const std::string& what) {
  const size_t comma = text.find(',');
  const std::string form = cat(what, ": '", text,
                               "' is not BANDWIDTH,LATENCY (e.g. 10Gbit,20us or 25GB/s,5us; bit/s "
                               "as bit, bytes/s as B, prefixes k m g t; latency in s, ms, us, ns)");
  STRATA_CHECK(comma != std::string::npos && text.find(',', comma + 1) == std::string::npos, form);
  LinkModel m;
  m.bandwidth = parse_bandwidth(text.substr(0, comma));
  m.latency = parse_latency(text.substr(comma + 1));
  STRATA_CHECK(m.bandwidth > 0 && m.latency >= 0, form);
  return m;
}

double CostInputs::sum_seconds(const PhaseCompute& p) const {
  return link.allreduce(p.rows * hidden * act_bytes, tp);
}

UnitStep unit_step(const CostInputs& in, const KindCost& kind, int layers, bool pending) {
  UnitStep s;
  const bool sums = in.tp > 1;
  for (const PhaseCompute& p : in.phases) {
    const double sum = in.sum_seconds(p);
    const double att = layers * p.attention, mlp = layers * p.mlp;
    double exposed = 0, nsums = 0;
    if (!kind.computes) {
      // The layer passes its input on: a sum still in flight is waited for.
      if (pending) exposed += sum;
    } else if (kind.reads_two_back) {
      // Asynchronous sums: the one below runs while the attention computes,
      // the attention's while the MLP computes, the MLP's is left in flight.
      if (pending) exposed += std::max(0.0, sum - in.overlap * att);
      if (kind.attention_sum && sums) exposed += std::max(0.0, sum - in.overlap * mlp);
      nsums += (kind.attention_sum && sums) + (kind.mlp_sum && sums);
    } else {
      // Blocking sums, and the first module waits for one still in flight.
      if (pending) exposed += sum;
      nsums += (kind.attention_sum && sums) + (kind.mlp_sum && sums);
      exposed += nsums * sum;
    }
    s.compute += p.passes * (kind.computes ? att + mlp : 0.0);
    s.exposed += p.passes * exposed;
    s.sums += p.passes * nsums;
  }
  s.pending = kind.computes && kind.reads_two_back && kind.mlp_sum && sums;
  s.seconds = s.compute + s.exposed;
  return s;
}

UnitStep plan_tail(const CostInputs& in, bool pending) {
  UnitStep s;
  for (const PhaseCompute& p : in.phases) {
    s.compute += p.passes * p.fixed;
    if (pending) s.exposed += p.passes * in.sum_seconds(p);
  }
  s.seconds = s.compute + s.exposed;
  return s;
}

PlanCost plan_cost(const LayerPlan& plan, const CostInputs& in) {
  PlanCost c;
  bool pending = false;
  auto add = [&](const UnitStep& s) {
    c.seconds += s.seconds;
    c.exposed += s.exposed;
    c.sums += s.sums;
    pending = s.pending;
  };
  for (const PlanUnit& u : plan.units()) {
    const UnitStep s = unit_step(in, kind_info(u.kind).cost, u.size, pending);
    c.compute += s.compute;
    add(s);
  }
  const UnitStep tail = plan_tail(in, pending);
  c.fixed = tail.compute;
  add(tail);
  return c;
}

CostInputs one_pass(const CostInputs& in, double rows) {
  STRATA_CHECK(in.phases.size() == 2, "one_pass: needs the prefill and decode phases");
  const PhaseCompute &pre = in.phases[0], &dec = in.phases[1];
  const double span = pre.rows - dec.rows;
  const double f = span > 0 ? std::max(0.0, (rows - dec.rows) / span) : 0.0;
  auto mix = [&](double a, double b) { return a + f * std::max(0.0, b - a); };
  CostInputs out = in;
  out.phases = {{"pass", mix(dec.attention, pre.attention), mix(dec.mlp, pre.mlp),
                 mix(dec.fixed, pre.fixed), rows, 1}};
  return out;
}

double range_seconds(const LayerPlan& plan, const CostInputs& pass, int from, int to, bool head) {
  double s = 0;
  bool pending = false;
  for (const PlanUnit& u : plan.units()) {
    if (u.first < from || u.end() > to) continue;
    const UnitStep step = unit_step(pass, kind_info(u.kind).cost, u.size, pending);
    s += step.seconds;
    pending = step.pending;
  }
  const UnitStep tail = plan_tail(pass, pending);
  return s + (head ? tail.seconds : tail.exposed);
}

SpecChoice spec_workload(const LayerPlan& plan, const CostInputs& in, int exit, int drafts,
                         double alpha, int batch, int new_tokens) {
  const int L = plan.num_layers();
  SpecCost c;
  c.t_exit = range_seconds(plan, one_pass(in, 1), 0, exit, true);
  c.t_verify = range_seconds(plan, one_pass(in, drafts + 1), exit, L, true);
  c.drafts = drafts;
  c.tokens = tokens_per_round(alpha, drafts);
  CostInputs prefill = in;
  prefill.phases.resize(1);
  SpecChoice out{exit, drafts, alpha, c.tokens, 0};
  out.seconds = plan_cost(plan, prefill).seconds +
                double(batch) * (new_tokens - 1) / c.tokens * c.round_seconds();
  return out;
}

}  // namespace strata
