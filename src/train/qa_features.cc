// SQuAD features with a document stride (see qa_features.h).
#include "qa_features.h"

#include <algorithm>

#include "base/utf8.h"
#include "base/error.h"
#include "text/windows.h"

namespace train {

QaFeatures qa_features(const std::vector<data::SquadExample>& examples, const std::string& origin,
                       const text::RoFormerTokenizer& tok, const model::RoFormerConfig& cfg, int64_t max_length,
                       int64_t doc_stride, bool labelled) {
  QaFeatures out;
  for (size_t e = 0; e < examples.size(); ++e) {
    const data::SquadExample& x = examples[e];
    auto fail = [&](const std::string& what) { throw base::Error(origin + ":" + std::to_string(x.line) + ": " + what); };
    std::vector<text::Encoding> windows;
    try {
      windows = text::encode_windows(tok, x.question, x.context, max_length, doc_stride);
    } catch (const std::invalid_argument& err) {
      fail(std::string(err.what()) + " (raise --max-length or lower --doc-stride)");
    }
    // The first answer's characters [start_char, end_char) (run_qa trains on answers[0]).
    const bool answered = labelled && !x.answers.empty();
    const int64_t start_char = answered ? x.answers[0].start : 0;
    const int64_t end_char = answered ? start_char + static_cast<int64_t>(base::utf8_decode(x.answers[0].text).size()) : 0;
    bool held = false;
    for (const text::Encoding& w : windows) {
      TokenizedExample row;
      row.ids.assign(w.input_ids.begin(), w.input_ids.end());
      row.types.assign(w.token_type_ids.begin(), w.token_type_ids.end());
      check_token_ids(row.ids, cfg.vocab_size, origin + ":" + std::to_string(x.line));
      text::SecondSpans spans = text::second_spans(w);
      model::SpanFeature span{static_cast<int64_t>(e), std::move(spans.offsets), std::move(spans.words)};
      if (labelled) {
        row.targets = {0, 0};  // [CLS]: no answer in this window
        int64_t first = 0, last = -1;  // the window's context tokens
        for (int64_t t = 0; t < static_cast<int64_t>(w.size()); ++t) {
          if (!text::in_second(w, t)) continue;
          if (last < 0) first = t;
          last = t;
        }
        if (answered && last >= 0 && span.offsets[first][0] <= start_char && span.offsets[last][1] >= end_char) {
          int64_t s = first, t = last;
          while (s <= last && span.offsets[s][0] <= start_char) ++s;
          while (t >= first && span.offsets[t][1] >= end_char) --t;
          row.targets = {s - 1, t + 1};
          held = true;
        }
      }
      out.rows.push_back(std::move(row));
      out.spans.push_back(std::move(span));
    }
    if (answered && !held) ++out.answers_lost;
  }
  return out;
}

}  // namespace train
