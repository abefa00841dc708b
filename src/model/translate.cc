// Beam search, greedy decoding and sampling for the encoder-decoder (see translate.h). Shapes:
// B sources, K beams, rows R = B·K (source b's beams are rows b·K .. b·K + K − 1), S source tokens
// of the longest source, V target vocabulary.
#include "translate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "base/random.h"
#include "model/generate.h"

namespace model {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log_softmax of one row of logits, in double.
void log_softmax(const float* z, int64_t V, std::vector<double>& out) {
  out.resize(V);
  double zmax = z[0];
  for (int64_t v = 1; v < V; ++v) zmax = std::max(zmax, static_cast<double>(z[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - zmax);
  const double lse = zmax + std::log(sum);
  for (int64_t v = 0; v < V; ++v) out[v] = z[v] - lse;
}

// HF's NoRepeatNGramLogitsProcessor: bans every token that would complete an n-gram the history
// (decoder start included) already holds.
void ban_repeated_ngrams(const std::vector<int64_t>& history, int64_t n, std::vector<double>& logp) {
  const int64_t L = static_cast<int64_t>(history.size());
  if (n <= 0 || L + 1 < n) return;
  for (int64_t i = 0; i + n <= L; ++i) {
    bool same = true;
    for (int64_t j = 0; j < n - 1 && same; ++j) same = history[i + j] == history[L - n + 1 + j];
    if (same) logp[history[i + n - 1]] = kNegInf;
  }
}

// A source's finished hypotheses: HF's BeamHypotheses (the best `keep` by score).
struct Finished {
  int64_t keep = 1;
  double length_penalty = 1.0;
  std::vector<Hypothesis> hyps;
  double worst = 1e9;
  void add(std::vector<int64_t> tokens, double sum_logprobs, int64_t generated_len, bool eos) {
    const double score = sum_logprobs / std::pow(static_cast<double>(generated_len), length_penalty);
    if (static_cast<int64_t>(hyps.size()) >= keep && score <= worst) return;
    hyps.push_back({std::move(tokens), score, eos});
    if (static_cast<int64_t>(hyps.size()) > keep) {
      const auto lowest = std::min_element(hyps.begin(), hyps.end(), [](auto& a, auto& b) { return a.score < b.score; });
      hyps.erase(lowest);
      worst = std::min_element(hyps.begin(), hyps.end(), [](auto& a, auto& b) { return a.score < b.score; })->score;
    } else {
      worst = std::min(score, worst);
    }
  }
  // HF's is_done with early_stopping true / false.
  bool done(double best_sum_logprobs, int64_t generated_len, bool early_stopping) const {
    if (static_cast<int64_t>(hyps.size()) < keep) return false;
    if (early_stopping) return true;
    return worst >= best_sum_logprobs / std::pow(static_cast<double>(generated_len), length_penalty);
  }
};

void check(const Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources, const DecodeOptions& o) {
  if (sources.empty()) throw std::invalid_argument("translate: no sources");
  if (o.beam_size < 1 || o.nbest < 1 || o.nbest > o.beam_size) {
    throw std::invalid_argument("beam size must be at least 1 and n-best at most the beam size");
  }
  if (o.sample && o.beam_size != 1) throw std::invalid_argument("sampling decodes with beam size 1");
  if (o.max_len_a < 0 || o.max_len_b < 0 || o.no_repeat_ngram_size < 0) {
    throw std::invalid_argument("max length terms and no_repeat_ngram_size must not be negative");
  }
  for (const auto& s : sources) {
    if (s.empty()) throw std::invalid_argument("translate: an empty source");
    for (int64_t id : s) {
      if (id < 0 || id >= m.config().encoder.vocab_size) {
        throw std::out_of_range("source token " + std::to_string(id) + " is outside the vocabulary");
      }
    }
  }
}

}  // namespace

std::vector<std::vector<Hypothesis>> translate(Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources,
                                               const DecodeOptions& o) {
  check(m, sources, o);
  const Seq2SeqConfig& c = m.config();
  const int64_t B = static_cast<int64_t>(sources.size()), K = o.beam_size, R = B * K, V = c.decoder.vocab_size;
  // The encoder, once: sources + eos, padded.
  int64_t S = 0;
  for (const auto& s : sources) S = std::max<int64_t>(S, static_cast<int64_t>(s.size()) + 1);
  std::vector<int64_t> src(B * S, c.pad_token_id), mask(B * S, 0), limit(B);
  int64_t longest = 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(sources[b].size());
    std::copy(sources[b].begin(), sources[b].end(), src.begin() + b * S);
    src[b * S + n] = c.eos_token_id;
    std::fill_n(mask.begin() + b * S, n + 1, 1);
    limit[b] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.max_len_a * static_cast<double>(n + 1))) + o.max_len_b);
    // Learned positions end at max_position_embeddings: the decoder start takes one of them.
    if (c.decoder.position_encoding == PositionEncoding::learned) {
      limit[b] = std::min(limit[b], c.decoder.max_position_embeddings - 1);
    }
    longest = std::max(longest, limit[b]);
  }
  Inputs in;
  in.ids = src.data(), in.attention_mask = mask.data(), in.B = B, in.T = S;
  m.encoder().forward(in);
  Generator gen(m.decoder(), longest + 1, R);
  gen.set_memory(m.encoder().hidden_state(c.encoder.num_hidden_layers), mask.data(), B, S);

  std::vector<std::vector<int64_t>> history(R, std::vector<int64_t>{c.decoder_start_token_id});  // start included
  std::vector<double> beam_score(R, 0.0);
  for (int64_t r = 0; r < R; ++r) beam_score[r] = r % K == 0 ? 0.0 : -1e9;  // the first step expands beam 0 alone
  std::vector<Finished> finished(B);
  for (auto& f : finished) f.keep = K, f.length_penalty = o.length_penalty;
  std::vector<char> done(B, 0);
  std::vector<int64_t> next(R, c.decoder_start_token_id);
  std::vector<double> logp;
  std::vector<std::pair<double, int64_t>> cand;  // (score, row·V + token)
  for (int64_t step = 0;; ++step) {
    const std::vector<float>& logits = gen.feed(next);
    const int64_t generated = step + 1;  // tokens of each row after this step
    std::vector<int64_t> rows(R), tokens(R, c.pad_token_id);
    std::vector<double> scores(R, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < K; ++k) rows[b * K + k] = b * K + k;
      if (done[b]) continue;
      cand.clear();
      for (int64_t k = 0; k < K; ++k) {
        const int64_t r = b * K + k;
        log_softmax(logits.data() + r * V, V, logp);
        ban_repeated_ngrams(history[r], o.no_repeat_ngram_size, logp);
        if (o.beam_size == 1) {  // greedy or sampling: one continuation
          int64_t t;
          if (o.sample) {
            SampleOptions so;
            so.temperature = o.temperature, so.top_k = o.top_k;
            std::vector<float> z(V);
            for (int64_t v = 0; v < V; ++v) z[v] = static_cast<float>(logp[v]);  // banned: −inf, never drawn
            t = sample_token(z, so, base::uniform01(base::mix64(o.seed ^ static_cast<uint64_t>(b)), step));
          } else {
            t = std::max_element(logp.begin(), logp.end()) - logp.begin();
          }
          cand.push_back({beam_score[r] + logp[t], r * V + t});
          continue;
        }
        for (int64_t v = 0; v < V; ++v) cand.push_back({beam_score[r] + logp[v], r * V + v});
      }
      const int64_t top = std::min<int64_t>(2 * K, static_cast<int64_t>(cand.size()));
      std::partial_sort(cand.begin(), cand.begin() + top, cand.end(), [](const auto& x, const auto& y) {
        return x.first > y.first || (x.first == y.first && x.second < y.second);
      });
      int64_t kept = 0;
      for (int64_t rank = 0; rank < top && kept < K; ++rank) {
        const int64_t r = cand[rank].second / V, t = cand[rank].second % V;
        if (t == c.eos_token_id) {
          if (rank >= K) continue;
          finished[b].add(std::vector<int64_t>(history[r].begin() + 1, history[r].end()), cand[rank].first, generated,
                          true);
          continue;
        }
        rows[b * K + kept] = r, tokens[b * K + kept] = t, scores[b * K + kept] = cand[rank].first;
        ++kept;
      }
      if (K == 1 && kept == 0) {  // greedy/sampling drew eos: the source is finished
        done[b] = 1;
        continue;
      }
      done[b] = finished[b].done(cand[0].first, generated, o.early_stopping || K == 1);
      if (!done[b] && generated >= limit[b]) {  // the length limit: running beams finish as they are
        for (int64_t k = 0; k < kept; ++k) {
          std::vector<int64_t> h(history[rows[b * K + k]].begin() + 1, history[rows[b * K + k]].end());
          h.push_back(tokens[b * K + k]);
          finished[b].add(std::move(h), scores[b * K + k], generated, false);
        }
        done[b] = 1;
      }
    }
    if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
    gen.reorder(rows);
    std::vector<std::vector<int64_t>> moved(R);
    for (int64_t r = 0; r < R; ++r) {
      moved[r] = history[rows[r]];
      moved[r].push_back(tokens[r]);
    }
    history = std::move(moved);
    beam_score = scores;
    next = tokens;
  }
  std::vector<std::vector<Hypothesis>> out(B);
  for (int64_t b = 0; b < B; ++b) {
    auto& h = finished[b].hyps;
    std::stable_sort(h.begin(), h.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    if (static_cast<int64_t>(h.size()) > o.nbest) h.resize(o.nbest);
    out[b] = std::move(h);
  }
  return out;
}

double sequence_log_prob(Seq2Seq<float>& m, const std::vector<int64_t>& source, const std::vector<int64_t>& target) {
  const Seq2SeqConfig& c = m.config();
  std::vector<int64_t> src = source, dec = {c.decoder_start_token_id};
  src.push_back(c.eos_token_id);
  dec.insert(dec.end(), target.begin(), target.end());
  Seq2SeqInputs in;
  in.source = src.data(), in.decoder_input = dec.data(), in.B = 1;
  in.S = static_cast<int64_t>(src.size()), in.T = static_cast<int64_t>(dec.size());
  m.forward(in);
  const int64_t V = c.decoder.vocab_size;
  double sum = 0;
  std::vector<double> logp;
  for (int64_t t = 0; t < in.T; ++t) {
    log_softmax(m.logits() + t * V, V, logp);
    sum += logp[t + 1 < in.T ? dec[t + 1] : c.eos_token_id];
  }
  return sum;
}

}  // namespace model
