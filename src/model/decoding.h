// The one decoder of every generator (CTranslate2's decoding.cc shape): greedy decoding, sampling
// (temperature, top-k, top-p) and beam search (length penalty, early stopping, n-best, no-repeat
// n-grams, min/max length) over a Generator's feed/reorder (generate.h). The causal LM (generate
// below) and the encoder-decoder (translate.h) differ only in what they feed before the first step.
//
// Beam search follows Hugging Face's BeamSearchScorer (transformers 4.40), so that generate() on the
// exported models gives the same tokens:
//   - each step scores the beams' continuations by their summed log-probabilities and keeps the
//     2·beam best of a source; an eos among the first `beam` of them ends a hypothesis, the others
//     continue as the next beams (the first step starts from beam 0 alone);
//   - a finished hypothesis scores Σ log p / generated_len^length_penalty, generated_len counting its
//     new tokens and the eos (HF's convention; fairseq's counts the same tokens, so the two agree);
//   - early_stopping: a source is done once it holds `beam` finished hypotheses; without it, once no
//     running beam can beat the worst of them by HF's estimate (best Σ log p / current length^lp);
//   - at the length limit the running beams are finished as they are (no eos, not counted).
// Beam 1 is greedy decoding (or, with sample, ancestral sampling) through the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "model/generate.h"

namespace model {

// Bounds check_decode_options holds every request to: far above any useful setting, low enough that
// the beams' logits and the length limit stay finite, fast and in memory.
inline constexpr int64_t kMaxBeamSize = 1024;
inline constexpr double kMaxLenA = 1024.0;

struct DecodeOptions {
  int64_t beam_size = 4;        // 1: greedy (or sampling)
  double length_penalty = 1.0;  // exponent of the length normalisation
  bool early_stopping = false;  // HF's default
  int64_t nbest = 1;            // hypotheses returned per source (<= beam_size)
  // New tokens at most max_len_a · (source tokens + eos) + max_len_b (fairseq's convention; a causal
  // LM has no source: max_len_b alone), at least min_new_tokens before an eos.
  double max_len_a = 0;
  int64_t max_len_b = 200;
  int64_t min_new_tokens = 0;
  int64_t no_repeat_ngram_size = 0;  // > 0: no n-gram of this size occurs twice (prefix included)
  bool sample = false;               // beam 1: draw from softmax(logits / temperature), top_k, top_p
  double temperature = 1.0;
  int64_t top_k = 0;     // 0: the whole vocabulary
  double top_p = 1.0;    // the most probable tokens whose probabilities sum to at least top_p (HF)
  uint64_t seed = 0;     // source b draws from the counter stream mix64(seed ^ b), one draw a step
  std::vector<int64_t> banned;  // never produced (special tokens)
  bool operator==(const DecodeOptions&) const = default;  // requests decode together when equal (server)
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // the new tokens, without the eos
  double score = 0;             // Σ log p / generated_len^length_penalty
  bool finished = false;        // ended with eos (false: cut at the length limit)
};

// Throws std::invalid_argument naming the option when o is out of range.
void check_decode_options(const DecodeOptions& o);

// Draws one token from softmax(logits / temperature), restricted to the top_k largest and then to
// the top_p nucleus, never a banned one, using the uniform draw u in [0, 1); temperature 0 takes the
// largest (the lowest id among ties). −inf logits are never drawn. Throws std::invalid_argument when
// every token is banned or −inf, or on a negative temperature.
int64_t sample_token(const std::vector<float>& logits, const DecodeOptions& o, double u);

// One row's log-probabilities at a decoding step, as every search scores them: the log-softmax of its
// logits (V) in double, −inf for the banned tokens, the tokens that would repeat an n-gram of
// `history` (prefix included) and eos before min_new_tokens (step: the row's new tokens so far).
void step_log_probs(const float* logits, int64_t V, const std::vector<int64_t>& history, int64_t eos, int64_t step,
                    const DecodeOptions& o, std::vector<double>& logp);
// Beam 1's next token from step_log_probs: the argmax (the lowest id among ties) or, with o.sample, a
// draw from the counter stream mix64(o.seed ^ stream) at `step`. −1 when every token is −inf. decode
// picks source b's tokens with stream b; a server's sequence takes its own stream.
int64_t pick_token(const std::vector<double>& logp, const DecodeOptions& o, uint64_t stream, int64_t step);

// One source's search by the rules above (beam 1: greedy or sampling): its K = beam_size beams'
// histories and scores, and its finished hypotheses. decode runs one per source over a batch of
// rows; a step-level batcher (translate.h's TranslationBatch) runs one per source over rows of its own.
class BeamSearch {
 public:
  // prefix: the source's tokens so far (the history no-repeat n-grams look at); limit: new tokens at
  // most (<= 0: done at once, with one empty, unfinished hypothesis); eos < 0: none; stream: beam 1's
  // sampling stream (pick_token). o is copied.
  BeamSearch(const std::vector<int64_t>& prefix, int64_t limit, int64_t eos, const DecodeOptions& o, uint64_t stream);
  ~BeamSearch();
  BeamSearch(BeamSearch&&) noexcept;
  BeamSearch& operator=(BeamSearch&&) noexcept;
  // One step over the logits (K, V) of its beams, beam k's at logits + k·V. Returns whether the source
  // is done; while it is not, beam k continues the state beam parents()[k] had before this step (its
  // cache rows are copied so) and is fed tokens()[k] next.
  bool step(const float* logits, int64_t V);
  bool done() const { return done_; }
  const std::vector<int64_t>& parents() const { return parents_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }
  // The nbest hypotheses, best first (once done; moved out).
  std::vector<Hypothesis> best();

 private:
  struct Finished;
  void candidates(const float* logits, int64_t V);
  bool advance(const float* logits, int64_t V);
  std::vector<int64_t> generated_tokens(int64_t k) const;
  DecodeOptions o_;
  int64_t eos_, K_, limit_;
  uint64_t stream_;
  int64_t prefix_len_, step_ = 0;
  bool done_ = false;
  std::unique_ptr<Finished> finished_;
  std::vector<std::vector<int64_t>> history_;  // K: prefix + generated tokens
  std::vector<double> score_;                  // K: Σ log p of the generated tokens
  std::vector<int64_t> parents_, tokens_;      // K: this step's choice
  std::vector<double> next_score_, logp_;
  std::vector<std::pair<double, int64_t>> cand_;
};

// Decodes sources × beam_size rows of `gen` (source b's beams are consecutive rows) that have
// consumed their prefixes; `logits` (rows, V) is the output of the feed of their last tokens.
// prefixes[b]: source b's tokens so far (the history no-repeat n-grams look at); limits[b]: its new
// tokens at most; eos < 0: none (every hypothesis runs to its limit). Returns the nbest hypotheses
// of each source, best first (a source with limit 0: one empty, unfinished hypothesis).
std::vector<std::vector<Hypothesis>> decode(Generator& gen, const std::vector<float>& logits,
                                            const std::vector<std::vector<int64_t>>& prefixes,
                                            const std::vector<int64_t>& limits, int64_t eos, const DecodeOptions& o);

// Continues `prompt` (at least one token) with a causal LM by up to max_len_b tokens, stopping early
// when the context (capacity, 0: max_position_embeddings) is full, i.e. after min(max_len_b, context −
// prompt tokens) new tokens; returns the nbest hypotheses of new tokens. A prompt that fills the context
// (no room for one new token) is std::invalid_argument, not cut: callers say what they shorten. The
// prompt is fed once and its cache copied to the beams. With capacity 0 the KV cache holds the prompt plus max_len_b tokens (at most
// max_position_embeddings), and dynamic NTK's frequencies are those of that length.
std::vector<Hypothesis> generate(const RoFormer<float>& m, const std::vector<int64_t>& prompt, const DecodeOptions& o,
                                 int64_t eos = -1, int64_t capacity = 0);

}  // namespace model
