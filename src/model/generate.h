// Autoregressive decoding for the causal LM with a key/value cache: each new token runs through the
// blocks once, attending to the cached (already rotated) keys and values of every earlier token.
// RoPE rotates the new q and k at their absolute positions through librope's position offsets, so
// the cache never needs re-rotation. Sampling: temperature and top-k, seeded and reproducible.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/roformer.h"
#include "rope/rope.hpp"

namespace model {

class Generator {
 public:
  // The model must be a causal LM (is_decoder); it is read, not copied, and must outlive this.
  // capacity: the longest context (0: max_position_embeddings). Beyond max_position_embeddings
  // only RoPE, sinusoidal and no positions work (learned ones have no table there); with dynamic
  // NTK, frequencies are those of a `capacity`-token context, fixed for the whole generation so
  // that cached keys stay valid. Throws std::invalid_argument otherwise.
  explicit Generator(const RoFormer<float>& m, int64_t capacity = 0);
  // Appends tokens at positions position() .. position() + ids.size() − 1 and returns the logits
  // (V) after the last one. Throws std::length_error past the capacity and std::out_of_range on
  // ids outside the vocabulary.
  const std::vector<float>& feed(const std::vector<int64_t>& ids);
  int64_t position() const { return pos_; }
  void reset() {
    pos_ = 0;
    for (auto& st : linear_) st = ops::linear_attention_state<float>(linear_shape_);
  }

 private:
  const RoFormer<float>& m_;
  std::optional<rope::Plan> rope_;  // for rope models
  std::vector<std::vector<float>> k_cache_, v_cache_;  // L × (max_positions, H), rotated
  std::vector<float> logits_;                          // (V)
  ops::LinearAttentionShape linear_shape_{};           // linear attention: one sequence
  std::vector<ops::LinearAttentionState<float>> linear_;  // L recurrent states (linear attention)
  std::vector<std::vector<float>> favor_;              // performer: L × (features, D)
  int64_t pos_ = 0;
  int64_t capacity_ = 0;
};

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 0;
  std::vector<int64_t> banned;  // never sampled (special tokens)
};

// Draws one token from softmax(logits / temperature) restricted to the top_k largest, using the
// uniform draw u in [0, 1). Throws std::invalid_argument for a negative temperature.
int64_t sample_token(const std::vector<float>& logits, const SampleOptions& opt, double u);

// Continues `prompt` (at least one token) by up to max_new_tokens tokens, stopping early when the
// context (capacity, 0: max_position_embeddings) is full; returns only the new tokens.
std::vector<int64_t> generate(const RoFormer<float>& m, const std::vector<int64_t>& prompt, const SampleOptions& opt,
                              int64_t capacity = 0);

}  // namespace model
