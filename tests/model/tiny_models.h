// Tiny models for the decoding tests (translate_test.cc, decoding_test.cc, layer_test.cc): a 2-layer,
// 16-wide config, weights pushed far from uniform so that beam search has choices, and the
// log-probability of one token under a row of logits (the tests' independent scoring).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "model/config.h"

namespace model_testing {

inline model::RoFormerConfig tiny_config(int64_t V, model::PositionEncoding pe = model::PositionEncoding::rope) {
  model::RoFormerConfig c;
  c.vocab_size = V;
  c.embedding_size = c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 24;
  c.max_position_embeddings = 32;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  c.position_encoding = pe;
  return c;
}

// init_weights(seed) plus N(0, sd) noise on every parameter.
template <typename Model>
void randomise(Model& m, uint64_t seed, double sd = 0.5) {
  m.init_weights(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, sd);
  for (auto& v : m.params) v += static_cast<float>(z(rng));
}

// log softmax(z)[t] over V logits, in double.
inline double log_prob(const float* z, int64_t V, int64_t t) {
  double mx = z[0], se = 0;
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
  for (int64_t v = 0; v < V; ++v) se += std::exp(z[v] - mx);
  return z[t] - mx - std::log(se);
}

// The best hypothesis of an exhaustive search: every sequence of up to L − 1 non-eos tokens ended by
// eos (none when eos < 0), and every L non-eos tokens cut at the limit; score(tokens, ended_by_eos)
// gives its Σ log p. Returns the best score and fills best_tokens.
inline double exhaustive_best(int64_t V, int64_t L, int64_t eos,
                              const std::function<double(const std::vector<int64_t>&, bool)>& score,
                              std::vector<int64_t>& best_tokens) {
  double best = -INFINITY;
  std::vector<int64_t> prefix;
  std::function<void()> visit = [&] {
    const bool cut = static_cast<int64_t>(prefix.size()) == L;
    if (cut || eos >= 0) {
      const double s = score(prefix, !cut);
      if (s > best) best = s, best_tokens = prefix;
    }
    if (cut) return;
    for (int64_t t = 0; t < V; ++t) {
      if (t == eos) continue;
      prefix.push_back(t);
      visit();
      prefix.pop_back();
    }
  };
  visit();
  return best;
}

}  // namespace model_testing
