// RoFormerForTokenClassification (named entities, part-of-speech tags): one label per token,
//   h (B, T, H) → dropout (hidden_dropout_prob) → classifier (L, H) → logits (B, T, L),
// and HF's loss: softmax cross-entropy averaged over the tokens whose target is not -100 (padding,
// special tokens and, by default, every sub-token but a word's first). Tensors: classifier.*.
#include <algorithm>

#include "model/head.h"

namespace model {
namespace {

template <typename T>
class TokenClassification : public HeadModule<T> {
 public:
  void bind(const RoFormerConfig& c, const std::vector<T*>& p, const std::vector<T*>& g) override {
    H_ = c.hidden_size, L_ = c.num_labels();
    p_ = {p[0], p[1]};
    if (!g.empty()) g_ = {g[0], g[1]};
  }
  void forward(T* logits, const HeadCall<T>& call) override {
    const int64_t N = call.B * call.S;
    grow_to(x_, N * H_);
    std::copy_n(call.h, N * H_, x_.data());
    head_dropout_forward(x_.data(), N * H_, call.dropout, 0, call.dropout.first(H_));
    dense_forward(logits, x_.data(), p_, N, H_, L_);  // (N, L)
  }
  void backward(T* dh, const T* dlogits, const HeadCall<T>& call) override {
    const int64_t N = call.B * call.S;
    grow_to(dx_, N * H_);
    dense_backward(dx_.data(), g_, dlogits, x_.data(), p_, N, H_, L_);
    head_dropout_backward(dx_.data(), dx_.data(), N * H_, call.dropout, 0, call.dropout.first(H_));
    for (int64_t i = 0; i < N * H_; ++i) dh[i] += dx_[i];
  }
  std::vector<HeadDense<T>> dense_layers() override { return {{&p_, L_, H_}}; }

 private:
  LinearParams<T> p_, g_;  // (L, H)
  int64_t H_ = 0, L_ = 0;
  std::vector<T> x_, dx_;  // (N, H): the hidden states after dropout; their gradient
};

class TokenClassificationHead : public HeadDef {
 public:
  const char* architecture() const override { return "RoFormerForTokenClassification"; }
  const char* task() const override { return "token-classification"; }
  std::vector<HeadTensor> tensors(const RoFormerConfig& c) const override {
    return {{"classifier.weight", {c.num_labels(), c.hidden_size}, true}, {"classifier.bias", {c.num_labels()}, false}};
  }
  std::vector<int64_t> logits_shape(const RoFormerConfig& c, int64_t B, int64_t T) const override {
    return {B, T, c.num_labels()};
  }
  std::unique_ptr<HeadModule<float>> make_f32() const override { return HeadModules<TokenClassification>::f32(); }
  std::unique_ptr<HeadModule<double>> make_f64() const override { return HeadModules<TokenClassification>::f64(); }
  HeadLoss loss(const RoFormerConfig& c, const float* z, int64_t B, int64_t T, const HeadTargets& t, int64_t,
                int64_t normaliser, float* dlogits) const override {
    return softmax_cross_entropy(z, B * T, c.num_labels(), t.ids, kIgnoreIndex, normaliser, dlogits);
  }
};

}  // namespace

const HeadDef& token_classification_head() {
  static const TokenClassificationHead head;
  return head;
}

}  // namespace model
