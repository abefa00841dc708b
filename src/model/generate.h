// Autoregressive decoding for the causal LM (and RoFormer-Sim's UniLM mask) with a key/value cache:
// new tokens run through the forward pass's own layer_forward (layer.h), attending to the cached
// (already rotated) keys and values of every earlier token. RoPE rotates the new q and k at their
// absolute positions through librope's position offsets, so the cache never needs re-rotation. The cache is
// batched and rows can be reordered (and copied), for beam search; decoding.h decodes over it. The
// decoder of an encoder-decoder (add_cross_attention) also attends over a memory (set_memory), whose
// cross-attention keys and values are computed once per source and shared by that source's rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/layer.h"
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
  // Step-level batching (a server's slots, as llama.cpp's and TGI's): each row decodes on its own, at a
  // position of its own. feed_rows appends n tokens to each of `rows` (distinct rows of the batch), ids
  // (rows.size(), n), at that row's position, and returns the logits (rows.size(), V) after each row's
  // last token; release(row) empties a row for a new sequence. Softmax attention without UniLM's mask;
  // with cross-attention each fed row needs its memory (set_row_memory). Once feed_rows is used, feed
  // and reorder are refused until reset(). A row fed in chunks, or beside other rows, gives the logits
  // it gets alone in one feed (the same kernels, up to the GEMMs' blocking by row count). Throws
  // std::length_error past a row's capacity.
  const std::vector<float>& feed_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& ids);
  // The same with counts[i] ≥ 1 tokens for rows[i]: ids holds each row's tokens one row after another
  // (Σ counts), so that prompts of different lengths are fed in one call (products over all their
  // tokens). Self-attention only (no cross-attention). Throws as feed_rows.
  const std::vector<float>& feed_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& ids,
                                      const std::vector<int64_t>& counts);
  void release(int64_t row);
  int64_t position(int64_t row) const;
  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Grows every row's cache to `capacity` tokens, keeping what they hold (a step-level batch meets a
  // longer sequence); dynamic NTK's frequencies stay those of the first capacity. Throws as the
  // constructor past learned positions or this machine's memory.
  void reserve(int64_t capacity);
  void reset();
  // Beam search: row b continues from the state row rows[b] had; rows.size() is the new batch, so
  // reorder({0, 0, 0, 0}) copies a one-row prompt's cache to four beams. Throws std::length_error
  // when the larger cache cannot fit in memory.
  void reorder(const std::vector<int64_t>& rows);
  // A decoder with cross-attention: the encoder's output for `sources` sources, memory (sources, Tk, H)
  // and its mask (sources, Tk) (1 real, 0 padding; null: all real). Row b of the batch attends over
  // source b / (batch / sources), so a source's beams are consecutive rows. The keys and values of
  // every layer are computed here, once per source.
  void set_memory(const float* memory, const int64_t* mask, int64_t sources, int64_t Tk);
  // Step-level batching with cross-attention (an encoder-decoder's translations at a server): `rows`
  // take one source's memory (Tk, H), its encoder output without padding; its keys and values are
  // computed here once and copied to each row (a source's beams). Rows of different sources hold
  // memories of different lengths: each row's cross-attention reads its own (feed_rows).
  void set_row_memory(const std::vector<int64_t>& rows, const float* memory, int64_t Tk);
  // Step-level beam search: row rows[i] continues from the state row from[i] had before the call (its
  // position, its cached keys and values, its memory), e.g. a source's beams re-selected within its
  // rows. Only the positions filled are copied.
  void copy_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& from);

 private:
  struct State;
  const RoFormer<float>& m_;
  std::unique_ptr<State> st_;
  void check_cache_fits(int64_t batch) const;
  // The model's self-attention caches in bf16 (RoFormer::kv_cache; softmax attention only).
  bool bf16_cache() const;
  int64_t batch_ = 1, pos_ = 0, capacity_ = 0;
  std::vector<int64_t> row_pos_;  // (batch) each row's position, after feed_rows (empty before)
};

}  // namespace model
