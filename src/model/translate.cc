// Decoding for the encoder-decoder (see translate.h): the encoder once, the decoder's first feed,
// then decoding.h's search. Shapes: B sources, K beams, rows R = B·K, S tokens of the longest source
// (with its eos), V target vocabulary.
#include "translate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace model {
namespace {

void check(const Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources, const DecodeOptions& o) {
  if (sources.empty()) throw std::invalid_argument("translate: no sources");
  check_decode_options(o);
  for (const auto& s : sources) {
    if (s.empty()) throw std::invalid_argument("translate: an empty source");
    for (int64_t id : s) {
      if (id < 0 || id >= m.config().encoder.vocab_size) {
        throw std::out_of_range("source token " + std::to_string(id) + " is outside the vocabulary");
      }
    }
  }
}

}  // namespace

std::vector<std::vector<Hypothesis>> translate(Seq2Seq<float>& m, const std::vector<std::vector<int64_t>>& sources,
                                               const DecodeOptions& o) {
  check(m, sources, o);
  const Seq2SeqConfig& c = m.config();
  const int64_t B = static_cast<int64_t>(sources.size()), R = B * o.beam_size;
  // The encoder, once: sources + eos, padded.
  int64_t S = 0;
  for (const auto& s : sources) S = std::max<int64_t>(S, static_cast<int64_t>(s.size()) + 1);
  std::vector<int64_t> src(B * S, c.pad_token_id), mask(B * S, 0), limit(B);
  int64_t longest = 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(sources[b].size());
    std::copy(sources[b].begin(), sources[b].end(), src.begin() + b * S);
    src[b * S + n] = c.eos_token_id;
    std::fill_n(mask.begin() + b * S, n + 1, 1);
    limit[b] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.max_len_a * static_cast<double>(n + 1))) + o.max_len_b);
    // Learned positions end at max_position_embeddings: the decoder start takes one of them.
    if (c.decoder.position_encoding == PositionEncoding::learned) {
      limit[b] = std::min(limit[b], c.decoder.max_position_embeddings - 1);
    }
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
