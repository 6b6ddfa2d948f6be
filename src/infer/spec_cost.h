// A cost model of self-speculative decoding (LayerSkip): what one round costs
// and what it yields, from measured step times or from the bytes a
// bandwidth-bound decode reads. `strata bench generate` checks it against the
// measured speed-up and projects it onto larger shapes.
//
// A round drafts d tokens with layers [0, E) and the exit head (d + 1 passes
// of the lower layers: the last draft only needs its exit state), then
// verifies them with layers [E, L) and the head over d + 1 positions at once,
// and commits the accepted drafts plus the full model's next token.
#pragma once

namespace strata {

struct SpecCost {
  double t_full = 0;    // plain decode, seconds per token (all L layers + head)
  double t_exit = 0;    // early-exit decode, seconds per token (E layers + head)
  double t_verify = 0;  // one verification: layers [E, L) and the head over d + 1 rows
  double drafts = 0;    // d: drafts per round (the mean, where rounds were cut short)
  double tokens = 0;    // tokens committed per round (accepted drafts + 1)

  // (d + 1) early-exit steps (one head too many: the last draft skips it,
  // so this errs on the slow side) plus one verification.
  double round_seconds() const { return (drafts + 1) * t_exit + t_verify; }
  // Plain decoding's time for the round's tokens over the round's time.
  double speedup() const { return tokens * t_full / round_seconds(); }
};

// Tokens per round when each draft is accepted independently with
// probability alpha, until the first rejection: (1 - alpha^(d+1)) / (1 - alpha).
double tokens_per_round(double alpha, int drafts);

// The times of a decode bound by reading weights once per pass, at `bw`
// bytes/s: layer_bytes for all L layers (evenly spread), head_bytes for the
// final norm and head. Verification reads layers [E, L) and the head once for
// all d + 1 rows.
SpecCost bandwidth_bound_spec_cost(double layer_bytes, double head_bytes, int L, int E,
                                   double drafts, double tokens, double bw);

}  // namespace strata
