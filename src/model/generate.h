// Autoregressive decoding for the causal LM (and RoFormer-Sim's UniLM mask) with a key/value cache:
// new tokens run through the same blocks as training (blocks.h), attending to the cached (already
// rotated) keys and values of every earlier token. RoPE rotates the new q and k at their absolute
// positions through librope's position offsets, so the cache never needs re-rotation. The cache is
// batched and rows can be reordered, for beam search. Sampling: temperature and top-k, seeded. The
// decoder of an encoder-decoder (add_cross_attention) also attends over a memory (set_memory), whose
// cross-attention keys and values are computed once per source and shared by that source's rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/blocks.h"
#include "model/roformer.h"
#include "rope/rope.hpp"

namespace model {

class Generator {
 public:
  // The model must be a causal LM (is_decoder); it is read, not copied, and must outlive this.
  // capacity: the longest context (0: max_position_embeddings); batch: rows decoded together.
  // Beyond max_position_embeddings only RoPE, sinusoidal and no positions work (learned ones have no
  // table there); with dynamic NTK, frequencies are those of a `capacity`-token context, fixed for the
  // whole generation so that cached keys stay valid. Throws std::invalid_argument otherwise.
  explicit Generator(const RoFormer<float>& m, int64_t capacity = 0, int64_t batch = 1);
  ~Generator();
  // Appends n tokens to every row at positions position() .. position() + n − 1: ids and types are
  // (batch, n) (types empty: all 0; RoFormer-Sim's UniLM mask follows them, so feed a whole type-0
  // prefix at once). Returns the logits (batch, V) after each row's last token. Throws
  // std::length_error past the capacity and std::out_of_range on ids outside the vocabulary.
  const std::vector<float>& feed(const std::vector<int64_t>& ids, const std::vector<int64_t>& types = {});
  int64_t position() const { return pos_; }
  void reset();
  // Beam search: row b continues from the state row rows[b] had (rows.size() == batch).
  void reorder(const std::vector<int64_t>& rows);
  // A decoder with cross-attention: the encoder's output for `sources` sources, memory (sources, Tk, H)
  // and its mask (sources, Tk) (1 real, 0 padding; null: all real). Row b of the batch attends over
  // source b / (batch / sources), so a source's beams are consecutive rows. The keys and values of
  // every layer are computed here, once per source.
  void set_memory(const float* memory, const int64_t* mask, int64_t sources, int64_t Tk);

 private:
  struct State;
  const RoFormer<float>& m_;
  std::unique_ptr<State> st_;
  int64_t batch_ = 1, pos_ = 0, capacity_ = 0;
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
// context (capacity, 0: max_position_embeddings) is full; returns only the new tokens. With capacity 0
// the KV cache holds the prompt plus max_new_tokens (at most max_position_embeddings) tokens, and
// dynamic NTK's frequencies are those of that length.
std::vector<int64_t> generate(const RoFormer<float>& m, const std::vector<int64_t>& prompt, const SampleOptions& opt,
                              int64_t capacity = 0);

}  // namespace model
