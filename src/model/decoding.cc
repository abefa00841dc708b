// Greedy decoding, sampling and beam search over a Generator (see decoding.h). Shapes: B sources,
// K beams, rows R = B·K (source b's beams are rows b·K .. b·K + K − 1), V vocabulary.
#include "decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "base/random.h"

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
// (prefix included) already holds.
void ban_repeated_ngrams(const std::vector<int64_t>& history, int64_t n, std::vector<double>& logp) {
  const int64_t L = static_cast<int64_t>(history.size());
  if (n <= 0 || L + 1 < n) return;
  for (int64_t i = 0; i + n <= L; ++i) {
    bool same = true;
    for (int64_t j = 0; j < n - 1 && same; ++j) same = history[i + j] == history[L - n + 1 + j];
    if (same) logp[history[i + n - 1]] = kNegInf;
  }
}

}  // namespace

void step_log_probs(const float* logits, int64_t V, const std::vector<int64_t>& history, int64_t eos, int64_t step,
                    const DecodeOptions& o, std::vector<double>& logp) {
  log_softmax(logits, V, logp);
  ban_repeated_ngrams(history, o.no_repeat_ngram_size, logp);
  for (int64_t id : o.banned) logp[id] = kNegInf;
  if (eos >= 0 && step < o.min_new_tokens) logp[eos] = kNegInf;
}

int64_t pick_token(const std::vector<double>& logp, const DecodeOptions& o, uint64_t stream, int64_t step) {
  if (logp.empty() || *std::max_element(logp.begin(), logp.end()) == kNegInf) return -1;
  if (o.sample) {
    std::vector<float> z(logp.begin(), logp.end());  // banned: −inf, never drawn
    return sample_token(z, o, base::uniform01(base::mix64(o.seed ^ stream), step));
  }
  return std::max_element(logp.begin(), logp.end()) - logp.begin();
}

namespace {

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

// The search over every row: each step, advance() picks each source's next K rows from the logits
// and fills the step's (rows, tokens, scores); rows not yet done are then reordered and fed.
class Search {
 public:
  Search(const std::vector<std::vector<int64_t>>& prefixes, const std::vector<int64_t>& limits, int64_t eos,
         const DecodeOptions& o, int64_t V)
      : o_(o), eos_(eos), K_(o.beam_size), V_(V), limits_(limits), finished_(prefixes.size()),
        done_(prefixes.size(), 0) {
    const int64_t B = static_cast<int64_t>(prefixes.size()), R = B * K_;
    for (int64_t r = 0; r < R; ++r) {
      history_.push_back(prefixes[r / K_]);
      score_.push_back(r % K_ == 0 ? 0.0 : -1e9);  // the first step expands beam 0 alone
    }
    for (auto& f : finished_) f.keep = K_, f.length_penalty = o.length_penalty;
    for (int64_t b = 0; b < B; ++b) {
      prefix_len_.push_back(static_cast<int64_t>(prefixes[b].size()));
      if (limits[b] <= 0) finished_[b].add({}, 0.0, 1, false), done_[b] = 1;
    }
    rows_.resize(R), tokens_.resize(R), next_score_.resize(R);
  }

  bool all_done() const { return std::all_of(done_.begin(), done_.end(), [](char d) { return d != 0; }); }

  // One step over the logits (R, V) of every row: returns false once every source is done.
  bool step(const float* logits, int64_t step) {
    const int64_t B = static_cast<int64_t>(done_.size());
    for (int64_t r = 0; r < B * K_; ++r) rows_[r] = r, tokens_[r] = 0, next_score_[r] = 0;
    for (int64_t b = 0; b < B; ++b) {
      if (!done_[b]) done_[b] = advance(b, logits, step);
    }
    return !all_done();
  }

  // Moves each row's history to the row it continues, with its new token.
  void commit() {
    std::vector<std::vector<int64_t>> moved(rows_.size());
    for (size_t r = 0; r < rows_.size(); ++r) {
      moved[r] = history_[rows_[r]];
      moved[r].push_back(tokens_[r]);
    }
    history_ = std::move(moved);
    score_ = next_score_;
  }

  const std::vector<int64_t>& rows() const { return rows_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }

  std::vector<std::vector<Hypothesis>> best() {
    std::vector<std::vector<Hypothesis>> out(finished_.size());
    for (size_t b = 0; b < finished_.size(); ++b) {
      auto& h = finished_[b].hyps;
      std::stable_sort(h.begin(), h.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
      if (static_cast<int64_t>(h.size()) > o_.nbest) h.resize(o_.nbest);
      out[b] = std::move(h);
    }
    return out;
  }

 private:
  // log p of row r's continuations with the bans applied (−inf: never chosen).
  void row_log_probs(const float* logits, int64_t r, int64_t step) {
    step_log_probs(logits + r * V_, V_, history_[r], eos_, step, o_, logp_);
  }

  // Source b's candidates (score, row·V + token): one per row for beam 1 (greedy or a draw), every
  // continuation otherwise.
  void candidates(int64_t b, const float* logits, int64_t step) {
    cand_.clear();
    for (int64_t k = 0; k < K_; ++k) {
      const int64_t r = b * K_ + k;
      row_log_probs(logits, r, step);
      if (*std::max_element(logp_.begin(), logp_.end()) == kNegInf) continue;  // every token banned
      if (K_ == 1) {
        const int64_t t = pick_token(logp_, o_, static_cast<uint64_t>(b), step);
        cand_.push_back({score_[r] + logp_[t], r * V_ + t});
        continue;
      }
      for (int64_t v = 0; v < V_; ++v) {
        if (logp_[v] != kNegInf) cand_.push_back({score_[r] + logp_[v], r * V_ + v});
      }
    }
  }

  // Picks source b's next beams from its candidates; returns whether the source is done.
  bool advance(int64_t b, const float* logits, int64_t step) {
    const int64_t generated = step + 1;  // tokens of each row after this step
    candidates(b, logits, step);
    const int64_t top = std::min<int64_t>(2 * K_, static_cast<int64_t>(cand_.size()));
    std::partial_sort(cand_.begin(), cand_.begin() + top, cand_.end(), [](const auto& x, const auto& y) {
      return x.first > y.first || (x.first == y.first && x.second < y.second);
    });
    int64_t kept = 0;
    for (int64_t rank = 0; rank < top && kept < K_; ++rank) {
      const int64_t r = cand_[rank].second / V_, t = cand_[rank].second % V_;
      if (t == eos_) {
        if (rank >= K_) continue;
        finished_[b].add(generated_tokens(b, r), cand_[rank].first, generated, true);
        continue;
      }
      rows_[b * K_ + kept] = r, tokens_[b * K_ + kept] = t, next_score_[b * K_ + kept] = cand_[rank].first;
      ++kept;
    }
    if (kept == 0) {  // greedy/sampling drew eos, or nothing may follow: the source is finished
      if (finished_[b].hyps.empty()) finished_[b].add(generated_tokens(b, b * K_), score_[b * K_], generated, false);
      return true;
    }
    if (finished_[b].done(cand_[0].first, generated, o_.early_stopping || K_ == 1)) return true;
    if (generated < limits_[b]) return false;
    for (int64_t k = 0; k < kept; ++k) {  // the length limit: running beams finish as they are
      std::vector<int64_t> h = generated_tokens(b, rows_[b * K_ + k]);
      h.push_back(tokens_[b * K_ + k]);
      finished_[b].add(std::move(h), next_score_[b * K_ + k], generated, false);
    }
    return true;
  }

  std::vector<int64_t> generated_tokens(int64_t b, int64_t r) const {
    return std::vector<int64_t>(history_[r].begin() + prefix_len_[b], history_[r].end());
  }

  const DecodeOptions& o_;
  const int64_t eos_, K_, V_;
  const std::vector<int64_t>& limits_;
  std::vector<Finished> finished_;
  std::vector<char> done_;
  std::vector<int64_t> prefix_len_;
  std::vector<std::vector<int64_t>> history_;  // R: prefix + generated tokens
  std::vector<double> score_;                  // R: Σ log p of the generated tokens
  std::vector<int64_t> rows_, tokens_;         // R: this step's choice
  std::vector<double> next_score_, logp_;
  std::vector<std::pair<double, int64_t>> cand_;
};

}  // namespace

void check_decode_options(const DecodeOptions& o) {
  if (o.beam_size < 1 || o.beam_size > kMaxBeamSize || o.nbest < 1 || o.nbest > o.beam_size) {
    throw std::invalid_argument("the beam size (--beam) must be in [1, " + std::to_string(kMaxBeamSize) +
                                "] and n-best at most the beam size");
  }
  if (o.sample && o.beam_size != 1) throw std::invalid_argument("sampling decodes with beam size 1 (--beam 1)");
  if (o.max_len_a < 0 || o.max_len_b < 0 || o.min_new_tokens < 0 || o.no_repeat_ngram_size < 0) {
    throw std::invalid_argument("max length terms, min_new_tokens and no_repeat_ngram_size must not be negative");
  }
  // a · source length becomes a token count: a NaN or an astronomic a would not convert.
  if (!(o.max_len_a <= kMaxLenA)) {
    throw std::invalid_argument("max_len_a (--max-len-a) must be in [0, " + std::to_string(static_cast<int>(kMaxLenA)) + "]");
  }
  if (!(o.temperature >= 0 && std::isfinite(o.temperature))) {
    throw std::invalid_argument("temperature must be a number >= 0");
  }
  if (o.top_k < 0) throw std::invalid_argument("top_k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw std::invalid_argument("top_p must be in (0, 1]");
  if (!std::isfinite(o.length_penalty)) throw std::invalid_argument("length_penalty must be finite");
}

int64_t sample_token(const std::vector<float>& logits, const DecodeOptions& o, double u) {
  if (!(o.temperature >= 0)) throw std::invalid_argument("temperature must be >= 0");
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order;
  for (int64_t id = 0; id < V; ++id) {
    const bool banned = std::find(o.banned.begin(), o.banned.end(), id) != o.banned.end();
    if (!banned && logits[id] != -std::numeric_limits<float>::infinity()) order.push_back(id);
  }
  if (order.empty()) throw std::invalid_argument("every token is banned");
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (o.temperature == 0) return order[0];
  if (o.top_k > 0 && o.top_k < static_cast<int64_t>(order.size())) order.resize(o.top_k);
  std::vector<double> w(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    w[i] = std::exp((logits[order[i]] - logits[order[0]]) / o.temperature);
    sum += w[i];
  }
  if (o.top_p < 1) {  // HF's TopPLogitsWarper: keep a token while the mass before it is below top_p
    double before = 0;
    size_t keep = 0;
    while (keep < order.size() && before < o.top_p * sum) before += w[keep++];
    order.resize(keep), w.resize(keep);
    sum = before;
  }
  double acc = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    acc += w[i] / sum;
    if (u < acc) return order[i];
  }
  return order.back();
}

std::vector<std::vector<Hypothesis>> decode(Generator& gen, const std::vector<float>& logits,
                                            const std::vector<std::vector<int64_t>>& prefixes,
                                            const std::vector<int64_t>& limits, int64_t eos, const DecodeOptions& o) {
  check_decode_options(o);
  const int64_t B = static_cast<int64_t>(prefixes.size()), R = B * o.beam_size;
  if (B == 0 || static_cast<int64_t>(limits.size()) != B || gen.batch() != R) {
    throw std::invalid_argument("decode: the generator must hold beam_size rows for each source");
  }
  const int64_t V = static_cast<int64_t>(logits.size()) / R;
  if (V < 1 || static_cast<int64_t>(logits.size()) != R * V) throw std::invalid_argument("decode: logits must be (rows, V)");
  for (int64_t id : o.banned) {
    if (id < 0 || id >= V) throw std::out_of_range("banned token " + std::to_string(id) + " is outside the vocabulary");
  }
  if (eos >= V) throw std::out_of_range("eos " + std::to_string(eos) + " is outside the vocabulary");
  Search search(prefixes, limits, eos, o, V);
  const std::vector<float>* z = &logits;
  for (int64_t step = 0; !search.all_done() && search.step(z->data(), step); ++step) {
    gen.reorder(search.rows());
    search.commit();
    z = &gen.feed(search.tokens());
  }
  return search.best();
}

std::vector<Hypothesis> generate(const RoFormer<float>& m, const std::vector<int64_t>& prompt, const DecodeOptions& o,
                                 int64_t eos, int64_t capacity) {
  check_decode_options(o);
  if (prompt.empty()) throw std::invalid_argument("generation needs a prompt of at least one token");
  const int64_t limit = capacity > 0 ? capacity : m.config().max_position_embeddings;
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len >= limit) {
    throw std::invalid_argument("the prompt is " + std::to_string(prompt_len) + " tokens, but the context (" +
                                (capacity > 0 ? "capacity" : "max_position_embeddings") + ") is " +
                                std::to_string(limit) + " tokens and must also hold the generated ones");
  }
  // The cache holds what this request needs, not max_position_embeddings (up to 2^24) tokens.
  const int64_t new_tokens = std::min<int64_t>(limit - prompt_len, o.max_len_b);
  Generator g(m, capacity > 0 ? capacity : prompt_len + new_tokens);
  const std::vector<float> logits = g.feed(prompt);
  // The prompt ran once; its cache and logits are copied to the beams.
  g.reorder(std::vector<int64_t>(o.beam_size, 0));
  std::vector<float> rows(o.beam_size * logits.size());
  for (int64_t k = 0; k < o.beam_size; ++k) std::copy(logits.begin(), logits.end(), rows.begin() + k * logits.size());
  return decode(g, rows, {prompt}, {new_tokens}, eos, o)[0];
}

}  // namespace model
