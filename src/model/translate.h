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

// Σ log p(target + eos | source) under teacher forcing: what a hypothesis's score is before length
// normalisation (tests, and scoring given translations).
double sequence_log_prob(Seq2Seq<float>& m, const std::vector<int64_t>& source,
                         const std::vector<int64_t>& target);

}  // namespace model
