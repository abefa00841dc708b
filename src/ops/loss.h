// Softmax cross-entropy over a vocabulary, with an ignore index (HF/PyTorch -100 for unmasked MLM
// positions and padding). The loss is the mean over counted rows.
#pragma once

#include <cstdint>

namespace ops {

// probs (N, V) = softmax(logits (N, V)); returns mean over rows whose target != ignore_index of
// −log probs[target], and their number in *counted (0 rows → loss 0). Targets must be in [0, V) or
// ignore_index (std::out_of_range otherwise).
template <typename T>
double cross_entropy_forward(T* probs, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, int64_t* counted);

// dlogits (N, V) += dloss / counted · (probs − onehot(target)) on counted rows.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int64_t* targets, int64_t N, int64_t V,
                            int64_t ignore_index, int64_t counted, double dloss);

}  // namespace ops
