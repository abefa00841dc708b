// Translation of texts with an encoder-decoder directory (see translator.h).
#include "translator.h"

#include <algorithm>
#include <numeric>

#include "io/weights.h"

namespace serve {

std::unique_ptr<Translator> Translator::load(const std::string& dir, const LoadOptions& options) {
  auto m = model::load_seq2seq(dir);
  auto sp = std::make_unique<text::SentencePiece>(text::SentencePiece::load(dir + "/spm.model"));
  if (sp->vocab_size() > m->config().encoder.vocab_size) {
    throw io::Error(dir + "/spm.model: " + std::to_string(sp->vocab_size()) + " pieces do not fit the model's vocabulary of " +
                    std::to_string(m->config().encoder.vocab_size));
  }
  m->encoder().set_keep(model::Keep::outputs);  // inference: activation memory independent of depth
  const bool int8_checkpoint = io::open_weights(dir)->has_int8_tensors();
  // The arena is kept: the encoder and decoder views share the embeddings and their owner's arena.
  model::prepare_for_inference(m->encoder(), options, int8_checkpoint, false);
  model::prepare_for_inference(m->decoder(), options, int8_checkpoint, false);
  return std::unique_ptr<Translator>(new Translator(std::move(m), std::move(sp)));
}

std::vector<std::vector<Translation>> Translator::translate(const std::vector<std::string>& texts,
                                                            const model::DecodeOptions& o, int64_t batch) {
  const size_t n = texts.size();
  std::vector<std::vector<int64_t>> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = sp_->encode(texts[i]);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  std::vector<std::vector<Translation>> out(n);
  size_t at = 0;
  while (at < n && ids[order[at]].empty()) out[order[at++]] = {Translation{}};  // nothing to translate
  for (; at < n; at += static_cast<size_t>(batch)) {
    const size_t end = std::min(n, at + static_cast<size_t>(batch));
    std::vector<std::vector<int64_t>> sources;
    for (size_t i = at; i < end; ++i) sources.push_back(ids[order[i]]);
    const auto hyps = model::translate(*m_, sources, o);
    for (size_t i = at; i < end; ++i) {
      for (const model::Hypothesis& h : hyps[i - at]) out[order[i]].push_back({sp_->decode(h.tokens), h.score, h.tokens, h.finished});
    }
  }
  return out;
}

}  // namespace serve
