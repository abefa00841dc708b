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

// A source's finished hypotheses: HF's BeamHypotheses (the best `keep` by score).
struct BeamSearch::Finished {
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

BeamSearch::BeamSearch(const std::vector<int64_t>& prefix, int64_t limit, int64_t eos, const DecodeOptions& o,
                       uint64_t stream)
    : o_(o), eos_(eos), K_(o.beam_size), limit_(limit), stream_(stream),
      prefix_len_(static_cast<int64_t>(prefix.size())), finished_(std::make_unique<Finished>()) {
  finished_->keep = K_, finished_->length_penalty = o.length_penalty;
  for (int64_t k = 0; k < K_; ++k) {
    history_.push_back(prefix);
    score_.push_back(k == 0 ? 0.0 : -1e9);  // the first step expands beam 0 alone
  }
  parents_.resize(K_), tokens_.resize(K_), next_score_.resize(K_);
  if (limit <= 0) finished_->add({}, 0.0, 1, false), done_ = true;
}

BeamSearch::~BeamSearch() = default;
BeamSearch::BeamSearch(BeamSearch&&) noexcept = default;
BeamSearch& BeamSearch::operator=(BeamSearch&&) noexcept = default;

bool BeamSearch::step(const float* logits, int64_t V) {
  if (done_) return true;
  for (int64_t k = 0; k < K_; ++k) parents_[k] = k, tokens_[k] = 0, next_score_[k] = 0;
  done_ = advance(logits, V);
  ++step_;
  if (done_) return true;
  std::vector<std::vector<int64_t>> moved(K_);  // each beam's history moves to the beam it continues
  for (int64_t k = 0; k < K_; ++k) {
    moved[k] = history_[parents_[k]];
    moved[k].push_back(tokens_[k]);
  }
  history_ = std::move(moved);
  score_ = next_score_;
  return false;
}

std::vector<Hypothesis> BeamSearch::best() {
  auto& h = finished_->hyps;
  std::stable_sort(h.begin(), h.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
  if (static_cast<int64_t>(h.size()) > o_.nbest) h.resize(o_.nbest);
  return std::move(h);
}

// The candidates (score, beam·V + token): one per beam for beam 1 (greedy or a draw), every
// continuation otherwise.
void BeamSearch::candidates(const float* logits, int64_t V) {
  cand_.clear();
  for (int64_t k = 0; k < K_; ++k) {
    step_log_probs(logits + k * V, V, history_[k], eos_, step_, o_, logp_);
    if (*std::max_element(logp_.begin(), logp_.end()) == kNegInf) continue;  // every token banned
    if (K_ == 1) {
      const int64_t t = pick_token(logp_, o_, stream_, step_);
      cand_.push_back({score_[k] + logp_[t], k * V + t});
      continue;
    }
    for (int64_t v = 0; v < V; ++v) {
      if (logp_[v] != kNegInf) cand_.push_back({score_[k] + logp_[v], k * V + v});
    }
  }
}

// Picks the next beams from the candidates; returns whether the source is done.
bool BeamSearch::advance(const float* logits, int64_t V) {
  const int64_t generated = step_ + 1;  // tokens of each beam after this step
  candidates(logits, V);
  const int64_t top = std::min<int64_t>(2 * K_, static_cast<int64_t>(cand_.size()));
  std::partial_sort(cand_.begin(), cand_.begin() + top, cand_.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  int64_t kept = 0;
  for (int64_t rank = 0; rank < top && kept < K_; ++rank) {
    const int64_t k = cand_[rank].second / V, t = cand_[rank].second % V;
    if (t == eos_) {
      if (rank >= K_) continue;
      finished_->add(generated_tokens(k), cand_[rank].first, generated, true);
      continue;
    }
    parents_[kept] = k, tokens_[kept] = t, next_score_[kept] = cand_[rank].first;
    ++kept;
  }
  if (kept == 0) {  // greedy/sampling drew eos, or nothing may follow: the source is finished
    if (finished_->hyps.empty()) finished_->add(generated_tokens(0), score_[0], generated, false);
    return true;
  }
  if (finished_->done(cand_[0].first, generated, o_.early_stopping || K_ == 1)) return true;
  if (generated < limit_) return false;
  for (int64_t k = 0; k < kept; ++k) {  // the length limit: running beams finish as they are
    std::vector<int64_t> h = generated_tokens(parents_[k]);
    h.push_back(tokens_[k]);
    finished_->add(std::move(h), next_score_[k], generated, false);
  }
  return true;
}

std::vector<int64_t> BeamSearch::generated_tokens(int64_t k) const {
  return std::vector<int64_t>(history_[k].begin() + prefix_len_, history_[k].end());
}

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
  std::vector<BeamSearch> search;  // source b's beams are rows b·K .. b·K + K − 1; it samples from stream b
  for (int64_t b = 0; b < B; ++b) search.emplace_back(prefixes[b], limits[b], eos, o, static_cast<uint64_t>(b));
  const int64_t K = o.beam_size;
  std::vector<int64_t> rows(R), tokens(R);
  const std::vector<float>* z = &logits;
  for (;;) {
    bool running = false;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < K; ++k) rows[b * K + k] = b * K + k, tokens[b * K + k] = 0;  // done: fed, unread
      if (search[b].done() || search[b].step(z->data() + b * K * V, V)) continue;
      running = true;
      for (int64_t k = 0; k < K; ++k) rows[b * K + k] = b * K + search[b].parents()[k], tokens[b * K + k] = search[b].tokens()[k];
    }
    if (!running) break;
    gen.reorder(rows);
    z = &gen.feed(tokens);
  }
  std::vector<std::vector<Hypothesis>> out;
  for (auto& s : search) out.push_back(s.best());
  return out;
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
