// Softmax cross-entropy forward/backward (see loss.h). Max-subtracted softmax; sums in double.
#include "loss.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace ops {

template <typename T>
double cross_entropy_forward(T* probs, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, int64_t* counted, double label_smoothing) {
  if (!(label_smoothing >= 0 && label_smoothing < 1)) throw std::invalid_argument("label smoothing must be in [0, 1)");
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] != ignore_index && (targets[n] < 0 || targets[n] >= V)) {
      throw std::out_of_range("target " + std::to_string(targets[n]) + " at position " + std::to_string(n) +
                              " is outside [0, " + std::to_string(V) + ")");
    }
  }
  // Per-row terms summed afterwards in row order: the loss does not depend on the thread count
  // (an OpenMP reduction combines the threads' partial sums in whatever order they finish).
  std::vector<double> term(N, 0.0);
#pragma omp parallel
  {
    std::vector<double> e(V);  // e^(z − max) of a row, evaluated once
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* z = logits + n * V;
      T* p = probs + n * V;
      double zmax = z[0];
      for (int64_t v = 1; v < V; ++v) zmax = z[v] > zmax ? z[v] : zmax;
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) {
        e[v] = std::exp(z[v] - zmax);
        sum += e[v];
      }
      for (int64_t v = 0; v < V; ++v) p[v] = static_cast<T>(e[v] / sum);
      if (targets[n] == ignore_index) continue;
      const double lse = std::log(sum);  // −log p_v = lse − (z_v − zmax), without log(0)
      term[n] = lse - (z[targets[n]] - zmax);
      if (label_smoothing > 0) {
        double mean_nll = 0;
        for (int64_t v = 0; v < V; ++v) mean_nll += lse - (z[v] - zmax);
        term[n] = (1 - label_smoothing) * term[n] + label_smoothing * mean_nll / static_cast<double>(V);
      }
    }
  }
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) continue;
    total += term[n];
    ++count;
  }
  *counted = count;
  return count > 0 ? total / count : 0.0;
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int64_t* targets, int64_t N, int64_t V,
                            int64_t ignore_index, int64_t counted, double dloss, double label_smoothing) {
  if (counted == 0) return;
  const double scale = dloss / counted, uniform = label_smoothing / static_cast<double>(V), hit = 1 - label_smoothing;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) continue;
    T* d = dlogits + n * V;
    const T* p = probs + n * V;
    for (int64_t v = 0; v < V; ++v) d[v] += static_cast<T>(scale * (p[v] - uniform - (v == targets[n] ? hit : 0.0)));
  }
}

template double cross_entropy_forward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                             int64_t*, double);
template double cross_entropy_forward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                              int64_t*, double);
template void cross_entropy_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                            int64_t, double, double);
template void cross_entropy_backward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                             int64_t, double, double);

}  // namespace ops
