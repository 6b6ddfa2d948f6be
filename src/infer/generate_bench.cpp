// `strata bench generate` as a library (generate_bench.h).
#include "infer/generate_bench.h"

#include <algorithm>

#include "core/text.h"
#include "core/timer.h"
#include "infer/spec_cost.h"

namespace strata {
namespace {

GenerateBenchMode mode(std::string name, const GenerateOptions& o) {
  GenerateBenchMode m;
  m.name = std::move(name);
  m.options = o;
  return m;
}

double tokens_per_second(const GenerateBenchMode& m) {
  return double(m.total.new_tokens) / m.total.decode_s;
}

}  // namespace

std::vector<GenerateBenchMode> generate_bench_modes(const GenerateBenchOptions& options) {
  std::vector<GenerateBenchMode> modes;
  GenerateOptions base;
  base.max_new_tokens = options.max_new_tokens;
  base.eos_id = -1;  // fixed lengths: every mode generates the same number of tokens
  base.graphs = options.graphs;
  base.kv_cache = options.kv_cache;
  modes.push_back(mode("plain", base));
  const int E = options.exit_layer;
  if (E > 0) {
    GenerateOptions e = base;
    e.exit_layer = E;
    modes.push_back(mode("early exit E=" + std::to_string(E), e));
    if (options.self_speculative) {
      GenerateOptions s = e;
      s.speculations = options.speculations;
      modes.push_back(mode(
          "self-speculative E=" + std::to_string(E) + " d=" + std::to_string(s.speculations), s));
    }
  }
  if (options.graphs && options.eager_too) {  // last: the speed-ups stay against "plain"
    GenerateOptions eager = base;
    eager.graphs = false;
    modes.push_back(mode("plain, eager (no graphs)", eager));
  }
  return modes;
}

void run_generate_bench(Model<float>& model, const std::vector<std::vector<int32_t>>& prompts,
                        std::vector<GenerateBenchMode>& modes, int repeat) {
  for (auto& m : modes) {
    for (const auto& ids : prompts) {
      std::vector<int32_t> out;
      for (int r = 0; r < repeat; ++r) {
        GenerateStats st;
        out = generate(model, ids, m.options, {}, &st);
        m.prefill.push_back(st.prefill_s > 0 ? st.prompt_tokens / st.prefill_s : 0);
        m.decode.push_back(st.decode_s > 0 ? st.new_tokens / st.decode_s : 0);
        m.total += st;
      }
      m.outputs.push_back(out);
    }
  }
}

std::string generate_bench_table(const std::vector<GenerateBenchMode>& modes) {
  const GenerateBenchMode& plain = modes.front();
  const double plain_tps = tokens_per_second(plain);
  std::string out = strprintf("%-28s %12s %12s %10s %12s %9s\n", "mode", "prefill t/s",
                              "decode t/s", "speed-up", "acceptance", "tok/pass");
  for (const GenerateBenchMode& m : modes) {
    const GenerateStats& t = m.total;
    out += strprintf("%-28s %12.0f %12.1f %9.2fx", m.name.c_str(), median(m.prefill),
                     median(m.decode), tokens_per_second(m) / plain_tps);
    if (m.options.speculations)
      out += strprintf(" %11.1f%% %9.2f",
                       100.0 * double(t.accepted) / double(std::max<int64_t>(1, t.drafted)),
                       double(t.new_tokens) / double(std::max<int64_t>(1, t.rounds)));
    out += "\n";
    if (m.options.speculations)
      out += strprintf("%-28s greedy output identical to plain decoding: %s\n", "",
                       m.outputs == plain.outputs ? "yes" : "NO");
    if (!m.options.graphs && plain.options.graphs)
      out += strprintf(
          "%-28s output identical to plain decoding with graphs: %s (%lld of its %lld "
          "decode steps replayed from graphs)\n",
          "", m.outputs == plain.outputs ? "yes" : "NO",
          static_cast<long long>(plain.total.graph_steps),
          static_cast<long long>(plain.total.new_tokens - int64_t(plain.decode.size())));
  }
  return out;
}

double decode_weight_bytes(const LlamaConfig& c, bool bf16) {
  return double(c.num_parameters() -
                (c.tie_word_embeddings ? 0 : int64_t(c.vocab_size) * c.hidden_size)) *
         (bf16 ? 2.0 : 4.0);
}

std::string spec_cost_report(const GenerateBenchMode& plain, const GenerateBenchMode& early,
                             const GenerateBenchMode& spec, const LlamaConfig& c, double bytes,
                             double bytes_per_weight, double bandwidth, double assume_tokens) {
  const int L = c.num_hidden_layers, E = spec.options.exit_layer;
  const GenerateStats &p = plain.total, &x = early.total, &s = spec.total;
  const double rounds = double(std::max<int64_t>(1, s.rounds));
  SpecCost m;
  m.t_full = p.decode_s / double(p.new_tokens);
  m.t_exit = x.decode_s / double(x.new_tokens);
  m.t_verify = s.verify_s / rounds;
  m.drafts = double(s.drafted) / rounds;
  m.tokens = double(s.new_tokens) / rounds;
  const double measured_round = s.decode_s / rounds;
  const double measured = (double(s.new_tokens) / s.decode_s) * m.t_full;
  std::string out = strprintf(
      "\ncost model (%s): plain step %.3f ms, early-exit step %.3f ms, verification of "
      "d+1 = %.2f positions %.3f ms, %.2f tokens per round\n",
      spec.name.c_str(), m.t_full * 1e3, m.t_exit * 1e3, m.drafts + 1, m.t_verify * 1e3, m.tokens);
  out += strprintf(
      "  round: predicted %.3f ms = (d+1) x early-exit step + verification; measured %.3f "
      "ms (drafting %.3f, verifying %.3f, the rest %.3f)\n",
      m.round_seconds() * 1e3, measured_round * 1e3, s.draft_s / rounds * 1e3,
      s.verify_s / rounds * 1e3, (s.decode_s - s.draft_s - s.verify_s) / rounds * 1e3);
  out += strprintf("  speed-up over plain decoding: predicted %.2fx, measured %.2fx\n", m.speedup(),
                   measured);
  const double head = (double(c.vocab_size) * c.hidden_size + c.hidden_size) * bytes_per_weight;
  const double tokens = assume_tokens > 0 ? assume_tokens : m.tokens;
  const SpecCost b =
      bandwidth_bound_spec_cost(bytes - head, head, L, E, m.drafts, tokens, bandwidth);
  out += strprintf(
      "  if decode were bound by reading the weights (%.1f MB of layers, %.1f MB of head "
      "at %.1f GB/s) with %.2f tokens per round%s: round %.3f ms for %.2f plain steps of "
      "%.3f ms, speed-up %.2fx\n",
      (bytes - head) / 1e6, head / 1e6, bandwidth / 1e9, tokens,
      assume_tokens > 0 ? " (--tokens-per-round)" : "", b.round_seconds() * 1e3, tokens,
      b.t_full * 1e3, b.speedup());
  return out;
}

}  // namespace strata
