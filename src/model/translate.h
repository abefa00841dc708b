// Decoding for the encoder-decoder (seq2seq.h): batched beam search, greedy decoding and sampling,
// over the decoder's KV cache (generate.h). The encoder runs once per batch; each layer's
// cross-attention keys and values are computed once per source and shared by its beams; the
// self-attention caches are reordered whenever beams are pruned.
//
// Beam search follows Hugging Face's BeamSearchScorer (transformers 4.40), so that generate() on the
// exported EncoderDecoderModel gives the same tokens:
//   - each step scores the beams' continuations by their summed log-probabilities and keeps the
//     2·beam best of a source; an eos among the first `beam` of them ends a hypothesis, the others
//     continue as the next beams (the first step starts from beam 0 alone);
//   - a finished hypothesis scores Σ log p / generated_len^length_penalty, generated_len counting its
//     tokens and the eos (HF's convention; fairseq's counts the same tokens, so the two agree);
//   - early_stopping: a source is done once it holds `beam` finished hypotheses; without it, once no
//     running beam can beat the worst of them by HF's estimate (best Σ log p / current length^lp);
//   - at the length limit the running beams are finished as they are (no eos, not counted).
// The length limit of a source is max_len_a · (its tokens + eos) + max_len_b new tokens (fairseq's
// convention), and with learned positions at most max_position_embeddings − 1; HF's max_length for
// the same limit is that plus one (the decoder start token).
#pragma once

#include <cstdint>
#include <vector>

#include "model/seq2seq.h"

namespace model {

struct DecodeOptions {
  int64_t beam_size = 4;        // 1: greedy (or sampling)
  double length_penalty = 1.0;  // exponent of the length normalisation
  bool early_stopping = false;  // HF's default
  int64_t nbest = 1;            // hypotheses returned per source (<= beam_size)
  double max_len_a = 0;         // new tokens at most a · source length + b
  int64_t max_len_b = 200;
  int64_t no_repeat_ngram_size = 0;  // > 0: no n-gram of this size occurs twice (decoder start included)
  bool sample = false;               // beam 1: draw from softmax(logits / temperature), top_k of them
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // without the decoder start and the eos
  double score = 0;             // Σ log p / generated_len^length_penalty
  bool finished = false;        // ended with eos (false: cut at the length limit)
};

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
