// Translation of texts with an encoder-decoder directory (see translator.h).
#include "translator.h"

#include <algorithm>
#include <numeric>

#include "load/model_dir.h"

namespace infer {

std::unique_ptr<Translator> Translator::load(const std::string& dir, const LoadOptions& options) {
  load::Request r;
  r.inference = static_cast<const model::LinearOptions&>(options);
  load::Seq2Seq m = load::seq2seq(dir, r);
  return std::unique_ptr<Translator>(new Translator(std::move(m.model), std::move(m.tokenizer)));
}

std::vector<std::vector<Translation>> Translator::translate(const std::vector<std::string>& texts,
                                                            const model::DecodeOptions& o, int64_t batch) {
  std::vector<std::vector<int64_t>> ids;
  for (const std::string& t : texts) ids.push_back(encode(t));
  return translate_encoded(ids, o, batch);
}

std::vector<std::vector<Translation>> Translator::translate_encoded(const std::vector<std::vector<int64_t>>& ids,
                                                                    const model::DecodeOptions& o, int64_t batch) {
  return translate_batched(*m_, *sp_, ids, o, batch);
}

std::vector<std::vector<Translation>> translate_batched(model::Seq2Seq<float>& m, const text::SentencePiece& subwords,
                                                        const std::vector<std::vector<int64_t>>& ids,
                                                        const model::DecodeOptions& o, int64_t batch) {
  const size_t n = ids.size();
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
    const auto hyps = model::translate(m, sources, o);
    for (size_t i = at; i < end; ++i) {
      for (const model::Hypothesis& h : hyps[i - at]) {
        out[order[i]].push_back({subwords.decode(h.tokens), h.score, h.tokens, h.finished});
      }
    }
  }
  return out;
}

}  // namespace infer
