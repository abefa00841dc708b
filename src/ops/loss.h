// Softmax cross-entropy over a vocabulary, with an ignore index (HF/PyTorch -100 for unmasked MLM
// positions and padding) and optional label smoothing. The loss is the mean over counted rows.
//
// Label smoothing ε (Szegedy et al. 2016; PyTorch's CrossEntropyLoss(label_smoothing=ε), HF's
// label_smoothing_factor): the target distribution is (1 − ε)·onehot + ε/V, so a row's loss is
// (1 − ε)·(−log p_target) + ε·mean_v(−log p_v). fairseq spreads ε over the V − 1 other classes
// instead; the two differ by ε/V·(V−1)/V on the target, negligible for subword vocabularies.
#pragma once

#include <cstdint>

namespace ops {

// probs (N, V) = softmax(logits (N, V)); returns mean over rows whose target != ignore_index of
// −log probs[target], and their number in *counted (0 rows → loss 0). Targets must be in [0, V) or
// ignore_index (std::out_of_range otherwise).
template <typename T>
double cross_entropy_forward(T* probs, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, int64_t* counted, double label_smoothing = 0);

// dlogits (N, V) += dloss / counted · (probs − ((1 − ε)·onehot(target) + ε/V)) on counted rows.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int64_t* targets, int64_t N, int64_t V,
                            int64_t ignore_index, int64_t counted, double dloss, double label_smoothing = 0);

}  // namespace ops
