// Extractive question answering's model rows ("features") from SQuAD examples, as transformers'
// run_qa prepares them with a fast tokenizer (prepare_train_features / prepare_validation_features):
// each row is [CLS] question [SEP] window [SEP], the windows covering the context's tokens with
// --doc-stride tokens of overlap (text::encode_windows). A row's targets are the start and end token of the
// example's first answer when the window holds all of it, else [CLS] (0) for both; its span feature
// gives the context tokens' character offsets for postprocess_qa (model/heads/question_answering.h).
// One deviation: when an answer starts in a window's last token, run_qa's scan walks on over [SEP] and
// padding (its own comment calls it an edge case); here the start stays on that last token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/labeled.h"
#include "model/config.h"
#include "model/heads/question_answering.h"
#include "text/roformer_tokenizer.h"
#include "train/classify_task.h"

namespace train {

struct QaFeatures {
  std::vector<TokenizedExample> rows;     // model rows; targets {start, end} when labelled
  std::vector<model::SpanFeature> spans;  // one per row: its example and the context tokens' offsets
  int64_t answers_lost = 0;  // labelled examples with an answer that no window holds whole (trained as no answer)
};

// The rows of every example, in example order. A question that leaves no window longer than
// doc_stride, or a token id outside the model's vocabulary, is a base::Error "origin:line: ...".
QaFeatures qa_features(const std::vector<data::SquadExample>& examples, const std::string& origin,
                       const text::RoFormerTokenizer& tok, const model::RoFormerConfig& cfg, int64_t max_length,
                       int64_t doc_stride, bool labelled);

}  // namespace train
