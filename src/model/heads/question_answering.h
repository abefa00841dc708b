// Extractive question answering's answers from the QA head's logits: transformers'
// postprocess_qa_predictions (examples/pytorch/question-answering/utils_qa.py), which run_qa evaluates
// with. An example's context may be split into several features (windows, --doc-stride); each
// feature's start and end logits propose spans (the n_best largest start and end logits, pairs inside
// the context with end >= start and at most max_answer_length tokens, scored start + end logit), the
// spans of all the example's features are ranked by score (ties keep proposal order) and the top
// n_best kept, with their softmax probabilities. v1.1 answers the best span; v2.0 also keeps the null
// answer (the smallest [CLS] start + end logit over the features) and answers nothing when the null
// score exceeds the best span's by more than null_threshold.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace model {

// One feature (one model row) of an example: its token offsets into the example's context.
struct SpanFeature {
  int64_t example = 0;
  // (T) per token: [start, end) in code points of the context; {-1, -1} for tokens outside the context
  // (question, [CLS], [SEP], padding).
  std::vector<std::array<int64_t, 2>> offsets;
  // (T) per token: the context word it belongs to (a word = a token and the "##" pieces after it in
  // the window), -1 outside the context; for the pipeline's align_to_words. May be empty otherwise.
  std::vector<int64_t> words;
};

struct QaPostprocess {
  int64_t n_best = 20, max_answer_length = 30;
  bool version_2 = false;     // SQuAD v2.0: the null answer competes
  double null_threshold = 0;  // v2.0: answer "" when null score − best span score > this
};

struct SpanAnswer {
  int64_t start = 0, end = 0;  // [start, end) code points of the context; 0, 0 for the null answer
  float start_logit = 0, end_logit = 0, score = 0;  // float32 sums, as numpy adds the logits
  double probability = 0;  // softmax of the scores over the example's n-best
  bool null = false;         // v2.0's null answer (text "")
  bool placeholder = false;  // utils_qa's {"text": "empty"} when nothing else was proposed: its text is "empty"
};

struct QaAnswer {
  std::vector<SpanAnswer> nbest;  // best first
  int64_t chosen = -1;            // index into nbest of the answer; -1: no answer ("")
  float null_score_diff = 0;      // v2.0: null score − the best non-null answer's start and end logits
};

// The answers of `examples` examples. features[f] had logits[f] = (T_f, 2) start/end logits
// (the QA head's layout), T_f = features[f].offsets.size(). An example without features gets the
// placeholder alone.
std::vector<QaAnswer> postprocess_qa(int64_t examples, const std::vector<SpanFeature>& features,
                                     const std::vector<std::vector<float>>& logits, const QaPostprocess& options);

// transformers' question-answering pipeline (QuestionAnsweringPipeline.postprocess, v4.40), which
// scores differently from run_qa: per window, the start and end logits outside the context (but
// [CLS]) are masked, each side is softmaxed, a span scores start probability × end probability
// (end >= start, at most max_answer_length tokens), [CLS] is dropped after its product is kept as the
// null score; spans snap to whole words (align_to_words); the top_k spans over all windows win,
// with the null answer among them when handle_impossible_answer.
struct QaPipelineOptions {
  int64_t top_k = 1;
  int64_t max_answer_length = 15;
  bool handle_impossible_answer = false;
  bool align_to_words = true;
};

struct PipelineAnswer {
  double score = 0;
  int64_t start = 0, end = 0;  // code points of the context; 0, 0 for no answer
};

// One example's answers, best first, from its windows (SpanFeature::words filled) and their logits
// (T_f, 2). Ties keep window order, then start, then end (numpy's argpartition leaves them unordered).
// One difference: transformers takes each window's top_k over every (start, end) pair and only then
// drops those outside the context, so it can return fewer than top_k answers; here the top_k come
// from the allowed pairs (the same answers whenever a window has top_k spans of positive score).
std::vector<PipelineAnswer> pipeline_answers(const std::vector<SpanFeature>& windows,
                                             const std::vector<std::vector<float>>& logits,
                                             const QaPipelineOptions& options);

}  // namespace model
