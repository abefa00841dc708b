// RoFormerForMultipleChoice (SWAG, C3): each of an example's C choices is a model row of its own
// ([CLS] context [SEP] ending [SEP]), scored by one output on HF's SequenceSummary with RoFormer's
// config, which takes the LAST position of the padded row (summary_type "last", no projection, no
// activation, no dropout):
//   h[:, T − 1] (B, H) → classifier (1, H) → logits (B) = (examples, C) row-major,
// and softmax cross-entropy over each example's C scores; accuracy over examples. Tensors: classifier.*.
#include <algorithm>

#include "model/head.h"

namespace model {
namespace {

template <typename T>
class MultipleChoice : public HeadModule<T> {
 public:
  void bind(const RoFormerConfig& c, const std::vector<T*>& p, const std::vector<T*>& g) override {
    H_ = c.hidden_size;
    p_ = head_dense(p, 0), g_ = head_dense(g, 0);
  }
  void forward(T* logits, const HeadCall<T>& call) override {
    const int64_t B = call.B;
    grow_to(last_, B * H_);
    for (int64_t b = 0; b < B; ++b) std::copy_n(call.h + (b * call.S + call.S - 1) * H_, H_, last_.data() + b * H_);
    dense_forward(logits, last_.data(), p_, B, H_, 1);  // (B, 1)
  }
  void backward(T* dh, const T* dlogits, const HeadCall<T>& call) override {
    const int64_t B = call.B;
    grow_to(dlast_, B * H_);
    dense_backward(dlast_.data(), g_, dlogits, last_.data(), p_, B, H_, 1);
    for (int64_t b = 0; b < B; ++b) {
      T* row = dh + (b * call.S + call.S - 1) * H_;
      for (int64_t i = 0; i < H_; ++i) row[i] += dlast_[b * H_ + i];
    }
  }
  std::vector<HeadDense<T>> dense_layers() override { return {{&p_, 1, H_}}; }

 private:
  LinearParams<T> p_, g_;  // (1, H)
  int64_t H_ = 0;
  std::vector<T> last_, dlast_;  // (B, H): each row's last hidden state; its gradient
};

class MultipleChoiceHead : public HeadDef {
 public:
  const char* architecture() const override { return "RoFormerForMultipleChoice"; }
  HeadTask task() const override { return HeadTask::multiple_choice; }
  bool uses_labels() const override { return false; }
  std::vector<HeadTensor> tensors(const RoFormerConfig& c) const override {
    return {{"classifier.weight", {1, c.hidden_size}, true}, {"classifier.bias", {1}, false}};
  }
  std::vector<int64_t> logits_shape(const RoFormerConfig&, int64_t B, int64_t) const override { return {B, 1}; }
  std::unique_ptr<HeadModule<float>> make_f32() const override { return HeadModules<MultipleChoice>::f32(); }
  std::unique_ptr<HeadModule<double>> make_f64() const override { return HeadModules<MultipleChoice>::f64(); }
  HeadLoss loss(const RoFormerConfig&, const float* z, int64_t B, int64_t, const HeadTargets& t, int64_t choices,
                int64_t normaliser, float* dlogits) const override {
    return softmax_cross_entropy(z, B / choices, choices, t.ids, kIgnoreIndex, normaliser, dlogits);
  }
  // Accuracy: the fraction of examples whose highest-scoring choice is the labelled one.
  std::map<std::string, double> metrics(const RoFormerConfig&, const std::vector<HeadOutputs>& batches,
                                        int64_t choices) const override {
    double right = 0, n = 0;
    for (const HeadOutputs& b : batches) {
      for (int64_t e = 0; e < b.B / choices; ++e) {
        const float* z = b.logits.data() + e * choices;
        right += std::max_element(z, z + choices) - z == b.ids[e], n += 1;
      }
    }
    return {{"accuracy", n > 0 ? right / n : 0}};
  }
  std::string default_metric(const RoFormerConfig&) const override { return "accuracy"; }
};

}  // namespace

ROFORMER_DEFINE_HEAD(multiple_choice, MultipleChoiceHead)

}  // namespace model
