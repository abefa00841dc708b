// Streaming corpus with a train/validation split (see corpus.h).
#include "corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "base/error.h"
#include "base/random.h"
#include "base/utf8.h"

namespace data {
namespace {

// Mixed into the seed so that the window stream differs from other consumers of the same seed
// (MLM masking draws uniform01(mix64(seed), i); without this, row r of step 0 would reuse draw r).
constexpr uint64_t kWindowDomain = 0x636f727075735f77ull;  // "corpus_w"
// A window of T + 1 char tokens spans at most this many bytes (4 per code point).
constexpr int64_t kMaxBytesPerChar = 4;
// Forward alignment skips at most this many continuation bytes (a UTF-8 character has at most 3).
constexpr int64_t kMaxSkip = 3;

void check_shape(int64_t B, int64_t T) {
  if (B < 1 || T < 1) {
    throw std::invalid_argument("batch shape needs B >= 1 and T >= 1, got B = " + std::to_string(B) +
                                ", T = " + std::to_string(T));
  }
}

int64_t skip_continuations(const std::string& buf) {
  int64_t skip = 0;
  while (skip < kMaxSkip && skip < static_cast<int64_t>(buf.size()) &&
         base::utf8_is_continuation(static_cast<uint8_t>(buf[static_cast<size_t>(skip)]))) {
    ++skip;
  }
  return skip;
}

}  // namespace

Corpus::Corpus(const std::string& path, const text::CharTokenizer& tok, double val_fraction, size_t chunk_bytes)
    : path_(path), tok_(tok), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)) {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    throw std::invalid_argument("val_fraction must lie in [0, 1), got " + std::to_string(val_fraction));
  }
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw base::Error(path + ": cannot open: " + std::strerror(errno));
  // The destructor does not run for a throwing constructor, so every failure below closes fd_ here.
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw base::Error(path + ": not a regular file");
    file_bytes_ = static_cast<int64_t>(st.st_size);
    if (file_bytes_ == 0) throw base::Error(path + ": empty file");
    const auto val_len = static_cast<int64_t>(std::llround(static_cast<double>(file_bytes_) * val_fraction));
    val_begin_ = file_bytes_ - val_len;
    if (val_fraction > 0 && val_begin_ < file_bytes_) {
      // Move the split forward onto a character, so neither part starts or ends inside one.
      val_begin_ += skip_continuations(read(val_begin_, kMaxSkip, file_bytes_));
    }
    if (val_fraction > 0 && val_begin_ >= file_bytes_) {
      throw base::Error(path + ": validation part is empty: " + std::to_string(file_bytes_) +
                      " bytes are too few for val_fraction " + std::to_string(val_fraction));
    }
    if (val_begin_ == 0) throw base::Error(path + ": training part is empty (" + std::to_string(file_bytes_) + " bytes)");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

Corpus::~Corpus() {
  if (fd_ >= 0) ::close(fd_);
}

Corpus::Corpus(Corpus&& o) noexcept
    : path_(std::move(o.path_)), tok_(std::move(o.tok_)), fd_(o.fd_), file_bytes_(o.file_bytes_),
      val_begin_(o.val_begin_), chunk_bytes_(o.chunk_bytes_) {
  o.fd_ = -1;
}

Corpus& Corpus::operator=(Corpus&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_), tok_ = std::move(o.tok_), fd_ = o.fd_;
    file_bytes_ = o.file_bytes_, val_begin_ = o.val_begin_, chunk_bytes_ = o.chunk_bytes_;
    o.fd_ = -1;
  }
  return *this;
}

std::string Corpus::read(int64_t off, int64_t n, int64_t end) const {
  n = std::max<int64_t>(0, std::min(n, end - off));
  std::string buf(static_cast<size_t>(n), '\0');
  int64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, buf.data() + done, static_cast<size_t>(n - done), off + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw base::Error(path_ + ": read error at offset " + std::to_string(off + done) + ": " +
                                 std::strerror(errno));
    if (got == 0) {
      throw base::Error(path_ + ": unexpected end of file at offset " + std::to_string(off + done) +
                      " (was it truncated while in use?)");
    }
    done += got;
  }
  return buf;
}

template <class F>
void Corpus::scan(int64_t begin, int64_t end, F&& f) const {
  std::string carry;  // an unfinished character from the previous chunk (< 4 bytes)
  std::vector<int32_t> ids;
  for (int64_t pos = begin; pos < end;) {
    const std::string chunk = read(pos, static_cast<int64_t>(chunk_bytes_), end);
    pos += static_cast<int64_t>(chunk.size());
    const std::string buf = carry + chunk;
    ids.clear();
    const size_t used = tok_.encode_some(buf, pos >= end, buf.size(), &ids);
    for (int32_t id : ids) {
      if (!f(id)) return;
    }
    carry = buf.substr(used);
  }
}

std::vector<double> Corpus::unigram_counts(int64_t begin, int64_t end) const {
  std::vector<uint64_t> n(static_cast<size_t>(tok_.vocab_size()), 0);
  scan(begin, end, [&](int32_t id) {
    ++n[static_cast<size_t>(id)];
    return true;
  });
  return std::vector<double>(n.begin(), n.end());
}

std::vector<double> Corpus::train_unigram_counts() const { return unigram_counts(0, val_begin_); }
std::vector<double> Corpus::val_unigram_counts() const { return unigram_counts(val_begin_, file_bytes_); }

bool Corpus::window(int64_t off, bool align, int64_t T, int32_t* out) const {
  const int64_t n_tokens = T + 1;
  const int64_t per_token = tok_.level() == text::CharTokenizer::Level::Byte ? 1 : kMaxBytesPerChar;
  const std::string buf = read(off, n_tokens * per_token + (align ? kMaxSkip : 0), val_begin_);
  const int64_t skip = align ? skip_continuations(buf) : 0;
  const bool at_end = off + static_cast<int64_t>(buf.size()) >= val_begin_;
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n_tokens));
  tok_.encode_some(std::string_view(buf).substr(static_cast<size_t>(skip)), at_end, static_cast<size_t>(n_tokens),
                   &ids);
  if (static_cast<int64_t>(ids.size()) < n_tokens) return false;
  std::copy(ids.begin(), ids.end(), out);
  return true;
}

int64_t Corpus::last_train_start(int64_t T) const {
  const int64_t n_tokens = T + 1, end = val_begin_;
  auto too_small = [&](const std::string& holds) {
    return base::Error(path_ + ": training part (" + std::to_string(end) + " bytes, " + holds +
                     ") is too small for one window of T + 1 = " + std::to_string(n_tokens) + " tokens");
  };
  if (tok_.level() == text::CharTokenizer::Level::Byte) {
    if (end < n_tokens) throw too_small(std::to_string(end) + " tokens");
    // Step back onto the start of a character, so that any earlier offset, aligned forward, stays at
    // or before this one (for valid UTF-8; otherwise train_batch falls back to this offset unaligned).
    const int64_t last = end - n_tokens;
    const int64_t from = std::max<int64_t>(0, last - kMaxSkip);
    const std::string buf = read(from, last - from + 1, end);
    for (int64_t p = last; p >= from; --p) {
      if (!base::utf8_is_continuation(static_cast<uint8_t>(buf[static_cast<size_t>(p - from)]))) return p;
    }
    return last;
  }
  // Char level: decode the last 4·(T+1) + 3 bytes (enough for T + 1 characters after aligning) and
  // return where the (T+1)-th last token starts. Decoding is left to right and depends only on the
  // position, so a window read from there reproduces exactly these T + 1 tokens.
  const int64_t from = std::max<int64_t>(0, end - (n_tokens * kMaxBytesPerChar + kMaxSkip));
  const std::string buf = read(from, end - from, end);
  const auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  std::vector<int64_t> starts;
  for (int64_t i = skip_continuations(buf), n = static_cast<int64_t>(buf.size()); i < n;) {
    starts.push_back(from + i);
    char32_t cp;
    i += base::utf8_next(p + i, static_cast<size_t>(n - i), true, &cp);
  }
  if (static_cast<int64_t>(starts.size()) < n_tokens) throw too_small(std::to_string(starts.size()) + " tokens");
  return starts[starts.size() - static_cast<size_t>(n_tokens)];
}

Batch Corpus::train_batch(uint64_t seed, int64_t step, int64_t B, int64_t T) const {
  check_shape(B, T);
  const int64_t last = last_train_start(T);
  Batch batch{std::vector<int32_t>(static_cast<size_t>(B * (T + 1))), B, T, {}};
  const uint64_t key = base::mix64(base::mix64(seed ^ kWindowDomain) + static_cast<uint64_t>(step));
  const double n_offsets = static_cast<double>(last + 1);
  for (int64_t r = 0; r < B; ++r) {
    const double u = base::uniform01(key, static_cast<uint64_t>(r));
    const int64_t off = std::min(last, static_cast<int64_t>(u * n_offsets));
    int32_t* row = batch.tokens.data() + r * (T + 1);
    // Near the end an aligned window can come up short (only with invalid UTF-8, whose decoding does
    // not resynchronise like valid UTF-8); the last start is then used as is, which always fits.
    if (!window(off, true, T, row) && !window(last, false, T, row)) {
      throw std::logic_error(path_ + ": internal error: no window fits at offset " + std::to_string(last));
    }
  }
  return batch;
}

std::vector<Batch> Corpus::val_batches(int64_t B, int64_t T, int64_t max_batches) const {
  check_shape(B, T);
  if (max_batches < 0) throw std::invalid_argument("max_batches must be >= 0, got " + std::to_string(max_batches));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t max_windows = max_batches > kMax / B ? kMax : max_batches * B;
  const int64_t need = max_windows > (kMax - 1) / T ? kMax : max_windows * T + 1;  // tokens for all windows
  std::vector<int32_t> ids;
  if (max_windows > 0) {
    scan(val_begin_, file_bytes_, [&](int32_t id) {
      ids.push_back(id);
      return static_cast<int64_t>(ids.size()) < need;
    });
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t windows = n < T + 1 ? 0 : std::min(max_windows, (n - 1) / T);
  std::vector<Batch> batches;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    const int64_t rows = std::min(B, windows - w0);
    Batch b{std::vector<int32_t>(static_cast<size_t>(rows * (T + 1))), rows, T, {}};
    for (int64_t r = 0; r < rows; ++r) {
      const auto first = ids.begin() + (w0 + r) * T;
      std::copy(first, first + T + 1, b.tokens.begin() + r * (T + 1));
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

TokenCorpus::TokenCorpus(std::vector<int32_t> ids, std::vector<uint8_t> word_start, int64_t vocab_size,
                         double val_fraction, std::string name)
    : ids_(std::move(ids)), word_start_(std::move(word_start)), vocab_size_(vocab_size), name_(std::move(name)) {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    throw std::invalid_argument("val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  }
  if (!word_start_.empty() && word_start_.size() != ids_.size()) {
    throw std::invalid_argument("TokenCorpus: word_start must be empty or as long as ids");
  }
  for (const int32_t id : ids_) {
    if (id < 0 || id >= vocab_size_) {
      throw std::invalid_argument("TokenCorpus: id " + std::to_string(id) + " outside the vocabulary of " +
                                  std::to_string(vocab_size_));
    }
  }
  const auto n = static_cast<int64_t>(ids_.size());
  val_begin_ = n - static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  if (val_begin_ == 0) throw base::Error(name_ + ": no tokens to train on");
  if (val_fraction > 0 && val_begin_ == n) {
    throw base::Error(name_ + ": " + std::to_string(n) + " tokens are too few for a validation part of " +
                      std::to_string(val_fraction));
  }
}

Batch TokenCorpus::windows(const std::vector<int64_t>& starts, int64_t T) const {
  const auto rows = static_cast<int64_t>(starts.size());
  Batch b{std::vector<int32_t>(static_cast<size_t>(rows * (T + 1))), rows, T, {}};
  if (!word_start_.empty()) b.word_start.resize(b.tokens.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(ids_.begin() + starts[r], T + 1, b.tokens.begin() + r * (T + 1));
    if (!word_start_.empty()) std::copy_n(word_start_.begin() + starts[r], T + 1, b.word_start.begin() + r * (T + 1));
  }
  return b;
}

Batch TokenCorpus::train_batch(uint64_t seed, int64_t step, int64_t B, int64_t T) const {
  check_shape(B, T);
  if (val_begin_ < T + 1) {
    throw base::Error(name_ + ": the training part holds " + std::to_string(val_begin_) +
                      " tokens, fewer than one window of " + std::to_string(T + 1));
  }
  const int64_t last = val_begin_ - (T + 1);
  const uint64_t key = base::mix64(base::mix64(seed ^ kWindowDomain) + static_cast<uint64_t>(step));
  std::vector<int64_t> starts(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) {
    const double u = base::uniform01(key, static_cast<uint64_t>(r));
    starts[r] = std::min(last, static_cast<int64_t>(u * static_cast<double>(last + 1)));
  }
  return windows(starts, T);
}

std::vector<Batch> TokenCorpus::val_batches(int64_t B, int64_t T, int64_t max_batches) const {
  check_shape(B, T);
  if (max_batches < 0) throw std::invalid_argument("max_batches must be >= 0, got " + std::to_string(max_batches));
  const int64_t n = val_tokens();
  const int64_t windows_in_part = n < T + 1 ? 0 : (n - 1) / T;
  const int64_t windows_wanted = max_batches > windows_in_part / B + 1 ? windows_in_part : max_batches * B;
  const int64_t count = std::min(windows_in_part, windows_wanted);
  std::vector<Batch> batches;
  for (int64_t w0 = 0; w0 < count; w0 += B) {
    std::vector<int64_t> starts;
    for (int64_t w = w0; w < std::min(count, w0 + B); ++w) starts.push_back(val_begin_ + w * T);
    batches.push_back(windows(starts, T));
  }
  return batches;
}

std::vector<double> TokenCorpus::train_unigram_counts() const {
  std::vector<double> counts(static_cast<size_t>(vocab_size_));
  for (int64_t i = 0; i < val_begin_; ++i) counts[ids_[i]] += 1;
  return counts;
}

double unigram_cross_entropy(const std::vector<double>& train_counts, const std::vector<double>& eval_counts) {
  if (train_counts.size() != eval_counts.size() || train_counts.empty()) {
    throw std::invalid_argument("unigram_cross_entropy: count vectors must be non-empty and of equal length (" +
                                std::to_string(train_counts.size()) + " vs " + std::to_string(eval_counts.size()) +
                                ")");
  }
  double train_total = 0, eval_total = 0;
  for (size_t v = 0; v < train_counts.size(); ++v) {
    if (!(train_counts[v] >= 0 && eval_counts[v] >= 0)) {
      throw std::invalid_argument("unigram_cross_entropy: counts must be non-negative");
    }
    train_total += train_counts[v];
    eval_total += eval_counts[v];
  }
  if (eval_total <= 0) throw std::invalid_argument("unigram_cross_entropy: no eval tokens");
  const double denom = train_total + static_cast<double>(train_counts.size());
  double nll = 0;
  for (size_t v = 0; v < train_counts.size(); ++v) {
    if (eval_counts[v] > 0) nll -= eval_counts[v] * std::log((train_counts[v] + 1) / denom);
  }
  return nll / eval_total;
}

std::vector<double> target_counts(const std::vector<Batch>& batches, int64_t vocab_size) {
  std::vector<double> n(static_cast<size_t>(std::max<int64_t>(vocab_size, 0)), 0.0);
  for (const Batch& b : batches) {
    for (int64_t r = 0; r < b.B; ++r) {
      for (int64_t t = 1; t <= b.T; ++t) {
        const int32_t id = b.at(r, t);
        if (id < 0 || id >= vocab_size) {
          throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
        }
        ++n[static_cast<size_t>(id)];
      }
    }
  }
  return n;
}

}  // namespace data
