// A streaming text corpus for the trainer: one file, read by pread (never loaded whole, so corpora
// larger than memory work), split by bytes into a training part (the front) and a validation part
// (the last val_fraction, its start moved forward to a code-point boundary). Training batches are
// random windows whose offsets come from a counter-based RNG of (seed, step, row), so a batch is a
// pure function of (seed, step) and a run resumed at step s sees exactly the batches it would have
// seen; validation is a fixed, sequential tiling of the validation part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/char_tokenizer.h"

namespace data {

// B rows of T + 1 consecutive tokens, row-major (B, T+1): the inputs are [:, :T] and the next-token
// targets [:, 1:]. No padding: every row is a full window. word_start (B, T+1), when the source knows
// words (TokenCorpus), is 1 where a token begins a word (WordPiece: not a "##" piece); else empty.
struct Batch {
  std::vector<int32_t> tokens;
  int64_t B = 0, T = 0;
  std::vector<uint8_t> word_start;
  int32_t at(int64_t b, int64_t t) const { return tokens[static_cast<size_t>(b * (T + 1) + t)]; }
};

// What a language-modelling task reads: random training windows keyed by (seed, step), the fixed
// validation windows and the training part's token histogram. Corpus streams a file through a
// byte/char tokenizer; TokenCorpus holds ids tokenised beforehand (WordPiece).
class WindowSource {
 public:
  virtual ~WindowSource() = default;
  virtual Batch train_batch(uint64_t seed, int64_t step, int64_t B, int64_t T) const = 0;
  virtual std::vector<Batch> val_batches(int64_t B, int64_t T, int64_t max_batches) const = 0;
  virtual std::vector<double> train_unigram_counts() const = 0;
  virtual int64_t vocab_size() const = 0;
};

class Corpus : public WindowSource {
 public:
  // Opens `path` (kept open; the tokenizer is copied). val_fraction in [0, 1): 0 means no validation
  // part. chunk_bytes is the read size for sequential scans (tests make it tiny). Throws base::Error
  // naming the file: missing or unreadable, empty, or a split with no bytes on one side (the file is
  // too small for val_fraction); std::invalid_argument for a val_fraction outside [0, 1).
  Corpus(const std::string& path, const text::CharTokenizer& tok, double val_fraction = 0.05,
         size_t chunk_bytes = text::kDefaultChunkBytes);
  ~Corpus();
  Corpus(Corpus&& other) noexcept;
  Corpus& operator=(Corpus&& other) noexcept;
  Corpus(const Corpus&) = delete;
  Corpus& operator=(const Corpus&) = delete;

  // The batch for training step `step`: row r starts at a byte offset drawn uniformly (base::uniform01
  // of a key mixed from seed and step, index r) among the offsets whose window fits in the training
  // part, moved forward past at most 3 UTF-8 continuation bytes so it starts on a character, then
  // read with pread and tokenized to exactly T + 1 tokens. Windows never reach into the validation
  // part. Thread-safe (const, pread only). Throws std::invalid_argument for B < 1 or T < 1, and
  // base::Error when the training part holds fewer than T + 1 tokens.
  Batch train_batch(uint64_t seed, int64_t step, int64_t B, int64_t T) const override;

  // The fixed evaluation set: window w holds tokens [w·T, w·T + T + 1) of the validation part
  // (consecutive windows share one boundary token, so the targets tile the part: each token after
  // the first is predicted exactly once). Windows are grouped B to a batch in order, the last batch
  // possibly with fewer rows (its Batch::B says so); at most max_batches batches, and a trailing
  // remainder shorter than T + 1 tokens is dropped. Empty when the part holds fewer than T + 1 tokens.
  // Only as much of the part as needed is read.
  std::vector<Batch> val_batches(int64_t B, int64_t T, int64_t max_batches) const override;

  // Token-id histograms (length vocab_size) of the whole training / validation part, streamed in
  // chunks: the inputs of unigram_cross_entropy for the trainer's "unigram baseline".
  std::vector<double> train_unigram_counts() const override;
  std::vector<double> val_unigram_counts() const;
  int64_t vocab_size() const override { return tok_.vocab_size(); }

  int64_t file_bytes() const { return file_bytes_; }
  int64_t train_bytes() const { return val_begin_; }
  int64_t val_bytes() const { return file_bytes_ - val_begin_; }
  const text::CharTokenizer& tokenizer() const { return tok_; }
  const std::string& path() const { return path_; }

 private:
  // Reads up to n bytes at offset off, but nothing at or beyond `end`.
  std::string read(int64_t off, int64_t n, int64_t end) const;
  // Calls f(token) for every token of [begin, end) in order until f returns false.
  template <class F>
  void scan(int64_t begin, int64_t end, F&& f) const;
  std::vector<double> unigram_counts(int64_t begin, int64_t end) const;
  // The last offset in the training part from which T + 1 tokens can be read.
  int64_t last_train_start(int64_t T) const;
  // Tokenizes T + 1 tokens from `off` (after aligning it if asked); false if the part ends first.
  bool window(int64_t off, bool align, int64_t T, int32_t* out) const;

  std::string path_;
  text::CharTokenizer tok_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  int64_t val_begin_ = 0;  // training part [0, val_begin_), validation part [val_begin_, file_bytes_)
  size_t chunk_bytes_ = text::kDefaultChunkBytes;
};

// A corpus already tokenised, in memory: ids (N) in [0, vocab_size) and word_start (N, or empty when
// words are unknown). The last val_fraction of the tokens (rounded down) is the validation part.
// Windows follow Corpus's rules with tokens for bytes: training row r starts at token
// floor(uniform01(key(seed, step), r) · (last + 1)), the validation windows tile the part. Throws
// base::Error naming `name` when a part is empty, std::invalid_argument on ids outside the
// vocabulary or mismatched lengths.
class TokenCorpus : public WindowSource {
 public:
  TokenCorpus(std::vector<int32_t> ids, std::vector<uint8_t> word_start, int64_t vocab_size, double val_fraction,
              std::string name);
  Batch train_batch(uint64_t seed, int64_t step, int64_t B, int64_t T) const override;
  std::vector<Batch> val_batches(int64_t B, int64_t T, int64_t max_batches) const override;
  std::vector<double> train_unigram_counts() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t train_tokens() const { return val_begin_; }
  int64_t val_tokens() const { return static_cast<int64_t>(ids_.size()) - val_begin_; }

 private:
  Batch windows(const std::vector<int64_t>& starts, int64_t T) const;
  std::vector<int32_t> ids_;
  std::vector<uint8_t> word_start_;
  int64_t vocab_size_;
  int64_t val_begin_;
  std::string name_;
};

// Cross-entropy (nats/token) of the tokens counted in eval_counts under the add-one-smoothed unigram
// distribution of train_counts (both indexed by token id, same length): the loss of a model that
// ignores context, printed by the trainer as its "unigram baseline". Throws std::invalid_argument on
// mismatched lengths, negative counts or no eval tokens.
double unigram_cross_entropy(const std::vector<double>& train_counts, const std::vector<double>& eval_counts);

// The histogram (length vocab_size) of the target tokens [:, 1:] of `batches`: the eval_counts that
// match a loss averaged over exactly those batches.
std::vector<double> target_counts(const std::vector<Batch>& batches, int64_t vocab_size);

}  // namespace data
