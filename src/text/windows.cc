// Overlapping windows of a sentence pair's second text (see windows.h).
#include "windows.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace text {

std::vector<Encoding> encode_windows(const RoFormerTokenizer& tok, std::string_view first, std::string_view second,
                                     int64_t max_length, int64_t stride) {
  if (tok.cls_id() < 0 || tok.sep_id() < 0) {
    throw std::invalid_argument("a question and its context need the tokenizer's [CLS] and [SEP] tokens, and " +
                                std::string(tok.cls_id() < 0 ? "cls_token" : "sep_token") + " is not set");
  }
  EncodeOptions plain;  // each text on its own: no specials, no truncation
  plain.add_special_tokens = false;
  const Encoding a = tok.encode(first, plain), b = tok.encode(second, plain);
  const int64_t na = static_cast<int64_t>(a.size()), nb = static_cast<int64_t>(b.size());
  const int64_t W = max_length - na - 3;
  // As the tokenizers library: the stride matters only when the second text is cut into windows.
  if (W <= 0 || (nb > W && W <= stride)) {
    throw std::invalid_argument("the question has " + std::to_string(na) + " tokens, which leaves " +
                                std::to_string(std::max<int64_t>(W, 0)) + " tokens of the context a window of " +
                                std::to_string(max_length) + ": a window must hold more than the stride of " +
                                std::to_string(stride));
  }
  std::vector<Encoding> out;
  for (int64_t begin = 0;; begin += W - stride) {
    const int64_t end = std::min(begin + W, nb);
    Encoding e;
    auto put = [&](const std::string& token, int32_t id, int32_t type, bool special, std::pair<int64_t, int64_t> at) {
      e.tokens.push_back(token);
      e.input_ids.push_back(id);
      e.token_type_ids.push_back(type);
      e.attention_mask.push_back(1);
      e.special_tokens_mask.push_back(special);
      e.offsets.push_back(at);
    };
    put(tok.config().cls_token.content, tok.cls_id(), 0, true, {0, 0});
    for (int64_t t = 0; t < na; ++t) put(a.tokens[t], a.input_ids[t], 0, false, a.offsets[t]);
    put(tok.config().sep_token.content, tok.sep_id(), 0, true, {0, 0});
    for (int64_t t = begin; t < end; ++t) put(b.tokens[t], b.input_ids[t], 1, false, b.offsets[t]);
    put(tok.config().sep_token.content, tok.sep_id(), 1, true, {0, 0});
    out.push_back(std::move(e));
    if (end == nb) break;
  }
  return out;
}

SecondSpans second_spans(const Encoding& w) {
  SecondSpans s;
  s.offsets.assign(w.size(), {-1, -1});
  s.words.assign(w.size(), -1);
  int64_t word = -1;
  for (size_t t = 0; t < w.size(); ++t) {
    if (!in_second(w, t)) continue;
    s.offsets[t] = {w.offsets[t].first, w.offsets[t].second};
    const bool continues = w.tokens[t].rfind("##", 0) == 0 && t > 0 && in_second(w, t - 1);
    s.words[t] = continues ? word : ++word;
  }
  return s;
}

}  // namespace text
