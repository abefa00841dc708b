// Decoding for the encoder-decoder (seq2seq.h): batched beam search, greedy decoding and sampling
// (decoding.h) over the decoder's KV cache (generate.h). The encoder runs once per batch; each layer's
// cross-attention keys and values are computed once per source and shared by its beams; the
// self-attention caches are reordered whenever beams are pruned.
//
// The length limit of a source is max_len_a · (its tokens + eos) + max_len_b new tokens (fairseq's
// convention), and with learned positions at most max_position_embeddings − 1; HF's max_length for
// the same limit is that plus one (the decoder start token).
#pragma once

#include <cstdint>
#include <vector>

#include "model/decoding.h"
#include "model/seq2seq.h"

namespace model {

// The best hypotheses (nbest, best first) of each source; sources are token ids without the eos,
// which is appended. Every source must have at least one token. Throws std::invalid_argument on bad
// options.
std::vector<std::vector<Hypothesis>> translate(Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources,
                                               const DecodeOptions& o);

// The new tokens source `tokens` (without its eos) may decode to under o: max_len_a · (tokens + eos) +
// max_len_b, at least 1, and with learned positions at most max_position_embeddings − 1.
int64_t translation_limit(const Seq2SeqConfig& c, int64_t tokens, const DecodeOptions& o);

// Translation with step-level batching (a server's slots, as Generation is for a causal LM): `rows`
// rows of one decoder Generator at positions of their own. A source joins at the next step: admit
// runs the encoder once over the sources admitted together and keeps each one's cross-attention keys
// and values for its rows (its memory alone, unpadded: each row reads keys of its own length). Each
// step feeds one token to every running row in one feed_rows and advances each source's BeamSearch
// over its beam_size rows, whose caches are then copied as its beams were re-selected; a source
// leaves, freeing its rows, at the step its search is done. A source's hypotheses equal translate's
// for it with the same options (its scores up to rounding: the GEMMs' blocking by row count), except
// with dynamic NTK past max_position_embeddings, whose frequencies here stay those of that length.
//
//   model::TranslationBatch t(m, 32);
//   const int64_t id = t.admit({{.tokens = src, .options = o}})[0];   // when free_rows() >= o.beam_size
//   while (!t.empty()) for (auto& [done, hyps] : t.step()) ...;       // done == id: its nbest
class TranslationBatch {
 public:
  struct Source {
    std::vector<int64_t> tokens;  // at least one, without the eos
    DecodeOptions options;        // checked (check_decode_options)
    uint64_t stream = 0;          // beam 1's sampling stream (translate's: the source's index in its batch)
  };
  // m outlives this; rows: the rows decoded together (a source takes beam_size of them).
  TranslationBatch(Seq2Seq<float>& m, int64_t rows);
  ~TranslationBatch();
  int64_t rows() const { return static_cast<int64_t>(busy_.size()); }
  int64_t free_rows() const;
  bool empty() const { return running_.empty(); }
  // Admits the sources (together beam_size rows each, at most free_rows()) and returns their ids; the
  // first step feeds their decoder start token. Throws std::invalid_argument / std::out_of_range as
  // translate does, or std::length_error without the rows, before admitting any.
  std::vector<int64_t> admit(const std::vector<Source>& sources);
  // One decoding step of every running source: the sources done at this step, (id, nbest hypotheses
  // best first), their rows free again.
  std::vector<std::pair<int64_t, std::vector<Hypothesis>>> step();
  // Frees the rows of source `id` (its client is gone); false when it is not running.
  bool drop(int64_t id);
  // Frees every row (after a failed step: nothing runs on).
  void clear();
  // The rows the last step fed.
  int64_t last_rows() const { return last_rows_; }

 private:
  struct Running;
  Seq2Seq<float>& m_;
  Generator gen_;
  std::vector<char> busy_;  // (rows)
  std::vector<Running> running_;
  int64_t next_id_ = 0, last_rows_ = 0;
};

// Σ log p(target + eos | source) under teacher forcing: what a hypothesis's score is before length
// normalisation (tests, and scoring given translations).
double sequence_log_prob(Seq2Seq<float>& m, const std::vector<int64_t>& source,
                         const std::vector<int64_t>& target);

}  // namespace model
