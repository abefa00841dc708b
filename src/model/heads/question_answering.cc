// RoFormerForQuestionAnswering (extractive QA, SQuAD): a start and an end score per token,
//   h (B, T, H) → qa_outputs (2, H) → logits (B, T, 2): [..., 0] start, [..., 1] end,
// and HF's loss: (cross-entropy of the start position over the T tokens + that of the end) / 2,
// each averaged over the examples; a position outside [0, T) (HF clamps it to T, its ignore index)
// is not counted. Targets: (B, 2) start and end token. Tensors: qa_outputs.*.
#include <algorithm>
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
  const char* task() const override { return "question-answering"; }
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
  // Position metrics of the model rows (SQuAD's EM and F1 over answer texts need the contexts):
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
  std::string default_metric(const RoFormerConfig&) const override { return "exact_span"; }
};

}  // namespace

ROFORMER_DEFINE_HEAD(question_answering, QuestionAnsweringHead)

}  // namespace model
