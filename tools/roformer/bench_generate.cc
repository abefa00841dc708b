// `roformer bench generate`: `roformer serve`'s generation without HTTP. The server's step-level
// batcher (server::Generation: --rows slots, --prefill-chunk) runs in this process; each load submits
// --rows greedy sequences at once (a prompt of --prompt deterministic ids, (i·7919 + 13) mod V, no
// special ones, and exactly --tokens new tokens: no eos) and reads them whole, as a client of
// /v1/completions does. Reports the median tokens/s of --rounds loads after one untimed load, and
// from the model thread's totals the decoding step (mean time, rows) and the prompt feeds (tokens/s),
// as text or JSON. Beside bench/peers/generate_peers.py's server rows it shows what HTTP adds.
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <vector>

#include "bench_util.h"
#include "commands.h"
#include "load/model_dir.h"
#include "server/generation.h"

namespace roformer {

int bench_generate(const BenchGenerateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (!load::is_causal_lm(o.model)) {
    throw std::invalid_argument(o.model + "/config.json: not a causal LM (is_decoder); `roformer bench generate` decodes one");
  }
  load::Request r;
  r.inference = o.linears;
  r.release_packed_arena = true;  // as the server loads it
  load::Model lm = load::roformer(o.model, r);
  const model::RoFormer<float>& m = *lm.model;
  const model::RoFormerConfig& c = m.config();
  if (c.attention_type != model::AttentionType::softmax || c.unilm_mask()) {
    throw std::invalid_argument(o.model + "/config.json: the server's generation is for causal LMs with softmax attention");
  }
  const int64_t R = o.rows, P = o.prompt, N = o.tokens, V = c.vocab_size;
  if (P + N > c.max_position_embeddings) {
    throw std::invalid_argument(fmt::format("--prompt {} + --tokens {} exceed max_position_embeddings {} of {}", P, N,
                                            c.max_position_embeddings, o.model));
  }
  const std::vector<int32_t> special = lm.tokenizer->special_ids();
  const std::set<int64_t> skip(special.begin(), special.end());
  if (static_cast<int64_t>(skip.size()) >= V) throw std::invalid_argument(o.model + ": every id of the vocabulary is special");
  std::vector<server::GenerationRequest> requests(R);
  for (int64_t b = 0; b < R; ++b) {
    for (int64_t i = 0, x = b * P; i < P; ++i, ++x) {
      int64_t id = (x * 7919 + 13) % V;
      while (skip.count(id)) id = (id + 1) % V;
      requests[b].prompt.push_back(id);
    }
    requests[b].max_new_tokens = N;
    requests[b].decode.beam_size = 1;  // greedy
    requests[b].whole = true;
  }

  // As `roformer serve` does (server::serve_forever): the OpenMP team that loaded the model ends before
  // the model thread starts its own, or libgomp, managing more threads than cores, wakes every
  // parallel region's workers from sleep.
  omp_pause_resource_all(omp_pause_soft);
  server::Metrics metrics;
  server::Generation g(m, *lm.tokenizer, {.slots = R, .prefill_chunk = o.prefill_chunk, .threads = o.threads}, metrics);
  // One load: every sequence submitted at once, read to its end; the new tokens per second of wall time.
  auto load = [&] {
    const auto t0 = bench_clock::now();
    std::vector<std::shared_ptr<server::GenerationStream>> streams;
    for (const auto& q : requests) streams.push_back(g.submit(q));
    int64_t tokens = 0;
    for (auto& s : streams) {
      for (server::GenerationEvent e; s->next(e);) tokens += e.has_token ? 1 : 0;
    }
    if (tokens != R * N) throw std::logic_error(fmt::format("bench generate: {} tokens of {}", tokens, R * N));
    return tokens / seconds_since(t0);
  };
  load();  // untimed: oneDNN's kernels, the slots' cache pages
  const server::GenerationTotals before = g.totals();
  std::vector<double> rates;
  for (int64_t i = 0; i < o.rounds; ++i) rates.push_back(load());
  const server::GenerationTotals t = g.totals();
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const int64_t steps = t.decode_steps - before.decode_steps, prefill_tokens = t.prefill_tokens - before.prefill_tokens;
  const double step_ms = steps > 0 ? (t.decode_seconds - before.decode_seconds) / steps * 1e3 : 0;
  const double step_rows = steps > 0 ? static_cast<double>(t.decode_rows - before.decode_rows) / steps : 0;
  const double prefill_s = t.prefill_seconds - before.prefill_seconds;
  const double prefill_rate = prefill_s > 0 ? prefill_tokens / prefill_s : 0;
  const double busy = t.decode_seconds - before.decode_seconds + prefill_s;
  const nlohmann::json run = {{"model", o.model},
                              {"threads", omp_get_max_threads()},
                              {"rows", R},
                              {"prompt", P},
                              {"tokens", N},
                              {"prefill_chunk", o.prefill_chunk},
                              {"linears", linears_name(m)},
                              {"kv_cache", model::cache_type_name(m.kv_cache())},
                              {"rounds", rates},
                              {"tokens_per_s", median},
                              {"steps_per_load", static_cast<double>(steps) / o.rounds},
                              {"step_ms_mean", step_ms},
                              {"step_rows_mean", step_rows},
                              {"prefill_tokens_per_s", prefill_rate},
                              {"prefill_share", busy > 0 ? prefill_s / busy : 0},
                              {"peak_rss_mib", peak_rss_mib()}};
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"tool", "roformer bench generate"}, {"runs", {run}}}.dump(2));
  } else {
    fmt::print("{} rows={} prompt={} tokens={} threads={} (linears {}, cache {}): {:.0f} tok/s (median of {}); "
               "{:.1f} steps a load of {:.1f} rows, {:.2f} ms each; prompts fed at {:.0f} tok/s, {:.0f}% of the model "
               "thread's time; peak RSS {:.0f} MiB\n",
               o.model, R, P, N, omp_get_max_threads(), run["linears"].get<std::string>(),
               run["kv_cache"].get<std::string>(), median, o.rounds, static_cast<double>(steps) / o.rounds, step_rows,
               step_ms, prefill_rate, busy > 0 ? 100 * prefill_s / busy : 0.0, peak_rss_mib());
  }
  return 0;
}

}  // namespace roformer
