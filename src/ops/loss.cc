// Softmax cross-entropy forward/backward (see loss.h). Max-subtracted softmax; sums in double.
#include "loss.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace ops {

template <typename T>
double cross_entropy_forward(T* probs, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, int64_t* counted) {
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
      if (targets[n] != ignore_index) term[n] = std::log(sum) - (z[targets[n]] - zmax);  // −log softmax, without log(0)
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
                            int64_t ignore_index, int64_t counted, double dloss) {
  if (counted == 0) return;
  const double scale = dloss / counted;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) continue;
    T* d = dlogits + n * V;
    const T* p = probs + n * V;
    for (int64_t v = 0; v < V; ++v) d[v] += static_cast<T>(scale * (p[v] - (v == targets[n] ? 1.0 : 0.0)));
  }
}

template double cross_entropy_forward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                             int64_t*);
template double cross_entropy_forward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                              int64_t*);
template void cross_entropy_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                            int64_t, double);
template void cross_entropy_backward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                             int64_t, double);

}  // namespace ops
