// RoFormerForQuestionAnswering (extractive QA, SQuAD): a start and an end score per token,
//   h (B, T, H) → qa_outputs (2, H) → logits (B, T, 2): [..., 0] start, [..., 1] end,
// and HF's loss: (cross-entropy of the start position over the T tokens + that of the end) / 2,
// each averaged over the examples; a position outside [0, T) (HF clamps it to T, its ignore index)
// is not counted. Targets: (B, 2) start and end token. Tensors: qa_outputs.*.
#include "model/heads/question_answering.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/head.h"

namespace model {
namespace {

template <typename T>
class QuestionAnswering : public HeadModule<T> {
 public:
  void bind(const RoFormerConfig& c, const std::vector<T*>& p, const std::vector<T*>& g) override {
    H_ = c.hidden_size;
    p_ = head_dense(p, 0), g_ = head_dense(g, 0);
  }
  void forward(T* logits, const HeadCall<T>& call) override {
    h_ = call.h;  // the model keeps its last hidden state until the next forward
    dense_forward(logits, call.h, p_, call.B * call.S, H_, 2);  // (N, 2)
  }
  void backward(T* dh, const T* dlogits, const HeadCall<T>& call) override {
    const int64_t N = call.B * call.S;
    grow_to(dx_, N * H_);
    dense_backward(dx_.data(), g_, dlogits, h_, p_, N, H_, 2);
    for (int64_t i = 0; i < N * H_; ++i) dh[i] += dx_[i];
  }
  std::vector<HeadDense<T>> dense_layers() override { return {{&p_, 2, H_}}; }

 private:
  LinearParams<T> p_, g_;  // (2, H)
  int64_t H_ = 0;
  const T* h_ = nullptr;
  std::vector<T> dx_;  // (N, H)
};

class QuestionAnsweringHead : public HeadDef {
 public:
  const char* architecture() const override { return "RoFormerForQuestionAnswering"; }
  HeadTask task() const override { return HeadTask::question_answering; }
  std::vector<HeadTensor> tensors(const RoFormerConfig& c) const override {
    return {{"qa_outputs.weight", {2, c.hidden_size}, true}, {"qa_outputs.bias", {2}, false}};
  }
  std::vector<int64_t> logits_shape(const RoFormerConfig&, int64_t B, int64_t T) const override { return {B, T, 2}; }
  void validate(const RoFormerConfig& c) const override {
    if (c.labels.size() != 2) {
      throw std::invalid_argument("RoFormerForQuestionAnswering needs num_labels 2 (a start and an end score), got " +
                                  std::to_string(c.labels.size()));
    }
  }
  std::unique_ptr<HeadModule<float>> make_f32() const override { return HeadModules<QuestionAnswering>::f32(); }
  std::unique_ptr<HeadModule<double>> make_f64() const override { return HeadModules<QuestionAnswering>::f64(); }
  HeadLoss loss(const RoFormerConfig&, const float* z, int64_t B, int64_t T, const HeadTargets& t, int64_t,
                int64_t normaliser, float* dlogits) const override {
    std::vector<float> side(static_cast<size_t>(B * T)), d(dlogits ? side.size() : 0);
    std::vector<int64_t> target(static_cast<size_t>(B));
    HeadLoss out;
    if (dlogits) std::fill(dlogits, dlogits + B * T * 2, 0.0f);
    for (int64_t k = 0; k < 2; ++k) {  // start, then end: (B, T) logits each
      for (int64_t i = 0; i < B * T; ++i) side[i] = z[i * 2 + k];
      for (int64_t b = 0; b < B; ++b) {
        const int64_t pos = t.ids[b * 2 + k];
        target[b] = pos >= 0 && pos < T ? pos : kIgnoreIndex;
      }
      const HeadLoss s = softmax_cross_entropy(side.data(), B, T, target.data(), kIgnoreIndex, 2 * normaliser,
                                               dlogits ? d.data() : nullptr);
      out.sum += s.sum / 2;
      if (k == 0) out.count = s.count;
      if (dlogits) for (int64_t i = 0; i < B * T; ++i) dlogits[i * 2 + k] = d[i];
    }
    return out;
  }
  // Position metrics of the model rows (SQuAD's EM and F1 over answer texts need the contexts and
// the text layer's Unicode rules: fine-tuning adds them from postprocess_qa's answers):
  // start_accuracy and end_accuracy (the argmax is the labelled token) and exact_span (both are).
  std::map<std::string, double> metrics(const RoFormerConfig&, const std::vector<HeadOutputs>& batches,
                                        int64_t) const override {
    double start = 0, end = 0, both = 0, n = 0;
    for (const HeadOutputs& b : batches) {
      for (int64_t r = 0; r < b.B; ++r) {
        int64_t best[2] = {0, 0};
        for (int64_t t = 1; t < b.T; ++t) {
          for (int k = 0; k < 2; ++k) {
            if (b.logits[(r * b.T + t) * 2 + k] > b.logits[(r * b.T + best[k]) * 2 + k]) best[k] = t;
          }
        }
        const bool s = best[0] == b.ids[r * 2], e = best[1] == b.ids[r * 2 + 1];
        start += s, end += e, both += s && e, n += 1;
      }
    }
    auto mean = [&](double x) { return n > 0 ? x / n : 0; };
    return {{"start_accuracy", mean(start)}, {"end_accuracy", mean(end)}, {"exact_span", mean(both)}};
  }
  std::string default_metric(const RoFormerConfig&) const override { return "f1"; }  // SQuAD's F1
};

}  // namespace

ROFORMER_DEFINE_HEAD(question_answering, QuestionAnsweringHead)

std::vector<QaAnswer> postprocess_qa(int64_t examples, const std::vector<SpanFeature>& features,
                                     const std::vector<std::vector<float>>& logits, const QaPostprocess& o) {
  if (logits.size() != features.size()) throw std::invalid_argument("postprocess_qa: one logits row per feature");
  std::vector<std::vector<SpanAnswer>> proposed(static_cast<size_t>(examples));
  std::vector<SpanAnswer> null(static_cast<size_t>(examples));
  std::vector<bool> has_null(static_cast<size_t>(examples), false);
  // np.argsort(x)[-1:-n-1:-1]: the n largest, largest first; among equal values the later index first.
  auto top = [&](const std::vector<float>& z, int64_t k, int64_t T) {
    std::vector<int64_t> idx(static_cast<size_t>(T));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return z[a * 2 + k] < z[b * 2 + k]; });
    std::reverse(idx.begin(), idx.end());
    idx.resize(static_cast<size_t>(std::min<int64_t>(o.n_best, T)));
    return idx;
  };
  for (size_t f = 0; f < features.size(); ++f) {
    const SpanFeature& feat = features[f];
    const std::vector<float>& z = logits[f];
    const int64_t T = static_cast<int64_t>(feat.offsets.size());
    if (static_cast<int64_t>(z.size()) != 2 * T) throw std::invalid_argument("postprocess_qa: logits of another length");
    if (feat.example < 0 || feat.example >= examples) throw std::invalid_argument("postprocess_qa: feature of no example");
    if (T == 0) continue;
    const size_t e = static_cast<size_t>(feat.example);
    SpanAnswer n;
    n.null = true;
    n.start_logit = z[0], n.end_logit = z[1], n.score = z[0] + z[1];
    if (!has_null[e] || null[e].score > n.score) null[e] = n, has_null[e] = true;
    const std::vector<int64_t> starts = top(z, 0, T), ends = top(z, 1, T);
    for (const int64_t s : starts) {
      for (const int64_t t : ends) {
        if (feat.offsets[s][0] < 0 || feat.offsets[t][0] < 0) continue;  // outside the context
        if (t < s || t - s + 1 > o.max_answer_length) continue;
        SpanAnswer a;
        a.start = feat.offsets[s][0], a.end = feat.offsets[t][1];
        a.start_logit = z[s * 2], a.end_logit = z[t * 2 + 1], a.score = a.start_logit + a.end_logit;
        proposed[e].push_back(a);
      }
    }
  }
  std::vector<QaAnswer> out(static_cast<size_t>(examples));
  for (size_t e = 0; e < out.size(); ++e) {
    std::vector<SpanAnswer> p = std::move(proposed[e]);
    if (o.version_2 && has_null[e]) p.push_back(null[e]);
    std::stable_sort(p.begin(), p.end(), [](const SpanAnswer& a, const SpanAnswer& b) { return a.score > b.score; });
    if (static_cast<int64_t>(p.size()) > o.n_best) p.resize(static_cast<size_t>(o.n_best));
    if (o.version_2 && has_null[e] && std::none_of(p.begin(), p.end(), [](const SpanAnswer& a) { return a.null; })) {
      p.push_back(null[e]);
    }
    // A span's text is never empty (a token covers at least one character): only the null answer's is.
    if (p.empty() || (p.size() == 1 && p[0].null)) {
      SpanAnswer placeholder;
      placeholder.placeholder = true;
      p.insert(p.begin(), placeholder);
    }
    // np.exp(scores - max) / sum over the float32 scores (numpy keeps float32).
    float top_score = p[0].score;
    for (const SpanAnswer& a : p) top_score = std::max(top_score, a.score);
    float sum = 0;
    std::vector<float> w(p.size());
    for (size_t i = 0; i < p.size(); ++i) sum += w[i] = std::exp(p[i].score - top_score);
    for (size_t i = 0; i < p.size(); ++i) p[i].probability = w[i] / sum;
    QaAnswer& answer = out[e];
    if (!o.version_2) {
      answer.chosen = 0;  // never the null answer: v1.1 proposes none
    } else {
      size_t i = 0;
      while (i < p.size() && p[i].null) ++i;  // utils_qa: the first answer whose text is not ""
      if (i == p.size()) {
        answer.chosen = -1;
      } else {
        answer.null_score_diff = null[e].score - p[i].start_logit - p[i].end_logit;  // in float32, as numpy
        answer.chosen = answer.null_score_diff > o.null_threshold ? -1 : static_cast<int64_t>(i);
      }
    }
    answer.nbest = std::move(p);
  }
  return out;
}

std::vector<PipelineAnswer> pipeline_answers(const std::vector<SpanFeature>& windows,
                                             const std::vector<std::vector<float>>& logits,
                                             const QaPipelineOptions& o) {
  if (logits.size() != windows.size()) throw std::invalid_argument("pipeline_answers: one logits row per window");
  struct Candidate {
    PipelineAnswer answer;
    size_t window;
    int64_t s, e;
  };
  std::vector<Candidate> all;
  float null_score = 1000000;
  for (size_t w = 0; w < windows.size(); ++w) {
    const SpanFeature& f = windows[w];
    const int64_t T = static_cast<int64_t>(f.offsets.size());
    if (static_cast<int64_t>(logits[w].size()) != 2 * T || static_cast<int64_t>(f.words.size()) != T) {
      throw std::invalid_argument("pipeline_answers: logits or words of another length");
    }
    if (T == 0) continue;
    // Allowed: [CLS] (0) and the context. Masked to -10000, softmaxed per side (float32, as numpy).
    std::vector<float> p[2];
    for (int k = 0; k < 2; ++k) {
      p[k].resize(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) p[k][t] = t == 0 || f.offsets[t][0] >= 0 ? logits[w][t * 2 + k] : -10000.0f;
      const float top = *std::max_element(p[k].begin(), p[k].end());
      float sum = 0;
      for (float& v : p[k]) sum += v = std::exp(v - top);
      for (float& v : p[k]) v /= sum;
    }
    if (o.handle_impossible_answer) null_score = std::min(null_score, p[0][0] * p[1][0]);
    p[0][0] = p[1][0] = 0;
    // decode_spans: the top_k products over end >= start, end − start < max_answer_length, both ends allowed.
    std::vector<Candidate> spans;
    for (int64_t s = 0; s < T; ++s) {
      if (s != 0 && f.offsets[s][0] < 0) continue;
      for (int64_t e = s; e < T && e - s < o.max_answer_length; ++e) {
        if (e != 0 && f.offsets[e][0] < 0) continue;
        spans.push_back({{p[0][s] * p[1][e], 0, 0}, w, s, e});
      }
    }
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Candidate& a, const Candidate& b) { return a.answer.score > b.answer.score; });
    if (static_cast<int64_t>(spans.size()) > o.top_k) spans.resize(static_cast<size_t>(o.top_k));
    for (Candidate& c : spans) {
      // get_indices: whole words with align_to_words; [CLS] has no word, so a span from it falls back
      // to the offsets: (0, the end token's end), and (0, 0) for [CLS] alone.
      if (c.s == 0) {
        c.answer.start = 0, c.answer.end = c.e == 0 ? 0 : f.offsets[c.e][1];
      } else if (o.align_to_words) {
        int64_t a = c.s, b = c.e;
        while (a > 0 && f.words[a - 1] == f.words[c.s]) --a;
        while (b + 1 < T && f.words[b + 1] == f.words[c.e]) ++b;
        c.answer.start = f.offsets[a][0], c.answer.end = f.offsets[b][1];
      } else {
        c.answer.start = f.offsets[c.s][0], c.answer.end = f.offsets[c.e][1];
      }
      all.push_back(c);
    }
  }
  if (o.handle_impossible_answer) all.push_back({{null_score, 0, 0}, windows.size(), 0, 0});
  std::stable_sort(all.begin(), all.end(),
                   [](const Candidate& a, const Candidate& b) { return a.answer.score > b.answer.score; });
  if (static_cast<int64_t>(all.size()) > o.top_k) all.resize(static_cast<size_t>(o.top_k));
  std::vector<PipelineAnswer> out;
  for (const Candidate& c : all) out.push_back(c.answer);
  return out;
}

}  // namespace model
