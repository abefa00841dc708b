// RoFormerForSequenceClassification: HF's RoFormerClassificationHead on the first token,
//   h[:, 0] (B, H) → dropout → dense (H, H) → hidden_act → dropout → out_proj (L, H) → logits (B, L),
// with HF's problem_type losses: single_label_classification (softmax cross-entropy),
// multi_label_classification (sigmoid binary cross-entropy averaged over the labels) and regression
// (squared error of the one output). Tensors: classifier.dense.*, classifier.out_proj.*.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/head.h"
#include "model/metrics.h"

namespace model {
namespace {

template <typename T>
class SequenceClassification : public HeadModule<T> {
 public:
  void bind(const RoFormerConfig& c, const std::vector<T*>& p, const std::vector<T*>& g) override {
    H_ = c.hidden_size, L_ = c.num_labels();
    p_ = {head_dense(p, 0), head_dense(p, 2)}, g_ = {head_dense(g, 0), head_dense(g, 2)};
  }
  void forward(T* logits, const HeadCall<T>& call) override {
    const int64_t B = call.B, H = H_, L = L_;
    for (auto* v : {&cls_, &dense_, &act_}) grow_to(*v, B * H);
    for (int64_t b = 0; b < B; ++b) std::copy_n(call.h + b * call.S * H, H, cls_.data() + b * H);  // (B, H)
    const uint64_t first = static_cast<uint64_t>(call.dropout.row0 * H);
    head_dropout_forward(cls_.data(), B * H, call.dropout, 0, first);
    dense_forward(dense_.data(), cls_.data(), p_.dense, B, H, H);
    activation_forward(*call.config, act_.data(), dense_.data(), B * H);
    head_dropout_forward(act_.data(), B * H, call.dropout, 1, first);
    dense_forward(logits, act_.data(), p_.out, B, H, L);  // (B, L)
  }
  void backward(T* dh, const T* dlogits, const HeadCall<T>& call) override {
    const int64_t B = call.B, H = H_, L = L_;
    const uint64_t first = static_cast<uint64_t>(call.dropout.row0 * H);
    for (auto* v : {&d_act_, &d_dense_, &d_cls_}) grow_to(*v, B * H);
    dense_backward(d_act_.data(), g_.out, dlogits, act_.data(), p_.out, B, H, L);
    head_dropout_backward(d_act_.data(), d_act_.data(), B * H, call.dropout, 1, first);
    activation_backward(*call.config, d_dense_.data(), dense_.data(), d_act_.data(), B * H);
    dense_backward(d_cls_.data(), g_.dense, d_dense_.data(), cls_.data(), p_.dense, B, H, H);
    head_dropout_backward(d_cls_.data(), d_cls_.data(), B * H, call.dropout, 0, first);
    for (int64_t b = 0; b < B; ++b) {
      T* row = dh + b * call.S * H;
      for (int64_t i = 0; i < H; ++i) row[i] += d_cls_[b * H + i];
    }
  }
  std::vector<HeadDense<T>> dense_layers() override { return {{&p_.dense, H_, H_}, {&p_.out, L_, H_}}; }

 private:
  struct Params {
    LinearParams<T> dense, out;  // (H, H), (L, H)
  } p_, g_;
  int64_t H_ = 0, L_ = 0;
  std::vector<T> cls_, dense_, act_;        // (B, H): the first token after dropout; dense; activation after dropout
  std::vector<T> d_act_, d_dense_, d_cls_;  // their gradients
};

class SequenceClassificationHead : public HeadDef {
 public:
  const char* architecture() const override { return "RoFormerForSequenceClassification"; }
  HeadTask task() const override { return HeadTask::text_classification; }
  std::vector<HeadTensor> tensors(const RoFormerConfig& c) const override {
    const int64_t H = c.hidden_size, L = c.num_labels();
    return {{"classifier.dense.weight", {H, H}, true}, {"classifier.dense.bias", {H}, false},
            {"classifier.out_proj.weight", {L, H}, true}, {"classifier.out_proj.bias", {L}, false}};
  }
  std::vector<int64_t> logits_shape(const RoFormerConfig& c, int64_t B, int64_t) const override {
    return {B, c.num_labels()};
  }
  void validate(const RoFormerConfig& c) const override {
    const ProblemType p = c.problem_type;
    if (p == ProblemType::none) {
      throw std::invalid_argument("a sequence classifier needs a problem_type "
                                  "(single_label_classification, multi_label_classification, regression)");
    }
    if (p == ProblemType::regression && c.labels.size() != 1) throw std::invalid_argument("regression needs num_labels 1");
    if (p == ProblemType::single_label_classification && c.labels.size() < 2) {
      throw std::invalid_argument("single-label classification needs at least 2 labels");
    }
  }
  std::unique_ptr<HeadModule<float>> make_f32() const override { return HeadModules<SequenceClassification>::f32(); }
  std::unique_ptr<HeadModule<double>> make_f64() const override { return HeadModules<SequenceClassification>::f64(); }

  HeadLoss loss(const RoFormerConfig& c, const float* z, int64_t B, int64_t, const HeadTargets& t, int64_t,
                int64_t normaliser, float* dlogits) const override {
    const int64_t L = c.num_labels();
    if (c.problem_type == ProblemType::single_label_classification) {
      HeadLoss s = softmax_cross_entropy(z, B, L, t.ids, kIgnoreIndex, normaliser, dlogits);
      s.count = B;
      return s;
    }
    const double scale = normaliser > 0 ? 1.0 / static_cast<double>(normaliser) : 0.0;
    HeadLoss s;
    s.count = B;
    for (int64_t i = 0; i < B * L; ++i) {
      const double x = z[i], y = t.values[i];
      if (c.problem_type == ProblemType::regression) {
        s.sum += (x - y) * (x - y);
        if (dlogits) dlogits[i] = static_cast<float>(2 * (x - y) * scale);
      } else {  // BCE with logits, stable: max(x, 0) − x·y + log(1 + e^−|x|), averaged over the labels
        s.sum += (std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)))) / static_cast<double>(L);
        if (dlogits) dlogits[i] = static_cast<float>((1 / (1 + std::exp(-x)) - y) / static_cast<double>(L) * scale);
      }
    }
    return s;
  }
  std::map<std::string, double> metrics(const RoFormerConfig& c, const std::vector<HeadOutputs>& batches,
                                        int64_t) const override {
    std::vector<float> logits, values;
    std::vector<int64_t> classes;
    for (const HeadOutputs& b : batches) {
      logits.insert(logits.end(), b.logits.begin(), b.logits.end());
      classes.insert(classes.end(), b.ids.begin(), b.ids.end());
      values.insert(values.end(), b.values.begin(), b.values.end());
    }
    return classification_metrics(c.problem_type, c.num_labels(), logits, classes, values);
  }
  std::string default_metric(const RoFormerConfig& c) const override {
    return c.problem_type == ProblemType::regression                   ? "pearson"
           : c.problem_type == ProblemType::multi_label_classification ? "f1_micro"
                                                                       : "accuracy";
  }
};

}  // namespace

ROFORMER_DEFINE_HEAD(sequence_classification, SequenceClassificationHead)

}  // namespace model
