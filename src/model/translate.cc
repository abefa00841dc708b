// Decoding for the encoder-decoder (see translate.h): the encoder once, the decoder's first feed,
// then decoding.h's search. Shapes: B sources, K beams, rows R = B·K, S tokens of the longest source
// (with its eos), V target vocabulary.
#include "translate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace model {
namespace {

void check_source(const Seq2Seq<float>& m, const std::vector<int64_t>& s) {
  if (s.empty()) throw std::invalid_argument("translate: an empty source");
  for (int64_t id : s) {
    if (id < 0 || id >= m.config().encoder.vocab_size) {
      throw std::out_of_range("source token " + std::to_string(id) + " is outside the vocabulary");
    }
  }
}

void check(const Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources, const DecodeOptions& o) {
  if (sources.empty()) throw std::invalid_argument("translate: no sources");
  check_decode_options(o);
  for (const auto& s : sources) check_source(m, s);
}

// The encoder over sources + eos, right-padded to S (the longest with its eos): ids and mask (B, S).
int64_t pad_sources(const Seq2SeqConfig& c, const std::vector<const std::vector<int64_t>*>& sources,
                    std::vector<int64_t>& src, std::vector<int64_t>& mask) {
  const int64_t B = static_cast<int64_t>(sources.size());
  int64_t S = 0;
  for (const auto* s : sources) S = std::max<int64_t>(S, static_cast<int64_t>(s->size()) + 1);
  src.assign(B * S, c.pad_token_id), mask.assign(B * S, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(sources[b]->size());
    std::copy(sources[b]->begin(), sources[b]->end(), src.begin() + b * S);
    src[b * S + n] = c.eos_token_id;
    std::fill_n(mask.begin() + b * S, n + 1, 1);
  }
  return S;
}

}  // namespace

int64_t translation_limit(const Seq2SeqConfig& c, int64_t tokens, const DecodeOptions& o) {
  int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.max_len_a * static_cast<double>(tokens + 1))) + o.max_len_b);
  // Learned positions end at max_position_embeddings: the decoder start takes one of them.
  if (c.decoder.position_encoding == PositionEncoding::learned) limit = std::min(limit, c.decoder.max_position_embeddings - 1);
  return limit;
}

std::vector<std::vector<Hypothesis>> translate(Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources,
                                               const DecodeOptions& o) {
  check(m, sources, o);
  const Seq2SeqConfig& c = m.config();
  const int64_t B = static_cast<int64_t>(sources.size()), R = B * o.beam_size;
  // The encoder, once: sources + eos, padded.
  std::vector<const std::vector<int64_t>*> ptrs;
  for (const auto& s : sources) ptrs.push_back(&s);
  std::vector<int64_t> src, mask, limit(B);
  const int64_t S = pad_sources(c, ptrs, src, mask);
  int64_t longest = 1;
  for (int64_t b = 0; b < B; ++b) {
    limit[b] = translation_limit(c, static_cast<int64_t>(sources[b].size()), o);
    longest = std::max(longest, limit[b]);
  }
  Inputs in;
  in.ids = src.data(), in.attention_mask = mask.data(), in.B = B, in.T = S;
  m.encoder().forward(in);
  Generator gen(m.decoder(), longest + 1, R);
  gen.set_memory(m.encoder().hidden_state(c.encoder.num_hidden_layers), mask.data(), B, S);
  const std::vector<float>& logits = gen.feed(std::vector<int64_t>(R, c.decoder_start_token_id));
  return decode(gen, logits, std::vector<std::vector<int64_t>>(B, {c.decoder_start_token_id}), limit, c.eos_token_id, o);
}

// A running source: its rows (its beams, in order), its search and the tokens its rows take next.
struct TranslationBatch::Running {
  int64_t id;
  std::vector<int64_t> rows;
  BeamSearch search;
  std::vector<int64_t> pending;
};

TranslationBatch::TranslationBatch(Seq2Seq<float>& m, int64_t rows)
    : m_(m), gen_(m.decoder(), m.config().decoder.max_position_embeddings, std::max<int64_t>(rows, 1)), busy_(std::max<int64_t>(rows, 1), 0) {
  if (rows < 1) throw std::invalid_argument("TranslationBatch: at least one row");
}

TranslationBatch::~TranslationBatch() = default;

int64_t TranslationBatch::free_rows() const { return static_cast<int64_t>(std::count(busy_.begin(), busy_.end(), 0)); }

std::vector<int64_t> TranslationBatch::admit(const std::vector<Source>& sources) {
  const Seq2SeqConfig& c = m_.config();
  int64_t need = 0, longest = 1;
  std::vector<int64_t> limit;
  for (const Source& s : sources) {
    check_decode_options(s.options);
    check_source(m_, s.tokens);
    need += s.options.beam_size;
    limit.push_back(translation_limit(c, static_cast<int64_t>(s.tokens.size()), s.options));
    longest = std::max(longest, limit.back());
  }
  if (sources.empty()) return {};
  if (need > free_rows()) {
    throw std::length_error("TranslationBatch: " + std::to_string(need) + " rows wanted, " + std::to_string(free_rows()) + " free");
  }
  gen_.reserve(longest + 1);  // the decoder start and the new tokens
  std::vector<const std::vector<int64_t>*> ptrs;
  for (const Source& s : sources) ptrs.push_back(&s.tokens);
  std::vector<int64_t> src, mask;
  Inputs in;
  in.B = static_cast<int64_t>(sources.size());
  in.T = pad_sources(c, ptrs, src, mask);
  in.ids = src.data(), in.attention_mask = mask.data();
  m_.encoder().forward(in);  // once for the sources admitted together
  const float* memory = m_.encoder().hidden_state(c.encoder.num_hidden_layers);
  const int64_t H = c.encoder.hidden_size;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Source& s = sources[i];
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < this->rows() && static_cast<int64_t>(rows.size()) < s.options.beam_size; ++r) {
      if (!busy_[r]) rows.push_back(r), busy_[r] = 1;
    }
    for (int64_t r : rows) gen_.release(r);
    // Its own memory, unpadded: its tokens and eos.
    gen_.set_row_memory(rows, memory + static_cast<int64_t>(i) * in.T * H, static_cast<int64_t>(s.tokens.size()) + 1);
    running_.push_back({next_id_, rows, BeamSearch({c.decoder_start_token_id}, limit[i], c.eos_token_id, s.options, s.stream),
                        std::vector<int64_t>(rows.size(), c.decoder_start_token_id)});
    ids.push_back(next_id_++);
  }
  return ids;
}

std::vector<std::pair<int64_t, std::vector<Hypothesis>>> TranslationBatch::step() {
  std::vector<std::pair<int64_t, std::vector<Hypothesis>>> done;
  std::vector<int64_t> rows, ids;
  for (const Running& s : running_) {
    rows.insert(rows.end(), s.rows.begin(), s.rows.end());
    ids.insert(ids.end(), s.pending.begin(), s.pending.end());
  }
  last_rows_ = static_cast<int64_t>(rows.size());
  if (rows.empty()) return done;
  const std::vector<float>& logits = gen_.feed_rows(rows, ids);  // (rows, V), each source's beams together
  const int64_t V = m_.config().decoder.vocab_size;
  int64_t at = 0;
  std::vector<Running> still;
  for (Running& s : running_) {
    const int64_t K = static_cast<int64_t>(s.rows.size());
    const bool finished = s.search.step(logits.data() + at * V, V);
    at += K;
    if (finished) {
      for (int64_t r : s.rows) gen_.release(r), busy_[r] = 0;
      done.emplace_back(s.id, s.search.best());
      continue;
    }
    std::vector<int64_t> from(K);  // the beams re-selected, within the source's rows
    for (int64_t k = 0; k < K; ++k) from[k] = s.rows[s.search.parents()[k]];
    gen_.copy_rows(s.rows, from);
    s.pending = s.search.tokens();
    still.push_back(std::move(s));
  }
  running_ = std::move(still);
  return done;
}

bool TranslationBatch::drop(int64_t id) {
  const auto it = std::find_if(running_.begin(), running_.end(), [id](const Running& s) { return s.id == id; });
  if (it == running_.end()) return false;
  for (int64_t r : it->rows) gen_.release(r), busy_[r] = 0;
  running_.erase(it);
  return true;
}

void TranslationBatch::clear() {
  for (int64_t r = 0; r < rows(); ++r) gen_.release(r), busy_[r] = 0;
  running_.clear();
}

double sequence_log_prob(Seq2Seq<float>& m, const std::vector<int64_t>& source, const std::vector<int64_t>& target) {
  const Seq2SeqConfig& c = m.config();
  std::vector<int64_t> src = source, dec = {c.decoder_start_token_id};
  src.push_back(c.eos_token_id);
  dec.insert(dec.end(), target.begin(), target.end());
  Seq2SeqInputs in;
  in.source = src.data(), in.decoder_input = dec.data(), in.B = 1;
  in.S = static_cast<int64_t>(src.size()), in.T = static_cast<int64_t>(dec.size());
  m.forward(in);
  const int64_t V = c.decoder.vocab_size;
  double sum = 0;
  for (int64_t t = 0; t < in.T; ++t) {
    const float* z = m.logits() + t * V;
    const double zmax = *std::max_element(z, z + V);
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(z[v] - zmax);
    sum += z[t + 1 < in.T ? dec[t + 1] : c.eos_token_id] - (zmax + std::log(se));  // decoding.cc's log_softmax
  }
  return sum;
}

}  // namespace model
